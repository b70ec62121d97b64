// Models: each overfits one batch, learns copy quickly, ignores padding, and round-trips its config
// (checkpoints are the train layer's: tests/train).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"
#include "tests/models/model_fixtures.hpp"

using namespace tapegrad;

namespace {

using test::copy_training;
using test::temp_dir;
using test::tiny;

const models::ModelKind kAllKinds[] = {models::ModelKind::rnn, models::ModelKind::attention_rnn,
                                       models::ModelKind::transformer};

}  // namespace

TEST_CASE("each model overfits one small batch", "[models]") {
  for (auto kind : kAllKinds) {
    CAPTURE(models::model_name(kind));
    const auto task = data::make_task("reverse", {4, 7, 6});
    Generator g(5);
    std::vector<data::Example> ex;
    for (int i = 0; i < 8; ++i) ex.push_back(task->sample(g));
    const data::Batch batch = data::make_batch(ex);
    auto model = models::make_model(tiny(kind, task->vocab().size()), 1);
    optim::Adam opt(model->named_parameters(), {.lr = 1e-2});
    train::StepRecipe recipe;
    recipe.lr = 1e-2;
    double first = 0, last = 0;
    for (int step = 1; step <= 150; ++step) {
      last = train::train_step(*model, opt, recipe, batch, step).loss;
      if (step == 1) first = last;
    }
    CHECK(first > 1.0);
    CHECK(last < 0.05);
  }
}

TEST_CASE("each model learns copy to high accuracy within seconds", "[models]") {
  for (auto kind : kAllKinds) {
    CAPTURE(models::model_name(kind));
    const train::TrainOptions o =
        copy_training(tiny(kind, 0), {3, 6, 5}, kind == models::ModelKind::transformer ? 300 : 600, 200);
    train::Session s = train::make_session(o);
    train::EvalResult last;
    train::train(s, nullptr, [&](int64_t, const train::EvalResult& r) { last = r; });
    INFO((last.samples.empty() ? std::string() : last.samples[0]));
    CHECK(last.exact_match >= 0.9);
    CHECK(last.token_accuracy >= 0.95);
  }
}

TEST_CASE("padding does not change the loss of the real tokens", "[models]") {
  for (auto kind : kAllKinds) {
    CAPTURE(models::model_name(kind));
    auto model = models::make_model(tiny(kind, 12), 3);
    model->to(DType::f64);
    model->eval();
    const data::Example a{{4, 5, 6}, {6, 5}}, longer{{4, 5, 6, 7, 8, 9, 10}, {7, 8, 9, 10, 11, 4}};
    const data::Batch alone = data::make_batch({a});
    const data::Batch padded = data::make_batch({a, longer});
    const Tensor la = model->logits(alone);   // [1, T, V]
    const Tensor lp = model->logits(padded);  // [2, T', V], T' > T
    const int64_t T = la.size(1);
    const double loss_alone = cross_entropy(la, alone.tgt_out, data::kPad).item();
    const double loss_padded =
        cross_entropy(narrow(narrow(lp, 0, 0, 1), 1, 0, T), narrow(narrow(padded.tgt_out, 0, 0, 1), 1, 0, T)).item();
    CHECK(loss_padded == Approx(loss_alone).epsilon(1e-10));
  }
}

TEST_CASE("Transformer greedy decoding with its KV cache matches the full decoder", "[models]") {
  // Each token the cached, one-position-at-a-time decoder picks must be the argmax of the
  // teacher-forced decoder run over the whole prefix (float64: no near-ties), and where it stopped
  // early, <eos> must be that argmax too. Sources of different lengths exercise the padding mask.
  const bool norm_first = GENERATE(false, true);
  const auto pos = GENERATE(nn::PositionalKind::sinusoidal, nn::PositionalKind::learned);
  CAPTURE(norm_first, int(pos));
  models::ModelConfig c = tiny(models::ModelKind::transformer, 12);
  c.layers = 2, c.norm_first = norm_first, c.positional = pos;
  auto model = models::make_model(c, 11);
  model->to(DType::f64);
  model->eval();
  const std::vector<data::Example> ex = {{{4, 5, 6}, {}}, {{7, 8, 9, 10, 11, 4, 5}, {}}, {{6}, {}}};
  const data::Batch batch = data::make_batch(ex);
  const int64_t max_len = 12;
  const auto out = model->greedy_decode(batch.src, batch.src_len, max_len);
  REQUIRE(out.size() == ex.size());
  for (size_t b = 0; b < ex.size(); ++b) {
    CAPTURE(b, out[b].size());
    const data::Batch one = data::make_batch({{ex[b].src, out[b]}});
    const Tensor lg = model->logits(one).contiguous();  // [1, n + 1, V]
    const int64_t n = int64_t(out[b].size()), V = lg.size(2);
    const std::vector<double> v = lg.to_vector();
    for (int64_t t = 0; t <= n && t < max_len; ++t) {
      const auto row = v.begin() + t * V;
      const int64_t best = std::max_element(row, row + V) - row;
      CAPTURE(t);
      CHECK(best == (t < n ? out[b][size_t(t)] : data::kEos));
    }
  }
}

