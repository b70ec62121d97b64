// Model options with a history: the attention score (additive | general | dot, where configs of
// version 1 stored general as "dot"), the GELU forms, and tied Transformer embeddings. Configs and
// checkpoints keep their meaning across the change; tied gradients add up from all three uses; the
// new choices train.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tapegrad/io.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"
#include "tests/models/model_fixtures.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;
using test::tiny;

// Quick training on the copy task: a tiny model, one thread.
train::TrainOptions copy_training(const models::ModelConfig& model, int64_t steps) {
  return test::copy_training(model, {3, 6, 5}, steps, 200);
}

// A config JSON as version 1 wrote it: no "version", no "tie_embeddings", general scoring as "dot".
nlohmann::json as_version_1(const std::string& config_json) {
  nlohmann::json j = nlohmann::json::parse(config_json);
  j.erase("version");
  j.erase("tie_embeddings");
  if (j["attention"] == "general") j["attention"] = "dot";
  return j;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> u = a.to_vector(), v = b.to_vector();
  if (u.size() != v.size()) return 1e300;
  double m = 0;
  for (size_t i = 0; i < u.size(); ++i) m = std::max(m, std::abs(u[i] - v[i]));
  return m;
}

}  // namespace

TEST_CASE("model config: version 1 configs keep their meaning, version 2 round-trips the new choices",
          "[models][config]") {
  using models::ModelConfig;
  ModelConfig c = tiny(models::ModelKind::attention_rnn, 20);
  c.score = nn::AttentionScore::general;
  nlohmann::json old = as_version_1(c.to_json());
  REQUIRE(old["attention"] == "dot");
  CHECK(ModelConfig::from_json(old.dump()).score == nn::AttentionScore::general);
  old["attention"] = "luong";
  CHECK(ModelConfig::from_json(old.dump()).score == nn::AttentionScore::general);
  old["attention"] = "additive";
  CHECK(ModelConfig::from_json(old.dump()).score == nn::AttentionScore::additive);

  ModelConfig t = tiny(models::ModelKind::transformer, 20);
  t.activation = nn::Activation::gelu_tanh;
  nlohmann::json old_t = as_version_1(t.to_json());
  old_t["activation"] = "gelu";  // version 1's name of the tanh form
  const ModelConfig back_t = ModelConfig::from_json(old_t.dump());
  CHECK(back_t.activation == nn::Activation::gelu_tanh);
  CHECK(!back_t.tie_embeddings);

  for (auto score : {nn::AttentionScore::additive, nn::AttentionScore::general, nn::AttentionScore::dot}) {
    c.score = score;
    CAPTURE(c.to_json());
    CHECK(ModelConfig::from_json(c.to_json()).score == score);
  }
  t.activation = nn::Activation::gelu_exact;
  t.tie_embeddings = true;
  const ModelConfig back = ModelConfig::from_json(t.to_json());
  CHECK(back.activation == nn::Activation::gelu_exact);
  CHECK(back.tie_embeddings);
  CHECK(back.to_json() == t.to_json());

  nlohmann::json j = nlohmann::json::parse(t.to_json());
  j["version"] = ModelConfig::kJsonVersion + 1;
  CHECK_THROWS_WITH(ModelConfig::from_json(j.dump()),
                    Catch::Contains("model config: version 3") && Catch::Contains("1 to 2"));
  j = nlohmann::json::parse(t.to_json());
  j.erase("tie_embeddings");
  CHECK_THROWS_WITH(ModelConfig::from_json(j.dump()), Catch::Contains("no field 'tie_embeddings'"));
  j = nlohmann::json::parse(t.to_json());
  j["model"] = "rnn";
  CHECK_THROWS_WITH(ModelConfig::from_json(j.dump()),
                    Catch::Contains("tie_embeddings: only for the transformer, not rnn"));
  models::ModelConfig r = tiny(models::ModelKind::attention_rnn, 20);
  r.tie_embeddings = true;
  CHECK_THROWS_WITH(models::make_model(r, 1), Catch::Contains("--tie-embeddings: only for the transformer"));
}

