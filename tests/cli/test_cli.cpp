// The `tapegrad` command line, run as real processes: the train/eval/translate contract, exact resume
// across processes, clear errors with exit code 2.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "process.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using tapegrad::test::Run;
using tapegrad::test::run;

std::string temp_dir(const std::string& name) { return tapegrad::test::temp_dir("cli", name); }

const std::string kTiny =
    "--d-model 32 --layers 1 --heads 2 --d-ff 64 --hidden 32 --batch-size 16 --threads 1 --valid-size 20 "
    "--log-every 1 --eval-every 0 ";

}  // namespace

TEST_CASE("train, eval and translate follow the contract", "[cli]") {
  const std::string dir = temp_dir("contract");
  const Run t = run("train --model transformer --task copy --min-len 3 --max-len 5 --symbols 4 --steps 30 "
                    "--seed 3 --out " + dir + " " + kTiny);
  INFO(t.out);
  REQUIRE(t.code == 0);
  CHECK_THAT(t.out, Catch::Contains("step 30/30"));
  CHECK(fs::exists(dir + "/model.safetensors"));
  CHECK(fs::exists(dir + "/optimizer.safetensors"));
  CHECK(fs::exists(dir + "/metrics.csv"));
  CHECK(fs::exists(dir + "/samples.txt"));
  const Run e = run("eval --checkpoint " + dir + " --task copy --size 20");
  INFO(e.out);
  CHECK(e.code == 0);
  CHECK_THAT(e.out, Catch::Matches("(.|\n)*exact_match: [01]\\.[0-9]+(.|\n)*") &&
                        Catch::Matches("(.|\n)*token_accuracy: [01]\\.[0-9]+(.|\n)*"));
  const Run tr = run("translate --checkpoint " + dir, "abc\nbad\ncab\n");
  INFO(tr.out);
  CHECK(tr.code == 0);
  CHECK(std::count(tr.out.begin(), tr.out.end(), '\n') == 3);
  fs::remove_all(dir);
}

TEST_CASE("k steps + save + resume + N-k steps equals N steps bit for bit", "[cli]") {
  for (const std::string model : {"transformer", "attention-rnn"}) {
    CAPTURE(model);
    const std::string straight = temp_dir("straight"), split = temp_dir("split");
    const std::string common = "train --model " + model + " --task reverse --min-len 3 --max-len 6 --symbols 5 "
                               "--dropout 0.2 --seed 11 --warmup 3 " + kTiny;
    REQUIRE(run(common + "--steps 8 --out " + straight).code == 0);
    REQUIRE(run(common + "--steps 3 --out " + split).code == 0);
    const Run r = run("train --resume " + split + " --steps 8 --threads 1 --log-every 1 --eval-every 0");
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("resuming at step 3"));
    tapegrad::test::require_same_parameters(straight, split);
    fs::remove_all(straight);
    fs::remove_all(split);
  }
}

TEST_CASE("bad input: one line on stderr and exit code 2", "[cli][errors]") {
  const std::string dir = temp_dir("errors");
  fs::create_directories(dir);
  std::ofstream(dir + "/bad.tsv") << "abc\tcba\n# hash\tdata\nno tab on this line\nxy\tyx\n";
  const Run tsv = run("train --train " + dir + "/bad.tsv --steps 1 --out " + dir + "/run");
  CHECK(tsv.code == 2);
  CHECK_THAT(tsv.out, Catch::Contains("bad.tsv:3"));
  const Run unknown = run("train --task nosuchtask --steps 1");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.out, Catch::Contains("nosuchtask") && Catch::Contains("reverse"));
  const Run missing = run("eval --checkpoint " + dir + "/nowhere --task copy");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.out, Catch::Contains("nowhere"));
  const Run option = run("train --steps many");
  CHECK(option.code == 2);
  const Run help = run("train --help");
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("--model") && Catch::Contains("--rnn-cell") && Catch::Contains("--resume"));
  // A truncated checkpoint is refused without a crash.
  const std::string ck = dir + "/ck";
  REQUIRE(run("train --task copy --min-len 3 --max-len 4 --steps 2 --out " + ck + " " + kTiny).code == 0);
  fs::resize_file(ck + "/model.safetensors", fs::file_size(ck + "/model.safetensors") / 2);
  const Run trunc = run("eval --checkpoint " + ck + " --task copy");
  CHECK(trunc.code == 2);
  CHECK_THAT(trunc.out, Catch::Contains("model.safetensors"));
  fs::remove_all(dir);
}

