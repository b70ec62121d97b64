// `tapegrad train` options as a new user meets them: --help says which GELU each activation is,
// what each attention score computes and what --tie-embeddings ties (and the default); bad values
// exit 2 naming the option; the choices reach the checkpoint; a resume may not change tying. And the
// option table behind them: one range per option on the command line, in validate() and for a
// checkpoint's stored options; flag and key named alike; files written before the table still read.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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
  for (const char* rnn : {"rnn", "attention-rnn"}) {
    CAPTURE(rnn);
    const Run ck = run(kTiny + "--model " + rnn + " --checkpoint-layers --steps 1 --out " + dir + "/d");
    CHECK(ck.code == 2);
    CHECK(ck.out == "tapegrad: --checkpoint-layers: only for the transformer and gpt (their layers are "
                    "checkpointed), not " + std::string(rnn) + "\n");
  }
  CHECK(!fs::exists(dir + "/a"));
  CHECK(!fs::exists(dir + "/c"));
  CHECK(!fs::exists(dir + "/d"));
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

TEST_CASE("--checkpoint-layers reaches config.json and the checkpoint, trains the bits of the plain run; "
          "--config repeats it, a resume and eval keep it",
          "[cli][options][checkpoint]") {
  const std::string dir = temp_dir("checkpoint-layers");
  const std::string opts = kTiny + "--layers 2 --dropout 0.2 --steps 3 --out ";
  const Run on = run(opts + dir + "/on --checkpoint-layers");
  const Run off = run(opts + dir + "/off");
  INFO(on.out + off.out);
  REQUIRE(on.code == 0);
  REQUIRE(off.code == 0);
  tapegrad::test::require_same_parameters(dir + "/on", dir + "/off");
  const auto config = nlohmann::json::parse(std::ifstream(dir + "/on/config.json"));
  CHECK(config.at("model").at("checkpoint_layers") == true);
  CHECK(nlohmann::json::parse(std::ifstream(dir + "/off/config.json")).at("model").at("checkpoint_layers") == false);
  CHECK(train::load_checkpoint(dir + "/on").options.model.checkpoint_layers);
  CHECK(train::load_checkpoint(dir + "/on").model->config().checkpoint_layers);

  const Run again = run("train --config " + dir + "/on/config.json --out " + dir + "/again");
  INFO(again.out);
  REQUIRE(again.code == 0);
  CHECK(train::TrainOptions::from_config_file(dir + "/again/config.json").model.checkpoint_layers);
  tapegrad::test::require_same_parameters(dir + "/again", dir + "/on");

  const Run conflict = run("train --resume " + dir + "/off --steps 4 --checkpoint-layers");
  CHECK(conflict.code == 2);
  CHECK_THAT(conflict.out, Catch::Contains("--checkpoint-layers on (checkpoint: off)"));
  const Run resumed = run("train --resume " + dir + "/on --steps 4");
  INFO(resumed.out);
  REQUIRE(resumed.code == 0);
  const train::LoadedModel m = train::load_checkpoint(dir + "/on");
  CHECK(m.step == 4);
  CHECK(m.options.model.checkpoint_layers);
  const Run eval = run("eval --checkpoint " + dir + "/on --task copy --size 4");
  INFO(eval.out);
  CHECK(eval.code == 0);
  CHECK_THAT(eval.out, Catch::Contains("exact_match: "));
  fs::remove_all(dir);
}