TEST_CASE("checkpointed layers: one step's loss and every gradient are bitwise those of the plain layers, "
          "dropout on", "[models][checkpoint]") {
  // Each layer's dropout draws from the model's generator; the recomputation in backward must draw the
  // same masks, and the generator must go on from where forward left it. Sources of different lengths
  // give the encoder and decoder layers a padding mask to capture.
  using models::ModelKind;
  const auto [kind, norm_first] =
      GENERATE(table<ModelKind, bool>({{ModelKind::transformer, false}, {ModelKind::transformer, true},
                                       {ModelKind::gpt, true}}));
  CAPTURE(models::model_name(kind), norm_first);
  const data::Batch batch =
      kind == ModelKind::gpt
          ? data::make_block_batch(data::text_blocks({4, 5, 6, 7, 8, 9, 10, 11, 4, 6, 8, 10}, {0, 3}, 8))
          : data::make_batch({{{4, 5, 6}, {6, 5, 4}}, {{7, 8, 9, 10, 11, 4}, {4, 11, 10, 9, 8, 7}}});
  struct Step {
    double loss;
    std::vector<std::pair<std::string, std::vector<double>>> grads;
    std::vector<uint64_t> rng_after;
  };
  auto step = [&](bool checkpointed) {
    models::ModelConfig c = tiny(kind, 12);
    c.layers = 2, c.dropout = 0.3, c.norm_first = norm_first, c.checkpoint_layers = checkpointed;
    auto model = models::make_model(c, 7);
    model->train();
    const Tensor loss = model->loss(batch);
    backward(loss);
    Step r{loss.item(), {}, model->generator().state()};
    for (const auto& [name, p] : model->named_parameters()) {
      REQUIRE(p.grad().defined());
      r.grads.emplace_back(name, p.grad().to_vector());
    }
    return r;
  };
  const Step plain = step(false), checkpointed = step(true);
  CHECK(checkpointed.loss == plain.loss);
  CHECK(checkpointed.rng_after == plain.rng_after);
  REQUIRE(checkpointed.grads.size() == plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    CAPTURE(plain.grads[i].first);
    CHECK(checkpointed.grads[i].first == plain.grads[i].first);
    CHECK(checkpointed.grads[i].second == plain.grads[i].second);
  }
  // The layers draw masks at all: without dropout the loss differs.
  models::ModelConfig no_dropout = tiny(kind, 12);
  no_dropout.layers = 2, no_dropout.dropout = 0.0, no_dropout.norm_first = norm_first;
  CHECK(models::make_model(no_dropout, 7)->loss(batch).item() != plain.loss);
}

TEST_CASE("model config JSON round-trips and is validated", "[models]") {
  models::ModelConfig c = tiny(models::ModelKind::attention_rnn, 20);
  c.cell = nn::CellKind::lstm;
  c.score = nn::AttentionScore::dot;
  const auto back = models::ModelConfig::from_json(c.to_json());
  CHECK(back.to_json() == c.to_json());
  c.heads = 3;
  c.kind = models::ModelKind::transformer;
  CHECK_THROWS_WITH(models::make_model(c, 1), Catch::Contains("--d-model 32: not divisible by --heads 3"));
  CHECK_THROWS_WITH(models::ModelConfig::from_json("{\"model\": \"transformer\"}"), Catch::Contains("model config"));
}

