// `tapegrad train` model options as a new user meets them: --help says which GELU each activation
// is, what each attention score computes and what --tie-embeddings ties (and the default); bad
// values exit 2 naming the option; the choices reach the checkpoint; a resume may not change tying.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "process.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using tapegrad::test::Run;
using tapegrad::test::run;

std::string temp_dir(const std::string& name) {
  return tapegrad::test::temp_dir("model-options", name);
}

const std::string kTiny =
    "train --task copy --min-len 3 --max-len 4 --d-model 16 --hidden 16 --layers 1 --heads 2 --d-ff 32 "
    "--batch-size 4 --threads 1 --valid-size 4 --eval-every 0 ";

// The count in the training log's "MODEL with N parameters".
int64_t logged_parameters(const std::string& out) {
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("with ([0-9]+) parameters")));
  return std::stoll(m[1]);
}

}  // namespace

TEST_CASE("train --help says which GELU, which attention score and what --tie-embeddings ties",
          "[cli][options]") {
  const Run help = run("train --help");
  REQUIRE(help.code == 0);
  CHECK_THAT(help.out,
             Catch::Contains("gelu-tanh (the tanh approximation, PyTorch's gelu(approximate='tanh'); "
                             "'gelu' is an alias of it)") &&
                 Catch::Contains("gelu-exact (x Phi(x) with erf, PyTorch's default gelu)"));
  CHECK_THAT(help.out, Catch::Contains("additive (Bahdanau, v^T tanh(W_q s + W_k h))") &&
                           Catch::Contains("general (Luong, s^T W h)") &&
                           Catch::Contains("dot (Luong, s^T h, no parameters)"));
  CHECK_THAT(help.out,
             Catch::Contains("--tie-embeddings") &&
                 Catch::Contains("source and target share one vocabulary, so all three are tied") &&
                 Catch::Contains("Default: untied, two embeddings and an output projection with its "
                                 "own weight and bias"));
}

TEST_CASE("bad model option values exit 2 with one line naming the choices", "[cli][options][errors]") {
  const std::string dir = temp_dir("bad");
  const Run score = run(kTiny + "--model attention-rnn --attention concat --steps 1 --out " + dir + "/a");
  CHECK(score.code == 2);
  CHECK_THAT(score.out, Catch::Contains("'concat'") && Catch::Contains("additive, general or dot"));
  const Run act = run(kTiny + "--activation swish --steps 1 --out " + dir + "/b");
  CHECK(act.code == 2);
  CHECK_THAT(act.out, Catch::Contains("'swish'") && Catch::Contains("gelu-exact"));
  const Run tie = run(kTiny + "--model rnn --tie-embeddings --steps 1 --out " + dir + "/c");
  CHECK(tie.code == 2);
  CHECK_THAT(tie.out, Catch::Contains("--tie-embeddings: only for the transformer, not rnn"));
  CHECK(!fs::exists(dir + "/a"));
  CHECK(!fs::exists(dir + "/c"));
  fs::remove_all(dir);
}

TEST_CASE("the chosen activation, score and tying reach the checkpoint; tying shrinks the logged count",
          "[cli][options]") {
  const std::string dir = temp_dir("store");
  const Run rnn = run(kTiny + "--model attention-rnn --attention dot --steps 1 --out " + dir + "/dot");
  INFO(rnn.out);
  REQUIRE(rnn.code == 0);
  CHECK(train::load_checkpoint(dir + "/dot").options.model.score == nn::AttentionScore::dot);

  const Run untied = run(kTiny + "--activation gelu --steps 1 --out " + dir + "/untied");
  const Run tied = run(kTiny + "--activation gelu-exact --tie-embeddings --steps 1 --out " + dir + "/tied");
  INFO(untied.out + tied.out);
  REQUIRE(untied.code == 0);
  REQUIRE(tied.code == 0);
  const train::LoadedModel u = train::load_checkpoint(dir + "/untied"),
                           t = train::load_checkpoint(dir + "/tied");
  CHECK(u.options.model.activation == nn::Activation::gelu_tanh);
  CHECK(t.options.model.activation == nn::Activation::gelu_exact);
  CHECK(!u.options.model.tie_embeddings);
  CHECK(t.options.model.tie_embeddings);
  const int64_t V = u.options.model.vocab_size, C = 16;
  CHECK(logged_parameters(untied.out) == u.model->parameter_count());
  CHECK(logged_parameters(tied.out) == t.model->parameter_count());
  CHECK(logged_parameters(untied.out) - logged_parameters(tied.out) == 2 * V * C + V);
  fs::remove_all(dir);
}

TEST_CASE("--resume refuses a different --tie-embeddings; without the flag the checkpoint's holds",
          "[cli][options]") {
  const std::string dir = temp_dir("resume");
  REQUIRE(run(kTiny + "--steps 2 --out " + dir + "/untied").code == 0);
  const Run conflict = run("train --resume " + dir + "/untied --steps 3 --tie-embeddings");
  CHECK(conflict.code == 2);
  CHECK_THAT(conflict.out, Catch::Contains("--tie-embeddings on (checkpoint: off)"));
  CHECK(train::load_checkpoint(dir + "/untied").step == 2);
  REQUIRE(run(kTiny + "--tie-embeddings --steps 2 --out " + dir + "/tied").code == 0);
  const Run kept = run("train --resume " + dir + "/tied --steps 3");
  INFO(kept.out);
  CHECK(kept.code == 0);
  const train::LoadedModel m = train::load_checkpoint(dir + "/tied");
  CHECK(m.step == 3);
  CHECK(m.options.model.tie_embeddings);
  fs::remove_all(dir);
}