namespace {

// Written by the build before the option table (see its commit): keys clip_norm, task_min_len,
// tokenization, train_file, ...; model d_model 8, --clip 0.5, lengths 2-4, 5 symbols, seed 7, step 3.
// Its tensors are those of the same run on the SSE2 kernels (TAPEGRAD_ARCH=sse2, which every x86-64
// machine has; headers and stored options as the old build wrote them), and the test runs on SSE2 too:
// its runs are compared with the checkpoint bit for bit, and each instruction set rounds differently.
// A change to the arithmetic of such a run (the fused attention path for dropout 0, say) changes
// those bits: the tensors are then written again from today's run, the header left as it was.
const std::string kOldCheckpoint =
    std::string(TAPEGRAD_SOURCE_DIR) + "/tests/cli/data/checkpoint-before-option-table";
const std::string kOldOptions =
    "train --task reverse --min-len 2 --max-len 4 --symbols 5 --d-model 8 --heads 2 --d-ff 16 --layers 1 "
    "--batch-size 4 --threads 1 --valid-size 4 --eval-every 0 --clip 0.5 --warmup 1 --seed 7 ";

// `dir` with its model.safetensors' stored options changed by `edit`.
void edit_stored_options(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  io::SafetensorsFile f = io::load_safetensors(dir + "/model.safetensors");
  nlohmann::json o = nlohmann::json::parse(f.metadata.at("options"));
  edit(o);
  f.metadata["options"] = o.dump();
  fs::remove(dir + "/model.safetensors");
  io::save_safetensors(dir + "/model.safetensors", f.tensors, f.metadata);
}

}  // namespace

TEST_CASE("a checkpoint and config.json written before the option table load, evaluate, resume and "
          "configure a run under their old keys",
          "[cli][options]") {
  ::setenv("TAPEGRAD_ARCH", "sse2", 1);  // the kernels the checkpoint was written with (see kOldCheckpoint)
  struct RestoreArch {
    ~RestoreArch() { ::unsetenv("TAPEGRAD_ARCH"); }
  } restore_arch;
  const train::LoadedModel m = train::load_checkpoint(kOldCheckpoint);
  CHECK(m.step == 3);
  CHECK(m.options.clip == 0.5);
  CHECK(m.options.task_options.min_len == 2);
  CHECK(m.options.task_options.max_len == 4);
  CHECK(m.options.task_options.symbols == 5);
  CHECK(m.options.tokens == data::Tokenization::chars);
  CHECK(m.options.train.empty());
  CHECK(m.options.model.d_model == 8);

  const Run eval = run("eval --checkpoint " + kOldCheckpoint + " --size 4");
  INFO(eval.out);
  CHECK(eval.code == 0);
  CHECK_THAT(eval.out, Catch::Contains("(step 3, transformer)"));

  // Resumed, the old checkpoint continues exactly as one written now with the same options does.
  const std::string dir = temp_dir("old");
  REQUIRE(run(kOldOptions + "--steps 3 --out " + dir + "/new").code == 0);
  const Run old_resumed = run("train --resume " + kOldCheckpoint + " --steps 5 --out " + dir + "/old");
  const Run new_resumed = run("train --resume " + dir + "/new --steps 5");
  INFO(old_resumed.out + new_resumed.out);
  REQUIRE(old_resumed.code == 0);
  REQUIRE(new_resumed.code == 0);
  tapegrad::test::require_same_parameters(dir + "/old", dir + "/new");
  // Its stored options are written back under the new keys.
  const auto resaved = nlohmann::json::parse(io::load_safetensors(dir + "/old/model.safetensors").metadata.at("options"));
  CHECK(resaved.at("clip") == 0.5);
  CHECK(resaved.at("min_len") == 2);
  CHECK(!resaved.contains("clip_norm"));
  // A resume giving the old value under the new flag agrees with the checkpoint.
  CHECK(run("train --resume " + kOldCheckpoint + " --steps 3 --clip 0.5 --min-len 2 --out " + dir + "/same").code == 0);

  // The old config.json repeats the run: the options it names, under the new keys.
  const Run configured = run("train --config " + kOldCheckpoint + "/config.json --steps 3 --out " + dir + "/config");
  INFO(configured.out);
  REQUIRE(configured.code == 0);
  tapegrad::test::require_same_parameters(dir + "/config", kOldCheckpoint);
  const train::TrainOptions c = train::TrainOptions::from_config_file(dir + "/config/config.json");
  CHECK(c.clip == 0.5);
  CHECK(c.task_options.symbols == 5);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint whose stored options leave the table's range is refused in one line naming "
          "the file and the field, exit 2, instead of a run that never ends",
          "[cli][options][errors]") {
  const std::string dir = temp_dir("stored-range");
  REQUIRE(run(kTiny + "--steps 1 --out " + dir + "/run").code == 0);
  const auto [key, value] = GENERATE(table<std::string, int64_t>({
      {"batch_size", 1000000000000},
      {"valid_size", 1000000000000},
      {"min_len", 0},
      {"log_every", 0},
  }));
  CAPTURE(key);
  const std::string ck = dir + "/" + key;
  fs::copy(dir + "/run/latest", ck);
  edit_stored_options(ck, [&, key = key, value = value](nlohmann::json& o) { o[key] = value; });
  // timeout: before the table, batch_size 10^12 printed "steps of 1000000000000 sequences" and hung.
  const Run r = tapegrad::test::run_command("timeout 30 " + std::string(TAPEGRAD_BUILD_DIR) +
                                            "/tools/tapegrad train --resume " + ck + " --steps 3");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::StartsWith("tapegrad: " + ck + "/model.safetensors: metadata 'options': ") &&
                        Catch::Contains("field '" + key + "' is " + std::to_string(value) + "; expected an integer"));
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  fs::remove_all(ck);
}