TEST_CASE("parameter_count in closed form equals the built model's, for every kind and option",
          "[models][sizes]") {
  using models::ModelKind;
  struct Row {
    ModelKind kind;
    nn::PositionalKind positional;
    bool norm_first;
    nn::Activation activation;
    nn::CellKind cell;
    nn::AttentionScore score;
    int64_t layers;
    bool tie_embeddings = false;
  };
  const auto P = nn::PositionalKind::sinusoidal, L = nn::PositionalKind::learned,
             N = nn::PositionalKind::none;
  const auto relu = nn::Activation::relu, gelu = nn::Activation::gelu_tanh, erf = nn::Activation::gelu_exact;
  const auto gru = nn::CellKind::gru, lstm = nn::CellKind::lstm, elman = nn::CellKind::elman;
  const auto add = nn::AttentionScore::additive, general = nn::AttentionScore::general,
             dot = nn::AttentionScore::dot;
  const Row rows[] = {
      {ModelKind::transformer, P, false, relu, gru, add, 1},
      {ModelKind::transformer, L, false, relu, gru, add, 2},
      {ModelKind::transformer, N, true, gelu, gru, add, 3},
      {ModelKind::transformer, L, true, relu, gru, add, 1},
      {ModelKind::transformer, P, false, erf, gru, add, 2, true},
      {ModelKind::transformer, L, true, relu, gru, add, 1, true},
      {ModelKind::attention_rnn, P, false, relu, gru, add, 2},
      {ModelKind::attention_rnn, P, false, relu, lstm, general, 1},
      {ModelKind::attention_rnn, P, false, relu, gru, dot, 2},
      {ModelKind::attention_rnn, P, false, relu, elman, add, 3},
      {ModelKind::rnn, P, false, relu, elman, add, 1},
      {ModelKind::rnn, P, false, relu, gru, add, 2},
      {ModelKind::rnn, P, false, relu, lstm, add, 3},
  };
  for (const Row& r : rows) {
    models::ModelConfig c = tiny(r.kind, 23);
    c.positional = r.positional, c.norm_first = r.norm_first, c.activation = r.activation;
    c.cell = r.cell, c.score = r.score, c.layers = r.layers, c.tie_embeddings = r.tie_embeddings;
    c.d_model = 24, c.d_ff = 40, c.hidden = 36, c.max_len = 50;
    CAPTURE(c.to_json());
    const auto model = models::make_model(c, 1);
    CHECK(models::parameter_count(c) == model->parameter_count());
    CHECK(models::parameter_bytes(c) == 4 * model->parameter_count());
    CHECK(models::buffer_bytes(c) ==
          (r.kind == ModelKind::transformer && r.positional == P ? 2 * 50 * 24 * 12 : 0));
  }
}

TEST_CASE("configs too large for 64 bits or for the machine are refused before anything is built",
          "[models][sizes]") {
  models::ModelConfig c = tiny(models::ModelKind::transformer, 40);
  c.d_ff = int64_t(1) << 62;  // d_model x d_ff overflows
  CHECK_THROWS_WITH(models::check_config(c), Catch::StartsWith("--d-ff 4611686018427387904: ") &&
                                                 Catch::Contains("overflows 64 bits"));
  CHECK_THROWS_WITH(models::make_model(c, 1), Catch::StartsWith("--d-ff 4611686018427387904: "));
  CHECK_THROWS_WITH(models::parameter_count(c, models::ConfigNames::json),
                    Catch::StartsWith("d_ff 4611686018427387904: "));
  c = tiny(models::ModelKind::transformer, 40);
  c.d_model = int64_t(2305843009213693952), c.heads = 1;
  CHECK_THROWS_WITH(models::make_model(c, 1), Catch::StartsWith("--d-model 2305843009213693952: "));
  c = tiny(models::ModelKind::transformer, 40);
  c.d_model = 1000000, c.heads = 1;  // fits in 64 bits, not in memory
  CHECK_THROWS_AS(models::check_config(c), OutOfMemory);
  CHECK_THROWS_WITH(models::check_config(c), Catch::StartsWith("--d-model 1000000: the model would need ") &&
                                                 Catch::Contains("TB of parameters") &&
                                                 Catch::Contains("this machine can hold"));
  c = tiny(models::ModelKind::transformer, 40);
  c.layers = 1000000000;
  CHECK_THROWS_WITH(models::make_model(c, 1),
                    Catch::StartsWith("--layers 1000000000: the model would need "));
  c = tiny(models::ModelKind::rnn, 40);
  c.hidden = int64_t(1) << 40;
  CHECK_THROWS_WITH(models::make_model(c, 1), Catch::StartsWith("--hidden 1099511627776: "));
  c = tiny(models::ModelKind::transformer, 40);
  c.max_len = int64_t(1) << 62;
  CHECK_THROWS_WITH(models::make_model(c, 1),
                    Catch::StartsWith("max_len 4611686018427387904: at most 1048576"));
  c.max_len = 0;
  CHECK_THROWS_WITH(models::make_model(c, 1), Catch::StartsWith("max_len 0: must be positive"));
  c = tiny(models::ModelKind::transformer, 40);
  c.layers = -3;
  CHECK_THROWS_WITH(models::check_config(c), Catch::StartsWith("--layers -3: must be positive"));
}

TEST_CASE("beam search finds the trained answer", "[models]") {
  const train::TrainOptions o = copy_training(tiny(models::ModelKind::transformer, 0), {3, 5, 4}, 250, 50);
  train::Session s = train::make_session(o);
  train::train(s, nullptr, nullptr);
  s.model->eval();
  int right = 0;
  for (int i = 0; i < 10; ++i) {
    const auto& ex = s.valid_examples[size_t(i)];
    right += s.model->beam_search(ex.src, 3, 12) == ex.tgt;
  }
  CHECK(right >= 8);
}