TEST_CASE("a checkpoint written before 'general' existed, storing 'dot', loads and resumes as general",
          "[models][config][io]") {
  const std::string dir = temp_dir("v1-run"), old = temp_dir("v1-old");
  models::ModelConfig m = tiny(models::ModelKind::attention_rnn, 0);
  m.score = nn::AttentionScore::general;
  train::TrainOptions o = copy_training(m, 3);
  o.valid_size = 4, o.batch_size = 4, o.out_dir = dir;
  train::Session s = train::make_session(o);
  train::train(s, nullptr, nullptr);
  // The two-file layout of the time, with both stored configs in version 1's form.
  io::SafetensorsFile f = io::load_safetensors(dir + "/latest/model.safetensors");
  f.metadata["config"] = as_version_1(f.metadata.at("config")).dump();
  nlohmann::json options = nlohmann::json::parse(f.metadata.at("options"));
  options["model"] = as_version_1(options["model"].dump());
  f.metadata["options"] = options.dump();
  REQUIRE(f.metadata["config"].find("\"dot\"") != std::string::npos);
  io::save_safetensors(old + "/model.safetensors", f.tensors, f.metadata);
  fs::copy_file(dir + "/latest/optimizer.safetensors", old + "/optimizer.safetensors");

  const train::LoadedModel loaded = train::load_checkpoint(old);
  CHECK(loaded.options.model.score == nn::AttentionScore::general);
  const auto want = s.model->named_parameters(), got = loaded.model->named_parameters();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second.to_vector() == want[i].second.to_vector());
  }
  train::TrainOptions more = o;
  more.steps = 4, more.out_dir = old, more.resume_dir = old;
  train::Session resumed = train::make_session(more);
  CHECK(resumed.model->config().score == nn::AttentionScore::general);
  train::train(resumed, nullptr, nullptr);
  CHECK(train::load_checkpoint(old).step == 4);
  fs::remove_all(dir);
  fs::remove_all(old);
}

