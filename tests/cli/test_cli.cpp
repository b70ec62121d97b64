// The `tapegrad` command line, run as real processes: the train/eval/translate contract, exact resume
// across processes, clear errors with exit code 2.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tapegrad/io.hpp"
#include "tapegrad/tapegrad.hpp"
#include "process.hpp"

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
