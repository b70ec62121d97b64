// The train layer in process: train_step on any module against the loop it replaces, checkpoints that
// round-trip bit-exactly and refuse damaged files, and the examples a loaded checkpoint is scored on.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tapegrad/io.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"
#include "tests/models/model_fixtures.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

using test::temp_dir;
using test::tiny;

namespace {
// Two linear layers with a tanh between: any module, trained by train_step below.
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Linear> a, b;
  explicit SmallNet(Generator& gen)
      : a(register_module("a", std::make_shared<nn::Linear>(3, 8, gen))),
        b(register_module("b", std::make_shared<nn::Linear>(8, 2, gen))) {}
  Tensor forward(const Tensor& x) const { return b->forward(tanh(a->forward(x))); }
};
}  // namespace

TEST_CASE("train_step on any module takes the same steps as the hand-written loop it replaces", "[train]") {
  Generator data_gen(21);
  const Tensor x = Tensor::randn({6, 3}, data_gen);
  const Tensor y = Tensor::from_ids({0, 1, 1, 0, 1, 0}, {6});
  Generator g1(5), g2(5);
  SmallNet by_step(g1), by_hand(g2);
  optim::AdamW opt_step(by_step.named_parameters(), {.lr = 0.0, .weight_decay = 0.1});
  optim::AdamW opt_hand(by_hand.named_parameters(), {.lr = 0.0, .weight_decay = 0.1});
  const train::StepRecipe recipe{.lr = 0.05, .schedule = optim::Schedule::cosine, .warmup = 2, .total_steps = 6,
                                 .clip_norm = 0.5, .min_lr_ratio = 0.1};
  for (int64_t step = 1; step <= 6; ++step) {
    const train::StepResult r =
        train::train_step(by_step, opt_step, recipe, [&] { return cross_entropy(by_step.forward(x), y); }, step);
    opt_hand.set_lr(optim::learning_rate(optim::Schedule::cosine, 0.05, step, 2, 6, 0.1));
    const Tensor loss = cross_entropy(by_hand.forward(x), y);
    backward(loss);
    const double norm = optim::clip_grad_norm(by_hand.named_parameters(), 0.5);
    opt_hand.step();
    opt_hand.zero_grad();
    CHECK(r.loss == loss.item());
    CHECK(r.grad_norm == norm);
    CHECK(r.lr == opt_hand.lr());
  }
  const auto p = by_step.named_parameters(), q = by_hand.named_parameters();
  for (size_t i = 0; i < p.size(); ++i) CHECK(p[i].second.to_vector() == q[i].second.to_vector());
}

TEST_CASE("checkpoints round-trip bit-exactly and refuse damaged files", "[train][io]") {
  train::TrainOptions o;
  o.model = tiny(models::ModelKind::transformer, 0);
  o.model.dropout = 0.1;
  o.task = "reverse";
  o.task_options = {3, 6, 5};
  o.steps = 5;
  o.batch_size = 8;
  o.valid_size = 10;
  o.threads = 1;
  o.out_dir = temp_dir("ckpt");
  train::Session s = train::make_session(o);
  train::train(s, nullptr, nullptr);
  const train::LoadedModel m = train::load_checkpoint(o.out_dir);
  CHECK(m.step == 5);
  const auto a = s.model->named_parameters(), b = m.model->named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second.to_vector() == b[i].second.to_vector());
  }
  CHECK(m.vocab.tokens() == s.vocab.tokens());
  // Truncated, then a header byte corrupted: clear errors, never a crash.
  const std::string bad = temp_dir("ckpt-bad");
  fs::copy(o.out_dir, bad, fs::copy_options::recursive);
  const std::string model_file = bad + "/model.safetensors";
  fs::resize_file(model_file, fs::file_size(model_file) / 2);
  CHECK_THROWS_AS(train::load_checkpoint(bad), IoError);
  CHECK_THROWS_WITH(train::load_checkpoint(bad), Catch::Contains("model.safetensors"));
  fs::copy_file(o.out_dir + "/model.safetensors", model_file, fs::copy_options::overwrite_existing);
  {
    std::fstream f(model_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.put('#');
  }
  CHECK_THROWS_AS(train::load_checkpoint(bad), IoError);
  CHECK_THROWS_WITH(train::load_checkpoint(bad + "/nowhere"), Catch::Contains("nowhere"));
  // A checkpoint for a different model shape is refused by name.
  fs::copy_file(o.out_dir + "/model.safetensors", model_file, fs::copy_options::overwrite_existing);
  auto file = io::load_safetensors(model_file);
  file.tensors.pop_back();
  io::save_safetensors(model_file, file.tensors, file.metadata);
  CHECK_THROWS_WITH(train::load_checkpoint(bad), Catch::Contains("model.safetensors") && Catch::Contains("tensor"));
  fs::remove_all(bad);
  fs::remove_all(o.out_dir);
}