TEST_CASE("training on TSV files, whitespace tokens", "[cli]") {
  const std::string dir = temp_dir("tsv");
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/train.tsv");
    const char* words[] = {"red", "green", "blue", "cyan"};
    for (int i = 0; i < 64; ++i) f << words[i % 4] << " " << words[(i / 4) % 4] << "\t" << words[(i / 4) % 4] << " " << words[i % 4] << "\n";
  }
  const Run t = run("train --model rnn --rnn-cell lstm --train " + dir + "/train.tsv --tokens whitespace --steps 5 "
                    "--out " + dir + "/run " + kTiny);
  INFO(t.out);
  CHECK(t.code == 0);
  const Run tr = run("translate --checkpoint " + dir + "/run \"red blue\"");
  CHECK(tr.code == 0);
  const Run e = run("eval --checkpoint " + dir + "/run --valid " + dir + "/train.tsv");
  CHECK(e.code == 0);
  CHECK_THAT(e.out, Catch::Contains("exact_match:"));
  fs::remove_all(dir);
}

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Column `col` of metrics.csv's rows that have it (1: train loss, 2: lr, 5: valid loss), as written.
std::vector<std::string> metrics_column(const std::string& run_dir, size_t col) {
  std::ifstream in(run_dir + "/metrics.csv");
  std::vector<std::string> out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f(1);
    for (char c : line)
      if (c == ',')
        f.emplace_back();
      else
        f.back().push_back(c);
    if (f.size() > col && !f[col].empty()) out.push_back(f[col]);
  }
  return out;
}

}  // namespace

TEST_CASE("--schedule constant is constant unless --warmup is given; a resume keeps the stored warm-up",
          "[cli][schedule]") {
  const std::string dir = temp_dir("constant");
  const std::string common = "train --task copy --min-len 3 --max-len 4 --symbols 4 --lr 0.002 " + kTiny;
  REQUIRE(run(common + "--schedule constant --steps 4 --out " + dir + "/flat").code == 0);
  const auto flat = metrics_column(dir + "/flat", 2);
  REQUIRE(flat.size() == 4);
  for (const auto& lr : flat) CHECK(std::strtod(lr.c_str(), nullptr) == 0.002);
  // Asked for, the warm-up is there; and a resume continues the ramp it stored.
  REQUIRE(run(common + "--schedule constant --warmup 6 --steps 2 --out " + dir + "/ramp").code == 0);
  const Run r =
      run("train --resume " + dir + "/ramp --schedule constant --steps 4 --log-every 1 --eval-every 0");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto ramp = metrics_column(dir + "/ramp", 2);
  REQUIRE(ramp.size() == 4);
  for (int step = 1; step <= 4; ++step) {
    CAPTURE(step);
    CHECK(std::strtod(ramp[size_t(step - 1)].c_str(), nullptr) == 0.002 * std::min(1.0, step / 6.0));
  }
  const Run help = run("train --help");
  CHECK_THAT(help.out, Catch::Contains("no warm-up unless --warmup is given") &&
                           Catch::Contains("default: 0 with --schedule constant"));
  fs::remove_all(dir);
}

TEST_CASE("eval --json prints one JSON object with every figure at full precision", "[cli][json]") {
  const std::string dir = temp_dir("json");
  fs::create_directories(dir);
  {
    std::ofstream train(dir + "/train.tsv"), valid(dir + "/valid.tsv");
    const char* words[] = {"abc", "bca", "cab", "acb", "bac", "cba", "aab", "bba"};
    for (int i = 0; i < 48; ++i)
      train << words[i % 8] << words[(i / 8) % 8] << "\t" << words[(i / 8) % 8] << "\n";
    for (int i = 0; i < 7; ++i) valid << words[i] << words[7 - i] << "\t" << words[7 - i] << "\n";
  }
  const std::string run_dir = dir + "/run";
  REQUIRE(run("train --train " + dir + "/train.tsv --valid " + dir + "/valid.tsv --steps 6 --out " + run_dir +
              " " + kTiny)
              .code == 0);
  const Run e = run("eval --checkpoint " + run_dir + " --valid " + dir + "/valid.tsv --threads 1 --json");
  INFO(e.out);
  REQUIRE(e.code == 0);
  CHECK(std::count(e.out.begin(), e.out.end(), '\n') == 1);
  const nlohmann::json j = nlohmann::json::parse(e.out);
  CHECK(j.at("checkpoint") == run_dir);
  CHECK(j.at("step") == 6);
  CHECK(j.at("model") == "transformer");
  CHECK(j.at("examples") == 7);
  CHECK(j.at("samples").size() == 5);
  CHECK(j.at("exact_match").get<double>() >= 0);
  CHECK(j.at("token_accuracy").get<double>() >= 0);
  // The same examples as training's final validation: the loss agrees to the bit.
  const auto valid_loss = metrics_column(run_dir, 5);
  REQUIRE(valid_loss.size() == 1);
  CHECK(j.at("loss").get<double>() == std::strtod(valid_loss[0].c_str(), nullptr));
  // Plain eval stays readable: four decimals.
  const Run plain = run("eval --checkpoint " + run_dir + " --valid " + dir + "/valid.tsv --threads 1");
  CHECK_THAT(plain.out, Catch::Matches("(.|\n)*\nloss: [0-9]+\\.[0-9]{4}\n(.|\n)*"));
  fs::remove_all(dir);
}

