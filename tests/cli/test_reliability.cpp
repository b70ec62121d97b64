// Reliability of `tapegrad train` as real processes: kill -9 at every instant of a save leaves a
// resumable directory whose resume is bitwise the uninterrupted run; metrics.csv survives kills; one
// trainer per directory; no silent overwrite; a non-finite loss stops the run; every bad option or
// input is refused with exit code 2 and a line naming it, before anything is written.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "process.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/metrics.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using tapegrad::test::Run;
using tapegrad::test::require_same_parameters;
using tapegrad::test::run;

std::string temp_dir(const std::string& name) {
  return tapegrad::test::temp_dir("rel", name);
}

// A tiny Transformer on reverse at 1 thread: deterministic, a fraction of a second per run.
const std::string kTiny =
    "--model transformer --task reverse --min-len 3 --max-len 6 --symbols 5 --d-model 16 --layers 1 --heads "
    "2 "
    "--d-ff 32 --batch-size 8 --threads 1 --valid-size 10 --eval-every 0 --log-every 1 --dropout 0.1 --seed "
    "7 ";

bool killed(const Run& r) {
  return r.code == -1 || r.code == 128 + SIGKILL;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}


std::vector<std::string> temporaries_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("kill -9 at each instant of a save leaves a resumable pair; resume equals the straight run",
          "[cli][reliability]") {
  const std::string straight = temp_dir("straight");
  REQUIRE(run("train " + kTiny + "--steps 8 --save-every 2 --out " + straight).code == 0);
  for (const std::string point : {"model-written", "step-renamed", "pointer-swapped"}) {
    CAPTURE(point);
    const std::string dir = temp_dir("kill");
    const Run k = tapegrad::test::run_with_env("TAPEGRAD_TEST_CRASH_AT", point + ":4",
                                               "train " + kTiny + "--steps 8 --save-every 2 --out " + dir);
    INFO(k.out);
    REQUIRE(killed(k));
    // What outside readers see is a complete checkpoint (step 2, or step 4 once the pointer moved).
    const train::LoadedModel m = train::load_checkpoint(dir);
    CHECK(m.step == (point == std::string("pointer-swapped") ? 4 : 2));
    CHECK(io::load_safetensors(dir + "/model.safetensors").tensors.size() > 0);
    const Run e = run("eval --checkpoint " + dir + " --size 5");
    CHECK(e.code == 0);
    if (point == std::string("model-written")) CHECK(!temporaries_in(dir).empty());
    // Resume: the killed write's temporaries go, and the run ends where the straight one did.
    const Run r = run("train --resume " + dir + " --steps 8 --threads 1");
    INFO(r.out);
    REQUIRE(r.code == 0);
    CHECK(temporaries_in(dir).empty());
    require_same_parameters(straight, dir);
    // Two checkpoints are kept, behind the pointer.
    CHECK(fs::read_symlink(dir + "/latest") == "step-00000008");
    CHECK(fs::is_directory(dir + "/step-00000006"));
    CHECK(!fs::exists(dir + "/step-00000002"));
    fs::remove_all(dir);
  }
  fs::remove_all(straight);
}