TEST_CASE("examples for a checkpoint: its task's samples, a TSV in its vocabulary, or a clear refusal",
          "[train][examples]") {
  // Only the vocabulary and the options of a loaded checkpoint matter here, not its model.
  train::LoadedModel m;
  m.options.task = "reverse";
  m.options.task_options = {3, 6, 5};
  m.vocab = data::make_task("reverse", m.options.task_options)->vocab();
  // The checkpoint's own task, sampled from the seed.
  const auto own = train::examples_for_checkpoint(m, {"", "", std::nullopt, 7, 42}, "eval");
  Generator gen(42);
  const auto expected = data::make_task("reverse", m.options.task_options)->sample_many(gen, 7);
  REQUIRE(own.examples.size() == 7);
  for (size_t i = 0; i < 7; ++i) CHECK(own.examples[i].src == expected[i].src);
  CHECK(own.tokenization == data::Tokenization::chars);
  // Other lengths (same vocabulary) and another task of the same vocabulary are fine.
  const auto longer = train::examples_for_checkpoint(m, {"", "copy", data::TaskOptions{8, 8, 5}, 3, 1}, "eval");
  REQUIRE(longer.examples.size() == 3);
  CHECK(longer.examples[0].src.size() == 8);
  CHECK(longer.examples[0].tgt == longer.examples[0].src);
  // A task whose vocabulary differs (digits and '?') is refused, naming the task.
  CHECK_THROWS_WITH(train::examples_for_checkpoint(m, {"", "recall", std::nullopt, 3, 1}, "eval"),
                    Catch::StartsWith("eval: task 'recall'") && Catch::Contains("different vocabulary"));
  CHECK_THROWS_WITH(train::examples_for_checkpoint(m, {"", "", data::TaskOptions{3, 6, 7}, 3, 1}, "eval"),
                    Catch::Contains("different vocabulary"));
  // A TSV is read in the checkpoint's tokenisation and vocabulary; unknown tokens become <unk>.
  const std::string dir = temp_dir("examples");
  fs::create_directories(dir);
  std::ofstream(dir + "/pairs.tsv") << "abc\tcba\nazb\tbza\n";
  const auto tsv = train::examples_for_checkpoint(m, {dir + "/pairs.tsv", "", std::nullopt, 1, 0}, "eval");
  REQUIRE(tsv.examples.size() == 2);  // every pair, whatever the count
  CHECK(tsv.examples[0].src == m.vocab.encode({"a", "b", "c"}));
  CHECK(tsv.examples[1].src[1] == data::kUnk);
  // A checkpoint trained on a TSV file needs one (or a task) to be given.
  m.options.train = dir + "/train.tsv";
  CHECK_THROWS_WITH(train::examples_for_checkpoint(m, {"", "", std::nullopt, 3, 1}, "--checkpoint run"),
                    Catch::StartsWith("--checkpoint run: this checkpoint was trained on " + dir + "/train.tsv"));
  fs::remove_all(dir);
}