TEST_CASE("train writes --out/config.json; train --config repeats the run, the command line overriding",
          "[cli][config]") {
  const std::string dir = temp_dir("config");
  const std::string a = dir + "/a";
  REQUIRE(run("train --task reverse --min-len 3 --max-len 5 --symbols 5 --seed 5 --lr 0.003 --dropout 0.1 "
              "--schedule inverse_sqrt --warmup 3 --steps 6 --out " +
              a + " " + kTiny)
              .code == 0);
  const nlohmann::json config = nlohmann::json::parse(slurp(a + "/config.json"));
  CHECK(config.at("seed") == 5);
  CHECK(config.at("lr") == 0.003);
  CHECK(config.at("steps") == 6);
  CHECK(config.at("model").at("d_model") == 32);
  CHECK(config.at("model").at("dropout") == 0.1);
  // Repeated from the file alone: the same losses, bit for bit, and the same effective options.
  const Run b = run("train --config " + a + "/config.json --out " + dir + "/b");
  INFO(b.out);
  REQUIRE(b.code == 0);
  const auto losses = metrics_column(a, 1);
  REQUIRE(losses.size() == 6);
  CHECK(metrics_column(dir + "/b", 1) == losses);
  CHECK(slurp(dir + "/b/config.json") == slurp(a + "/config.json"));
  // The command line wins over the file.
  REQUIRE(run("train --config " + a + "/config.json --steps 3 --out " + dir + "/c").code == 0);
  const nlohmann::json c = nlohmann::json::parse(slurp(dir + "/c/config.json"));
  CHECK(c.at("steps") == 3);
  CHECK(c.at("seed") == 5);
  CHECK(metrics_column(dir + "/c", 1) == std::vector<std::string>(losses.begin(), losses.begin() + 3));
  // A subset of the keys is a config too; the rest keep their defaults.
  std::ofstream(dir + "/partial.json") << R"({"steps": 2, "schedule": "constant", "model": {"d_model": 16, "heads": 2}})";
  REQUIRE(run("train --config " + dir +
              "/partial.json --task copy --min-len 3 --max-len 4 --threads 1 "
              "--valid-size 5 --out " +
              dir + "/d")
              .code == 0);
  const nlohmann::json d = nlohmann::json::parse(slurp(dir + "/d/config.json"));
  CHECK(d.at("steps") == 2);
  CHECK(d.at("warmup") == 0);  // constant means constant here too
  CHECK(d.at("model").at("d_model") == 16);
  CHECK(d.at("model").at("layers") == train::TrainOptions{}.model.layers);
  // Unknown keys and wrong types: one line naming the file and the key, exit 2.
  for (const auto& [json, key] :
       std::vector<std::pair<std::string, std::string>>{{R"({"lerning_rate": 0.1})", "'lerning_rate'"},
                                                        {R"({"lr": "fast"})", "'lr'"},
                                                        {R"({"seed": 1.5})", "'seed'"},
                                                        {R"({"model": {"d_modle": 8}})", "'model.d_modle'"},
                                                        {R"({"model": 3})", "'model'"}}) {
    CAPTURE(json);
    std::ofstream(dir + "/bad.json") << json;
    const Run bad = run("train --config " + dir + "/bad.json --steps 1");
    CHECK(bad.code == 2);
    CHECK_THAT(bad.out, Catch::Contains(dir + "/bad.json") && Catch::Contains(key));
    CHECK(std::count(bad.out.begin(), bad.out.end(), '\n') == 1);
  }
  fs::remove_all(dir);
}

TEST_CASE("translate counts the input tokens unknown to the vocabulary on stderr", "[cli][translate]") {
  const std::string dir = temp_dir("unknown");
  REQUIRE(run("train --task copy --min-len 3 --max-len 5 --symbols 4 --steps 2 --out " + dir + " " + kTiny)
              .code == 0);
  const auto known = tapegrad::test::run_split("translate --checkpoint " + dir, "abc\ndcba\n");
  REQUIRE(known.code == 0);
  CHECK(std::count(known.out.begin(), known.out.end(), '\n') == 2);
  CHECK(known.err.empty());
  const auto some = tapegrad::test::run_split("translate --checkpoint " + dir, "abxyz\nczd\n");
  REQUIRE(some.code == 0);
  CHECK(std::count(some.out.begin(), some.out.end(), '\n') == 2);  // stdout: the outputs alone
  CHECK(some.err == "translate: 4 of 8 input tokens unknown to the vocabulary (mapped to <unk>)\n");
  fs::remove_all(dir);
}