TEST_CASE("kill -9 at random instants with --save-every 1 never leaves an unresumable directory",
          "[cli][reliability]") {
  for (int trial = 0; trial < 4; ++trial) {
    CAPTURE(trial);
    const std::string dir = temp_dir("random" + std::to_string(trial));
    const pid_t pid = tapegrad::test::spawn(
        {"train",  "--model",      "transformer", "--task",       "reverse", "--min-len",
         "3",      "--max-len",    "6",           "--d-model",    "16",      "--layers",
         "1",      "--heads",      "2",           "--d-ff",       "32",      "--batch-size",
         "8",      "--threads",    "1",           "--valid-size", "10",      "--eval-every",
         "0",      "--log-every",  "1",           "--seed",       "7",       "--steps",
         "100000", "--save-every", "1",           "--out",        dir});
    // Wait for a first checkpoint, then kill at a point that varies from trial to trial.
    for (int i = 0; i < 200 && !fs::exists(dir + "/latest"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(37 * trial + 11));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(fs::exists(dir + "/latest"));
    const train::LoadedModel m = train::load_checkpoint(dir);
    // metrics.csv was flushed row by row: its rows reach at least the saved step.
    const auto rows = lines_of(dir + "/metrics.csv");
    REQUIRE(rows.size() >= 2);
    CHECK(rows[0].rfind("step,loss", 0) == 0);
    CHECK(int64_t(rows.size()) - 1 >= m.step);
    const Run r = run("train --resume " + dir + " --steps " + std::to_string(m.step + 2) + " --threads 1");
    INFO(r.out);
    CHECK(r.code == 0);
    // After the resume: the header once, then one row per step up to the end, none repeated.
    const auto after = lines_of(dir + "/metrics.csv");
    CHECK(after[0].rfind("step,loss", 0) == 0);
    for (size_t i = 1; i < after.size(); ++i) {
      CAPTURE(after[i]);
      const int64_t step = std::stoll(after[i].substr(0, after[i].find(',')));
      if (after[i].find(",,,,,") == std::string::npos)
        CHECK(step == int64_t(i));  // train rows, steps 1, 2, ...
    }
    fs::remove_all(dir);
  }
}

TEST_CASE("resume keeps metrics.csv's header and rows up to the checkpoint, dropping later ones",
          "[cli][reliability]") {
  const std::string dir = temp_dir("metrics");
  // Killed after saving step 4 and logging rows 5 and 6.
  const Run k = tapegrad::test::run_with_env("TAPEGRAD_TEST_CRASH_AT", "model-written:6",
                                             "train " + kTiny + "--steps 8 --save-every 2 --out " + dir);
  REQUIRE(killed(k));
  auto rows = lines_of(dir + "/metrics.csv");
  REQUIRE(rows.size() == 7);  // header + steps 1..6
  REQUIRE(run("train --resume " + dir + " --steps 8").code == 0);
  rows = lines_of(dir + "/metrics.csv");
  REQUIRE(rows.size() == 10);  // header, steps 1..8, the final evaluation
  for (int s = 1; s <= 8; ++s) CHECK(rows[size_t(s)].rfind(std::to_string(s) + ",", 0) == 0);
  CHECK(rows[9].rfind("8,,,,,", 0) == 0);
  fs::remove_all(dir);
}

TEST_CASE("metrics.csv columns are found by name: reordered, missing and unknown columns read right",
          "[cli][reliability][metrics]") {
  // Written by this version: the header once, every figure exactly, empty fields for what a row lacks.
  train::MetricsRow step;
  step.step = 3, step.loss = 0.1, step.lr = 2.5e-05, step.grad_norm = 1.0 / 3, step.tokens_per_second = 1e6;
  train::MetricsRow eval;
  eval.step = 3, eval.valid_loss = 1.5, eval.valid_token_accuracy = 0.25, eval.valid_exact_match = 0;
  CHECK(train::metrics_header() ==
        "step,loss,lr,grad_norm,tokens_per_second,valid_loss,valid_token_accuracy,valid_exact_match,"
        "valid_bits_per_char,padding_fraction");
  CHECK(train::metrics_line(step) == "3,0.1,2.5e-05,0.3333333333333333,1e+06,,,,,");
  CHECK(train::metrics_line(eval) == "3,,,,,1.5,0.25,0,,");
  const std::string dir = temp_dir("columns");
  fs::create_directories(dir);
  const std::string path = dir + "/metrics.csv";
  std::ofstream(path) << train::metrics_header() << "\n"
                      << train::metrics_line(step) << "\n"
                      << train::metrics_line(eval) << "\n";
  auto rows = train::read_metrics(path);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].grad_norm == 1.0 / 3);  // bit for bit
  CHECK(std::isnan(rows[0].valid_loss));
  CHECK(rows[1].valid_token_accuracy == 0.25);
  // Another version's file: columns in another order, one missing, one unknown.
  std::ofstream(path) << "valid_exact_match,lr,step,extra,loss,valid_loss,valid_token_accuracy,grad_norm\n"
                      << ",0.001,7,x,2.5,,,0.5\n0.75,,8,,,1.25,0.5,\n";
  rows = train::read_metrics(path);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].step == 7);
  CHECK(rows[0].loss == 2.5);
  CHECK(rows[0].lr == 0.001);
  CHECK(rows[0].grad_norm == 0.5);
  CHECK(std::isnan(rows[0].tokens_per_second));
  CHECK(rows[1].step == 8);
  CHECK(rows[1].valid_loss == 1.25);
  CHECK(rows[1].valid_exact_match == 0.75);
  // Errors name FILE:LINE.
  std::ofstream(path) << "loss,lr\n1,2\n";
  CHECK_THROWS_WITH(train::read_metrics(path), Catch::Contains(path + ":1") && Catch::Contains("'step'"));
  std::ofstream(path) << train::metrics_header() << "\n1,2,3\n";
  CHECK_THROWS_WITH(train::read_metrics(path), Catch::Contains(path + ":2") && Catch::Contains("found 3"));
  std::ofstream(path) << train::metrics_header() << "\nx,2,3,4,5,,,,,\n";
  CHECK_THROWS_WITH(train::read_metrics(path), Catch::Contains(path + ":2") && Catch::Contains("step 'x'"));
  fs::remove_all(dir);
}