TEST_CASE("tied embeddings: one table, and its gradient is the sum of the three untied ones",
          "[models][tie][gradcheck]") {
  models::ModelConfig c = tiny(models::ModelKind::transformer, 9);
  c.d_model = 8, c.d_ff = 16, c.max_len = 16;
  models::ModelConfig u = c;
  c.tie_embeddings = true;
  auto tied = models::make_model(c, 1), untied = models::make_model(u, 2);
  tied->to(DType::f64), untied->to(DType::f64);
  tied->eval(), untied->eval();
  Tensor table;
  std::vector<std::string> names;
  for (const auto& [name, p] : tied->named_parameters()) {
    names.push_back(name);
    if (name == "src_embed.weight") table = p;
  }
  REQUIRE(table.defined());
  CHECK(std::find(names.begin(), names.end(), "tgt_embed.weight") == names.end());
  CHECK(std::find(names.begin(), names.end(), "out_proj.weight") == names.end());
  CHECK(untied->parameter_count() - tied->parameter_count() == 9 * 8 + 9 * 8 + 9);
  CHECK(tied->parameter_count() == models::parameter_count(c));

  // The untied model with the same values: the table in all three places, a zero output bias.
  const auto tied_params = tied->named_parameters();
  Tensor src_grad, tgt_grad, proj_grad;
  for (const auto& [name, p] : untied->named_parameters()) {
    Tensor dst = p;
    if (name == "src_embed.weight" || name == "tgt_embed.weight" || name == "out_proj.weight") {
      dst.copy_from(table);
    } else if (name == "out_proj.bias") {
      dst.copy_from(Tensor::zeros(p.shape(), DType::f64));
    } else {
      bool found = false;
      for (const auto& [tn, tp] : tied_params)
        if (tn == name) dst.copy_from(tp), found = true;
      CAPTURE(name);
      REQUIRE(found);
    }
  }
  const data::Batch batch = data::make_batch({{{4, 5, 6}, {6, 5, 4}}, {{7, 8, 4, 5, 6}, {8, 7}}});
  tied->zero_grad(), untied->zero_grad();
  const Tensor tied_loss = tied->loss(batch);
  backward(tied_loss);
  const Tensor untied_loss = untied->loss(batch);
  backward(untied_loss);
  CHECK(tied_loss.item() == Approx(untied_loss.item()).epsilon(1e-12));
  Tensor sum_of_uses;
  for (const auto& [name, p] : untied->named_parameters())
    if (name == "src_embed.weight" || name == "tgt_embed.weight" || name == "out_proj.weight")
      sum_of_uses = sum_of_uses.defined() ? add(sum_of_uses, p.grad()) : p.grad();
  CHECK(max_abs_diff(table.grad(), sum_of_uses) < 1e-12);
  CHECK(max_abs_diff(table.grad(), Tensor::zeros(table.shape(), DType::f64)) > 1e-6);

  // And against central differences, with respect to the shared table.
  const GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>&) { return tied->loss(batch); }, {table}, {}, "tied table");
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("a tied Transformer round-trips through its checkpoint; a resume may not untie it",
          "[models][tie][io]") {
  models::ModelConfig m = tiny(models::ModelKind::transformer, 0);
  m.tie_embeddings = true;
  train::TrainOptions o = copy_training(m, 3);
  o.valid_size = 4, o.batch_size = 4, o.out_dir = temp_dir("tied");
  {
    train::Session s = train::make_session(o);  // holds the directory's lock until the scope ends
    train::train(s, nullptr, nullptr);
    const train::LoadedModel loaded = train::load_checkpoint(o.out_dir);
    CHECK(loaded.options.model.tie_embeddings);
    const auto a = s.model->named_parameters(), b = loaded.model->named_parameters();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(a[i].first);
      CHECK(a[i].first == b[i].first);
      CHECK(a[i].second.to_vector() == b[i].second.to_vector());
    }
    s.model->eval();
    const data::Batch batch = data::make_batch({{{4, 5, 6}, {4, 5, 6}}});
    CHECK(max_abs_diff(s.model->logits(batch), loaded.model->logits(batch)) == 0.0);
  }

  train::TrainOptions again = o;
  again.steps = 4, again.resume_dir = o.out_dir;
  again.model.tie_embeddings = false;
  again.given = {"--tie-embeddings"};
  CHECK_THROWS_WITH(train::make_session(again), Catch::Contains("--tie-embeddings off (checkpoint: on)"));
  again.given.clear();  // not given: the checkpoint's setting holds
  CHECK(train::make_session(again).model->config().tie_embeddings);
  fs::remove_all(o.out_dir);
}

TEST_CASE("the new choices learn copy: dot-scored attention RNN, tied Transformer with exact GELU",
          "[models][tie]") {
  models::ModelConfig dot = tiny(models::ModelKind::attention_rnn, 0);
  dot.score = nn::AttentionScore::dot;
  models::ModelConfig tied = tiny(models::ModelKind::transformer, 0);
  tied.tie_embeddings = true, tied.activation = nn::Activation::gelu_exact;
  for (const auto& [model, steps] : {std::pair{dot, 600}, std::pair{tied, 300}}) {
    CAPTURE(model.to_json());
    train::Session s = train::make_session(copy_training(model, steps));
    train::EvalResult last;
    train::train(s, nullptr, [&](int64_t, const train::EvalResult& r) { last = r; });
    INFO((last.samples.empty() ? std::string() : last.samples[0]));
    CHECK(last.exact_match >= 0.9);
    CHECK(last.token_accuracy >= 0.95);
  }
}
