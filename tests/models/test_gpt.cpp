// The decoder-only model and its text training: nanoGPT's parameter count, causality, the KV cache
// against recomputing the context (past the block size too), seeded sampling, text batches as a pure
// function of (seed, step) and an exact resume, the 90/10 split and its validation blocks, and the
// recipe's optimizer options (--decay matrices, --min-lr, --beta2), and SentencePiece pieces of text
// (bits per character from the text's own characters, a piece model given with --spm-model). Corpora
// are written by the tests.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "model_fixtures.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/models/gpt.hpp"
#include "tapegrad/metrics.hpp"
#include "tapegrad/train.hpp"

using namespace tapegrad;

namespace {

// A small text with some structure (repeated words), so a few steps of training move the model.
std::string write_corpus(const std::string& dir, int64_t lines = 300) {
  static const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "in", "beginning", "god", "light"};
  std::string text;
  Generator g(5);
  for (int64_t l = 0; l < lines; ++l) {
    for (int w = 0, n = int(g.uniform_int(3, 9)); w < n; ++w) text += std::string(w ? " " : "") + words[g.uniform_int(0, 9)];
    text += ".\n";
  }
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

train::TrainOptions text_training(const std::string& text, int64_t steps) {
  train::TrainOptions o;
  o.model = test::tiny(models::ModelKind::gpt, 5);
  o.text = text, o.block_size = 16, o.batch_size = 4, o.steps = steps, o.valid_size = 8;
  o.lr = 3e-3, o.warmup = 2, o.eval_every = 0, o.threads = 1, o.model.dropout = 0.1;
  return o;
}

// text_training on 32 SentencePiece pieces trained by the run, checkpointed to `out_dir`.
train::TrainOptions piece_training(const std::string& text, int64_t steps, const std::string& out_dir) {
  train::TrainOptions o = text_training(text, steps);
  o.tokens = data::Tokenization::sentencepiece, o.vocab_size = 32, o.out_dir = out_dir;
  return o;
}

std::vector<double> all_parameters(const nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters())
    for (double v : p.to_vector()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("nanoGPT's CPU recipe (4 layers, 4 heads, 128 wide, block 64, 65 characters) is its 0.80M parameters",
          "[models][gpt]") {
  models::ModelConfig c;
  c.kind = models::ModelKind::gpt;
  c.vocab_size = 65 + 4, c.layers = 4, c.heads = 4, c.d_model = 128, c.max_len = 64, c.dropout = 0;
  const int64_t closed_form = models::parameter_count(c);
  CHECK(models::make_model(c, 1)->parameter_count() == closed_form);
  // nanoGPT counts without the position table; our vocabulary adds the 4 specials' rows.
  CHECK(closed_form - 64 * 128 - 4 * 128 == 795904);
}

TEST_CASE("the gpt is causal: a position's logits do not depend on later tokens", "[models][gpt]") {
  auto model = models::make_model(test::tiny(models::ModelKind::gpt, 12), 3);
  auto& gpt = dynamic_cast<models::Gpt&>(*model);
  NoGrad no_grad;
  const Tensor a = gpt.forward(Tensor::from_ids({4, 5, 6, 7, 8, 9}, {1, 6}));
  const Tensor b = gpt.forward(Tensor::from_ids({4, 5, 6, 7, 11, 10}, {1, 6}));
  const std::vector<double> va = narrow(a, 1, 0, 4).contiguous().to_vector(), vb = narrow(b, 1, 0, 4).contiguous().to_vector();
  CHECK(va == vb);
  CHECK(narrow(a, 1, 4, 1).contiguous().to_vector() != narrow(b, 1, 4, 1).contiguous().to_vector());
}

TEST_CASE("cached and uncached generation give the same tokens, past the block size too; one seed, one text",
          "[models][gpt]") {
  const std::string dir = test::temp_dir("gpt-generate");
  train::Session s = train::make_session(text_training(write_corpus(dir), 30));
  train::train(s, nullptr, nullptr);
  auto& gpt = dynamic_cast<models::Gpt&>(*s.model);
  const std::vector<int32_t> prompt = data::encode_text("the lord said unto moses", s.vocab, *s.tokenizer);  // > block 16
  for (const auto& [temperature, top_k] : {std::pair{0.0, 0L}, {0.8, 5L}, {1.0, 0L}}) {
    CAPTURE(temperature, top_k);
    models::GenerateOptions o{.max_new_tokens = 40, .temperature = temperature, .top_k = top_k, .seed = 9};
    const std::vector<int32_t> cached = models::generate(gpt, prompt, o);
    o.use_cache = false;
    const std::vector<int32_t> uncached = models::generate(gpt, prompt, o);
    CHECK(cached == uncached);
    CHECK(cached.size() == prompt.size() + 40);
    CHECK(std::equal(prompt.begin(), prompt.end(), cached.begin()));
    CHECK(models::generate(gpt, prompt, o) == uncached);
  }
  // A short prompt that grows past the block while cached (prefill, then one position per token).
  const std::vector<int32_t> short_prompt = data::encode_text("god", s.vocab, *s.tokenizer);
  models::GenerateOptions o{.max_new_tokens = 30, .temperature = 0.9, .top_k = 0, .seed = 4};
  const auto cached = models::generate(gpt, short_prompt, o);
  o.use_cache = false;
  CHECK(models::generate(gpt, short_prompt, o) == cached);
  o.seed = 5;
  CHECK(models::generate(gpt, short_prompt, o) != cached);
}

TEST_CASE("text: the first 90% trains, validation blocks are evenly spaced over the last 10%, vocabulary in code-point order",
          "[models][gpt][data]") {
  const std::string dir = test::temp_dir("gpt-split");
  const std::string path = write_corpus(dir);
  const std::string text = data::read_text(path);
  const train::Session s = train::make_session(text_training(path, 1));
  const std::vector<int32_t> ids = data::encode_text(text, s.vocab, *s.tokenizer);
  const size_t n_train = size_t(double(ids.size()) * 0.9);
  REQUIRE(s.train_text.size() == n_train);
  CHECK(std::equal(s.train_text.begin(), s.train_text.end(), ids.begin()));
  REQUIRE(s.valid_examples.size() == 8);
  const int64_t n_valid = int64_t(ids.size() - n_train), last = n_valid - 16 - 1;
  for (size_t i = 0; i < 8; ++i) {
    const int64_t o = int64_t(n_train) + int64_t(i) * last / 7;
    CHECK(s.valid_examples[i].tgt == std::vector<int32_t>(ids.begin() + o, ids.begin() + o + 17));
  }
  // Specials, then " ", ".", "\n"-free sorted order: every token after the specials is larger than the one before.
  const auto& tokens = s.vocab.tokens();
  CHECK(tokens.front() == "<pad>");
  for (size_t i = 5; i < tokens.size(); ++i) CHECK(tokens[i - 1] < tokens[i]);
}

TEST_CASE("text batches are a pure function of seed and step: x and y are one block shifted by one", "[models][gpt]") {
  const std::string dir = test::temp_dir("gpt-batches");
  const train::Session s = train::make_session(text_training(write_corpus(dir), 1));
  const data::Batch a = s.batch_for_step(7), b = s.batch_for_step(7), c = s.batch_for_step(8);
  CHECK(a.tgt_in.to_vector() == b.tgt_in.to_vector());
  CHECK(a.tgt_in.to_vector() != c.tgt_in.to_vector());
  REQUIRE(a.tgt_in.shape() == Shape{4, 16});
  const std::vector<double> x = a.tgt_in.to_vector(), y = a.tgt_out.to_vector();
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t t = 0; t + 1 < 16; ++t) CHECK(y[size_t(r * 16 + t)] == x[size_t(r * 16 + t + 1)]);
  CHECK(a.target_tokens() == 4 * 16);
}

TEST_CASE("a text run resumed from a checkpoint gives the bits of the straight run, characters and pieces",
          "[models][gpt][train]") {
  const auto tokens = GENERATE(data::Tokenization::chars, data::Tokenization::sentencepiece);
  CAPTURE(data::tokenization_name(tokens));
  const std::string dir = test::temp_dir(std::string("gpt-resume-") + data::tokenization_name(tokens));
  const std::string corpus = write_corpus(dir);
  // A schedule that does not depend on --steps, so the 4-step run takes the straight run's first 4 steps.
  auto options = [&](int64_t steps) {
    train::TrainOptions o = text_training(corpus, steps);
    o.schedule = optim::Schedule::constant;
    o.tokens = tokens;
    if (tokens == data::Tokenization::sentencepiece) o.vocab_size = 32;  // the resumed run keeps the stored model
    return o;
  };
  train::TrainOptions straight = options(8);
  straight.out_dir = dir + "/straight";
  train::Session a = train::make_session(straight);
  train::train(a, nullptr, nullptr);
  train::TrainOptions first = options(4);
  first.out_dir = dir + "/first";
  {
    train::Session b = train::make_session(first);  // unlocks its directory when it goes
    train::train(b, nullptr, nullptr);
  }
  train::TrainOptions rest = options(8);
  rest.resume_dir = first.out_dir;
  train::Session c = train::make_session(rest);
  train::train(c, nullptr, nullptr);
  CHECK(all_parameters(*c.model) == all_parameters(*a.model));
  const auto rows = train::read_metrics(straight.out_dir + "/metrics.csv");
  REQUIRE(!rows.empty());
  CHECK(std::isfinite(rows.back().valid_bits_per_char));
  if (tokens == data::Tokenization::chars)  // 1 token, 1 char
    CHECK(rows.back().valid_bits_per_char == Approx(rows.back().valid_loss / std::log(2.0)));
  CHECK(c.vocab.tokens() == a.vocab.tokens());
}

TEST_CASE("pieces: bits per character is nats per token x the validation text's tokens per character / ln 2",
          "[models][gpt][spm]") {
  const std::string dir = test::temp_dir("gpt-pieces");
  const std::string path = write_corpus(dir);
  const train::TrainOptions o = piece_training(path, 3, dir + "/run");
  train::Session s = train::make_session(o);
  train::EvalResult eval;
  train::train(s, nullptr, [&](int64_t, const train::EvalResult& r) { eval = r; });
  // The validation text, found here from the file: its last 10% of characters (the corpus is ASCII).
  const std::string text = data::read_text(path);
  const std::string valid_text = text.substr(size_t(double(text.size()) * 0.9));
  const auto valid_tokens = double(data::encode_text(valid_text, s.vocab, *s.tokenizer).size());
  const auto valid_chars = double(valid_text.size());
  REQUIRE(valid_tokens < 0.6 * valid_chars);  // pieces are longer than characters
  CHECK(eval.loss > 0);
  CHECK(eval.bits_per_char == Approx(eval.loss * valid_tokens / valid_chars / std::log(2.0)).epsilon(1e-12));
  // metrics.csv's valid_bits_per_char column is that figure too.
  const auto rows = train::read_metrics(o.out_dir + "/metrics.csv");
  REQUIRE(!rows.empty());
  CHECK(rows.back().valid_loss == Approx(eval.loss).epsilon(1e-12));
  CHECK(rows.back().valid_bits_per_char == Approx(eval.bits_per_char).epsilon(1e-12));
}

TEST_CASE("--spm-model for --text: a text run's own model gives its vocabulary; a model without a line-break piece "
          "is refused",
          "[models][gpt][spm]") {
  const std::string dir = test::temp_dir("gpt-spm-model");
  const std::string path = write_corpus(dir);
  const train::TrainOptions o = piece_training(path, 1, dir + "/run");
  train::Session first = train::make_session(o);
  train::train(first, nullptr, nullptr);
  train::TrainOptions given = text_training(path, 1);
  given.tokens = data::Tokenization::sentencepiece, given.spm_model = dir + "/run/sentencepiece.model";
  const train::Session second = train::make_session(given);
  CHECK(second.vocab.tokens() == first.vocab.tokens());
  CHECK(second.train_text == first.train_text);
  // A translation model (no "\n" piece) would turn the text's line breaks into spaces.
  const auto pairs = data::SentencePieceTokenizer::train({"the lord said unto moses", "and god said"}, {},
                                                         {.vocab_size = 20});
  std::ofstream(dir + "/pairs.model", std::ios::binary) << pairs->model(data::Side::source);
  given.spm_model = dir + "/pairs.model";
  CHECK_THROWS_WITH(train::make_session(given),
                    "--spm-model " + dir + "/pairs.model: has no line-break piece, which --text needs (a model from "
                    "a --text run has it: RUN/sentencepiece.model)");
}

TEST_CASE("--decay matrices decays only parameters of 2 or more dimensions; all decays every one",
          "[optim][gpt]") {
  for (const bool vectors : {false, true}) {
    Tensor w = Tensor::ones({2, 2}), b = Tensor::ones({2});
    w.requires_grad_(), b.requires_grad_();
    optim::AdamW opt({{"w", w}, {"b", b}}, {.lr = 0.1, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.5, .decay_vectors = vectors});
    // Zero gradients: only the decay moves a weight.
    backward(add(sum(mul(w, 0.0)), sum(mul(b, 0.0))));
    opt.step();
    CHECK(w.to_vector()[0] == Approx(1 - 0.1 * 0.5));
    CHECK(b.to_vector()[0] == Approx(vectors ? 1 - 0.1 * 0.5 : 1.0));
  }
}

TEST_CASE("--min-lr: the cosine schedule warms up, then ends at the floor at the last step", "[optim][gpt]") {
  train::TrainOptions o;
  o.lr = 1e-3, o.min_lr = 1e-4, o.warmup = 100, o.steps = 2000, o.schedule = optim::Schedule::cosine;
  const train::StepRecipe r = train::StepRecipe::from(o);
  auto at = [&](int64_t step) {
    return optim::learning_rate(r.schedule, r.lr, step, r.warmup, r.total_steps, r.min_lr_ratio);
  };
  CHECK(at(50) == Approx(0.5e-3));
  CHECK(at(100) == Approx(1e-3));
  CHECK(at(1050) == Approx(1e-4 + 0.5 * 0.9e-3));
  CHECK(at(2000) == Approx(1e-4));
  o.min_lr = 0;  // the default keeps the old schedule, which ends at 0
  CHECK(train::StepRecipe::from(o).min_lr_ratio == 0);
}