TEST_CASE("a resume into another --out carries an older file's rows over in today's columns",
          "[cli][reliability][metrics]") {
  const std::string a = temp_dir("oldcols"), b = temp_dir("oldcols-copy");
  REQUIRE(run("train " + kTiny + "--steps 4 --out " + a).code == 0);
  // The original's metrics.csv as a version with other columns might have left it.
  std::ofstream(a + "/metrics.csv") << "lr,step,loss\n0.5,1,2.25\n0.5,2,2.125\n0.5,3,2\n0.5,4,1.875\n";
  REQUIRE(run("train --resume " + a + " --steps 6 --out " + b).code == 0);
  const auto rows = lines_of(b + "/metrics.csv");
  REQUIRE(rows.size() >= 5);
  CHECK(rows[0] == train::metrics_header());
  CHECK(rows[1] == "1,2.25,0.5,,,,,,,");
  CHECK(rows[4] == "4,1.875,0.5,,,,,,,");
  CHECK(rows[5].rfind("5,", 0) == 0);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("one trainer per directory: a second exits 2 naming the first's pid", "[cli][reliability]") {
  const std::string dir = temp_dir("lock");
  const pid_t pid = tapegrad::test::spawn(
      {"train",   "--task",       "copy", "--min-len",    "3",  "--max-len",    "4",  "--d-model",
       "16",      "--layers",     "1",    "--heads",      "2",  "--d-ff",       "32", "--batch-size",
       "8",       "--threads",    "1",    "--valid-size", "10", "--eval-every", "0",  "--steps",
       "1000000", "--save-every", "20",   "--out",        dir});
  for (int i = 0; i < 250 && !fs::exists(dir + "/latest"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(fs::exists(dir + "/latest"));
  const Run second = run("train --resume " + dir + " --steps 1000000");
  const Run fresh = run("train --task copy --steps 5 --overwrite --out " + dir);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(second.code == 2);
  CHECK_THAT(second.out, Catch::Contains("another trainer (pid " + std::to_string(pid) + ")"));
  CHECK(fresh.code == 2);
  CHECK_THAT(fresh.out, Catch::Contains("another trainer"));
  // Once it is gone the lock is free and the directory resumes.
  const int64_t saved = train::load_checkpoint(dir).step;
  const Run after = run("train --resume " + dir + " --steps " + std::to_string(saved));
  INFO(after.out);
  CHECK(after.code == 0);
  fs::remove_all(dir);
}

TEST_CASE("a fresh train over a checkpoint is refused unless --overwrite; files untouched",
          "[cli][reliability]") {
  const std::string dir = temp_dir("overwrite");
  REQUIRE(run("train " + kTiny + "--steps 4 --out " + dir).code == 0);
  const std::string metrics = read_file(dir + "/metrics.csv");
  const Run r = run("train " + kTiny + "--steps 2 --out " + dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.out,
             Catch::Contains("--out " + dir + ": holds a checkpoint") && Catch::Contains("--overwrite"));
  CHECK(read_file(dir + "/metrics.csv") == metrics);
  CHECK(train::load_checkpoint(dir).step == 4);
  const Run o = run("train " + kTiny + "--steps 2 --overwrite --out " + dir);
  CHECK(o.code == 0);
  CHECK(train::load_checkpoint(dir).step == 2);
  CHECK(lines_of(dir + "/metrics.csv").size() == 4);  // header, 2 steps, the final evaluation
  // --overwrite cannot replace the checkpoint a run resumes from.
  const Run self = run("train --resume " + dir + " --steps 3 --overwrite");
  CHECK(self.code == 2);
  CHECK_THAT(self.out, Catch::Contains("--overwrite"));
  fs::remove_all(dir);
}

TEST_CASE("resume into another --out leaves the original untouched and carries its curve",
          "[cli][reliability]") {
  const std::string a = temp_dir("orig"), b = temp_dir("copy");
  REQUIRE(run("train " + kTiny + "--steps 4 --out " + a).code == 0);
  const std::string before = read_file(a + "/metrics.csv");
  REQUIRE(run("train --resume " + a + " --steps 6 --out " + b).code == 0);
  CHECK(read_file(a + "/metrics.csv") == before);
  CHECK(train::load_checkpoint(a).step == 4);
  CHECK(train::load_checkpoint(b).step == 6);
  const auto rows = lines_of(b + "/metrics.csv");
  CHECK(rows[1].rfind("1,", 0) == 0);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("a non-finite loss stops training with exit 3 naming the step; the last checkpoint is kept",
          "[cli][reliability]") {
  const std::string dir = temp_dir("diverge");
  const Run r =
      run("train --task reverse --min-len 3 --max-len 6 --d-model 16 --layers 1 --heads 2 --d-ff 32 "
          "--batch-size 8 --threads 1 --valid-size 10 --eval-every 0 --optimizer sgd --lr 1000 --clip 0 "
          "--warmup 0 --schedule constant --steps 200 --save-every 1 --out " +
          dir);
  INFO(r.out);
  CHECK(r.code == 3);
  CHECK_THAT(r.out, Catch::Matches(
                        "(.|\n)*tapegrad: step [0-9]+: the (loss|gradient norm) is (NaN|[+-]inf)(.|\n)*"));
  // The parameters saved at the step before the failing one produced it: the pointer went back one.
  const train::LoadedModel m = train::load_checkpoint(dir);
  CHECK(m.step >= 1);
  CHECK_THAT(r.out, Catch::Contains("step " + std::to_string(m.step + 2) + ":") &&
                        Catch::Contains("the checkpoint in " + dir + " is step " + std::to_string(m.step)));
  // The kept checkpoint is finite: it evaluates to a finite loss.
  const Run e = run("eval --checkpoint " + dir + " --size 5");
  CHECK(e.code == 0);
  CHECK_THAT(e.out, Catch::Matches("(.|\n)*\nloss: [0-9.]+\n(.|\n)*"));
  fs::remove_all(dir);
}

TEST_CASE("bad options exit 2 naming the option and its range, before anything is written",
          "[cli][reliability][errors]") {
  const std::string dir = temp_dir("badopt");
  const std::string ck = temp_dir("badopt-ck");
  REQUIRE(run("train " + kTiny + "--steps 2 --out " + ck).code == 0);
  const auto [args, expect] = GENERATE_REF(table<std::string, std::string>({
      {"train --lr -1", "--lr"},
      {"train --lr nan", "--lr"},
      {"train --lr inf", "--lr"},
      {"train --warmup -5", "--warmup"},
      {"train --valid-fraction -0.5", "--valid-fraction"},
      {"train --valid-fraction 2", "--valid-fraction"},
      {"train --clip -1", "--clip"},
      {"train --threads 1025", "--threads"},
      {"train --threads -1", "--threads"},
      {"train --save-every -1", "--save-every"},
      {"train --log-every 0", "--log-every"},
      {"train --log-every -1", "--log-every"},
      {"train --eval-every -1", "--eval-every"},
      {"train --valid-size 16777217", "--valid-size"},
      {"train --valid-size -1", "--valid-size"},
      {"train --label-smoothing 1", "--label-smoothing"},
      {"train --dropout 1", "--dropout"},
      {"train --batch-size 0", "--batch-size"},
      {"train --seed -1", "--seed -1"},
      {"train --seed 18446744073709551616", "--seed 18446744073709551616"},
      {"train --seed 99999999999999999999", "--seed 99999999999999999999"},
      {"train --optimizer lion", "--optimizer"},
      {"eval --checkpoint CK --max-output -1", "--max-output"},
      {"eval --checkpoint CK --seed -3", "--seed"},
      {"translate --checkpoint CK --beam 100000 abc", "--beam"},
      {"translate --checkpoint CK --beam 0 abc", "--beam"},
  }));
  CAPTURE(args);
  std::string cmd = args;
  if (const size_t at = cmd.find("CK"); at != std::string::npos) cmd.replace(at, 2, ck);
  const Run r = run(cmd + (cmd.rfind("train", 0) == 0 ? " --out " + dir : ""));
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains(expect));
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK(!fs::exists(dir));
  fs::remove_all(ck);
}

TEST_CASE("seeds are exact 64-bit integers: neighbours near the top give different runs",
          "[cli][reliability]") {
  const std::string a = temp_dir("seed-a"), b = temp_dir("seed-b");
  REQUIRE(run("train --task copy --min-len 3 --max-len 4 --d-model 16 --layers 1 --heads 2 --d-ff 32 "
              "--batch-size 4 "
              "--threads 1 --valid-size 5 --steps 1 --seed 18446744073709551615 --out " +
              a)
              .code == 0);
  REQUIRE(run("train --task copy --min-len 3 --max-len 4 --d-model 16 --layers 1 --heads 2 --d-ff 32 "
              "--batch-size 4 "
              "--threads 1 --valid-size 5 --steps 1 --seed 18446744073709551614 --out " +
              b)
              .code == 0);
  CHECK(train::load_checkpoint(a).options.seed == 18446744073709551615ull);
  CHECK(train::load_checkpoint(b).options.seed == 18446744073709551614ull);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("--resume refuses conflicting options, listing each, and --steps below the checkpoint",
          "[cli][reliability]") {
  const std::string dir = temp_dir("conflict");
  REQUIRE(run("train " + kTiny + "--steps 4 --out " + dir).code == 0);
  const Run c = run("train --resume " + dir + " --steps 6 --model rnn --d-model 32 --optimizer sgd --lr 5");
  CHECK(c.code == 2);
  CHECK_THAT(c.out, Catch::Contains("--model rnn (checkpoint: transformer)") &&
                        Catch::Contains("--d-model 32 (checkpoint: 16)") &&
                        Catch::Contains("--optimizer sgd (checkpoint: adamw)") && Catch::Contains("--lr 5"));
  const Run t = run("train --resume " + dir + " --steps 6 --train other.tsv");
  CHECK(t.code == 2);
  CHECK_THAT(t.out, Catch::Contains("--train other.tsv"));
  const Run back = run("train --resume " + dir + " --steps 2");
  CHECK(back.code == 2);
  CHECK_THAT(back.out, Catch::Contains("--steps 2") && Catch::Contains("step 4"));
  CHECK(train::load_checkpoint(dir).step == 4);
  // The same values again, and the options that may change, are accepted.
  const Run ok =
      run("train --resume " + dir + " --steps 6 --d-model 16 --threads 2 --log-every 2 --save-every 3");
  INFO(ok.out);
  CHECK(ok.code == 0);
  fs::remove_all(dir);
}

TEST_CASE("TSV: '#' lines are data, blank lines are counted, long lines and all-held-out files are refused",
          "[cli][reliability]") {
  const std::string dir = temp_dir("tsv");
  fs::create_directories(dir);
  std::ofstream(dir + "/hash.tsv") << "#ab\tba#\n\nabc\tcba\nxy\tyx\n";
  const Run h = run("train --train " + dir + "/hash.tsv --valid " + dir +
                    "/hash.tsv --model rnn --d-model 16 "
                    "--hidden 16 --layers 1 --batch-size 2 --threads 1 --steps 1 --out " +
                    dir + "/run");
  INFO(h.out);
  CHECK(h.code == 0);
  CHECK_THAT(h.out, Catch::Contains("3 training pairs") && Catch::Contains("blank line"));
  std::ofstream(dir + "/one.tsv") << "abc\tcba\n";
  const Run one = run("train --train " + dir + "/one.tsv --steps 1 --out " + dir + "/one");
  CHECK(one.code == 2);
  CHECK_THAT(one.out, Catch::Contains("held out") && Catch::Contains("--valid-fraction"));
  {
    std::ofstream f(dir + "/long.tsv");
    f << "abc\tcba\n" << std::string(600, 'a') << "\tb\n";
  }
  const Run lg =
      run("train --train " + dir + "/long.tsv --valid-fraction 0 --steps 1 --out " + dir + "/long");
  CHECK(lg.code == 2);
  CHECK_THAT(lg.out, Catch::Contains("long.tsv:2") && Catch::Contains("max_len"));
  CHECK(!fs::exists(dir + "/long"));
  fs::remove_all(dir);
}

TEST_CASE("a directory in the two-file layout of earlier versions loads and resumes", "[cli][reliability]") {
  const std::string dir = temp_dir("new"), old = temp_dir("old");
  REQUIRE(run("train " + kTiny + "--steps 3 --out " + dir).code == 0);
  fs::create_directories(old);
  fs::copy_file(dir + "/latest/model.safetensors", old + "/model.safetensors");
  fs::copy_file(dir + "/latest/optimizer.safetensors", old + "/optimizer.safetensors");
  CHECK(train::load_checkpoint(old).step == 3);
  const Run r = run("train --resume " + old + " --steps 5");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(train::load_checkpoint(old).step == 5);
  CHECK(fs::is_symlink(old + "/model.safetensors"));
  fs::remove_all(dir);
  fs::remove_all(old);
}

namespace {

// `tapegrad ARGS` run from the working directory `cwd`.
Run run_in(const std::string& cwd, const std::string& args) {
  const fs::path here = fs::current_path();
  fs::current_path(cwd);
  const Run r = run(args);
  fs::current_path(here);
  return r;
}

}  // namespace

TEST_CASE(
    "relative --train/--valid paths: --resume works from another directory, or says the path came "
    "from the checkpoint",
    "[cli][reliability][paths]") {
  const std::string dir = temp_dir("paths");
  fs::create_directories(dir + "/data");
  fs::create_directories(dir + "/elsewhere");
  {
    std::ofstream train(dir + "/data/train.tsv"), valid(dir + "/data/valid.tsv");
    for (const char* w : {"abc", "bca", "cab", "acb", "bac", "cba", "aab", "bba"})
      train << w << "\t" << w << "\n";
    valid << "abc\tabc\ncab\tcab\n";
  }
  const std::string tsv =
      "--train data/train.tsv --valid data/valid.tsv --model rnn --d-model 16 --hidden 16 "
      "--layers 1 --batch-size 4 --threads 1 --eval-every 0 --log-every 1 --seed 3 ";
  REQUIRE(run_in(dir, "train " + tsv + "--steps 4 --out straight").code == 0);
  REQUIRE(run_in(dir, "train " + tsv + "--steps 2 --out run").code == 0);
  // Stored absolute: the checkpoint and config.json name the files wherever they are read from.
  const auto saved = train::load_checkpoint(dir + "/run").options;
  CHECK(fs::path(saved.train) == fs::path(dir) / "data/train.tsv");
  CHECK(fs::path(saved.valid) == fs::path(dir) / "data/valid.tsv");
  const Run resumed = run_in(dir + "/elsewhere", "train --resume ../run --steps 4");
  INFO(resumed.out);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.out, Catch::Contains("resuming at step 2"));
  require_same_parameters(dir + "/straight", dir + "/run");
  // The same file spelt from here is no conflict.
  const Run same = run_in(dir + "/elsewhere", "train --resume ../run --steps 4 --train ../data/train.tsv");
  INFO(same.out);
  CHECK(same.code == 0);

  // The data moved away: the error says where the path came from.
  fs::rename(dir + "/data", dir + "/moved");
  const Run gone = run_in(dir + "/elsewhere", "train --resume ../run --steps 6");
  CHECK(gone.code == 2);
  CHECK_THAT(gone.out, Catch::Contains(dir + "/data/train.tsv") &&
                           Catch::Contains("--train path recorded in the checkpoint"));
  CHECK(std::count(gone.out.begin(), gone.out.end(), '\n') == 1);
  fs::rename(dir + "/moved", dir + "/data");

  // A checkpoint of an earlier version holding the relative paths: they mean the working directory.
  const std::string old = dir + "/old";
  fs::create_directories(old);
  fs::copy_file(dir + "/run/latest/optimizer.safetensors", old + "/optimizer.safetensors");
  io::SafetensorsFile model = io::load_safetensors(dir + "/run/latest/model.safetensors");
  auto options = nlohmann::json::parse(model.metadata.at("options"));
  options["train"] = "data/train.tsv";
  options["valid"] = "data/valid.tsv";
  model.metadata["options"] = options.dump();
  io::save_safetensors(old + "/model.safetensors", model.tensors, model.metadata);
  const Run relative = run_in(dir + "/elsewhere", "train --resume ../old --steps 6");
  CHECK(relative.code == 2);
  CHECK_THAT(relative.out, Catch::Contains("data/train.tsv: no such file") &&
                               Catch::Contains("relative to the directory it was trained in") &&
                               Catch::Contains(dir + "/elsewhere/data/train.tsv"));
  CHECK(std::count(relative.out.begin(), relative.out.end(), '\n') == 1);
  const Run there = run_in(dir, "train --resume old --steps 6");
  INFO(there.out);
  CHECK(there.code == 0);
  fs::remove_all(dir);
}