TEST_CASE("every option has one range: the command line and validate() refuse a value just outside "
          "it with the same message",
          "[cli][options][errors]") {
  for (const train::OptionSpec& row : train::option_table()) {
    if (row.type != train::OptionType::integer && row.type != train::OptionType::real) continue;
    if (row.expected().find("18446744073709551615") != std::string::npos) continue;  // the seed: any uint64
    CAPTURE(row.flag);
    // Below the least value (every range here starts at 0 or above).
    const std::string below = row.type == train::OptionType::integer ? "-1" : "-0.5";
    const std::string message = std::string(row.flag) + " " + below + ": expected " + row.expected();
    train::TrainOptions o;
    CHECK_NOTHROW(row.check(o));  // the default is in range
    CHECK_NOTHROW(o.validate());
    CHECK_THROWS_WITH(row.set(o, below), message);
    // set() stored the value before refusing it: validate() refuses it the same way.
    CHECK_THROWS_WITH(o.validate(), message);
    const Run r = run(kTiny + "--steps 1 " + row.flag + " " + below);
    CHECK(r.code == 2);
    CHECK(r.out == "tapegrad: " + message + "\n");
  }
  // The ranges that had drifted apart: 0 threads (the default) and 0 held-out examples are valid.
  train::TrainOptions o;
  o.threads = 0, o.valid_size = 0;
  CHECK_NOTHROW(o.validate());
  o.valid_size = (int64_t(1) << 24) + 1;
  CHECK_THROWS_WITH(o.validate(), "--valid-size 16777217: expected an integer in [0, 16777216]");
}

TEST_CASE("the table names each saved option's JSON key as its flag, and lists what a resume may change",
          "[options]") {
  std::set<std::string> flags, keys;
  for (const train::OptionSpec& row : train::option_table()) {
    CAPTURE(row.flag);
    CHECK(flags.insert(row.flag).second);
    CHECK(std::string(row.help).size() > 0);
    if (!*row.key) {
      CHECK(row.resumable);  // what is not saved cannot conflict with the checkpoint
      continue;
    }
    CHECK(keys.insert(row.key).second);
    std::string name = std::string(row.flag).substr(2), key = row.key;
    std::replace(name.begin(), name.end(), '-', '_');
    if (key.rfind("model.", 0) == 0) key = key.substr(6);
    // --pre-ln is stored as the model config names it, as checkpoints always have.
    if (name != "pre_ln") CHECK(key == name);
  }
  CHECK(train::kResumableOptions ==
        std::vector<std::string>{"--threads", "--steps", "--out", "--resume", "--overwrite", "--detect-anomaly",
                                 "--eval-every", "--log-every", "--save-every", "--bucket-mb",
                                 "--deterministic-allreduce"});
  // Every saved key is what to_json writes, nested ones inside "model".
  const auto j = nlohmann::json::parse(train::TrainOptions{}.to_json());
  for (const std::string& key : keys) {
    CAPTURE(key);
    CHECK((key.rfind("model.", 0) == 0 ? j.at("model").contains(key.substr(6)) : j.contains(key)));
  }
}
