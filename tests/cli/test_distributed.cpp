// Data-parallel training as real processes: `mpirun -np N tapegrad train` on loopback against one
// process at the same global batch, seed and data. One rank is the single-process run bit for bit;
// 2 and 4 ranks (oversubscribed on a small machine) follow its loss curve and end at its parameters
// within float tolerance (the sums are associated differently); the deterministic all-reduce repeats
// bit for bit. Rank 0 alone writes; a resume may change the number of ranks; a killed rank ends the
// job within a bounded time leaving a valid checkpoint; an empty shard and options that differ
// across ranks are refused with exit code 2 and one line. [.slow]: the default job on 2 ranks reaches
// the single-process job's accuracy. Skipped, with a message, when mpirun is missing or the build has
// no MPI.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "process.hpp"
#include "tapegrad/distributed.hpp"
#include "tapegrad/io.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using tapegrad::test::Run;

const std::string kTapegrad = std::string(TAPEGRAD_BUILD_DIR) + "/tools/tapegrad";

// Why the tests cannot run here, or "" when they can.
std::string unavailable() {
  if (!train::mpi_available()) return "this build has no MPI (install libopenmpi-dev and reconfigure)";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return "mpirun is not installed (openmpi-bin)";
  return "";
}

#define REQUIRE_MPI_OR_SKIP()              \
  do {                                     \
    const std::string why = unavailable(); \
    if (!why.empty()) {                    \
      WARN("skipped: " << why);            \
      return;                              \
    }                                      \
  } while (0)

// `sh -c CMD`, stdout and stderr together.
Run shell(const std::string& cmd) { return tapegrad::test::run_command(cmd); }

// Under `tools/run sanitize` the ranks run with AddressSanitizer too, but without its leak check: Open MPI
// leaves its own allocations (and those of plugins it has unloaded) to the process's exit, which
// LeakSanitizer reports and turns into exit codes these tests read. Leaks in tapegrad's own code are
// still caught by the single-process suites, which run the same training code. `env` execs mpirun in
// the same process, so the pid the kill test launches is mpirun's.
const std::string kMpirun =
    "env ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" mpirun --allow-run-as-root --oversubscribe ";

// `tapegrad ARGS` on `ranks` ranks under mpirun.
Run mpirun(int ranks, const std::string& args) {
  return shell(kMpirun + "-np " + std::to_string(ranks) + " " + kTapegrad + " " + args);
}

// A tiny Transformer on reverse at 1 thread per rank, no dropout (dropout draws per rank).
const std::string kTiny =
    "train --model transformer --task reverse --min-len 3 --max-len 7 --d-model 16 --layers 1 --heads 2 "
    "--d-ff 32 --threads 1 --valid-size 20 --eval-every 0 --log-every 1 --dropout 0 --seed 11 ";

// Plain SGD where parameters are compared: they then differ by the learning rate times the gradients'
// difference (Adam would turn the rounding of gradients near zero into steps of about the learning rate).
const std::string kSgd = "--optimizer sgd --momentum 0.9 --lr 0.3 --warmup 0 --schedule constant ";

std::string temp_dir(const std::string& name) {
  return tapegrad::test::temp_dir("dist", name);
}

// metrics.csv's training rows: step -> loss, and how many rows each step has.
struct Curve {
  std::map<int64_t, double> loss;
  int duplicated = 0;
};
Curve read_curve(const std::string& dir) {
  std::ifstream in(dir + "/metrics.csv");
  REQUIRE(in);
  Curve c;
  std::string line;
  std::getline(in, line);  // header: step,loss,...
  while (std::getline(in, line)) {
    std::stringstream row(line);
    std::string step, loss;
    std::getline(row, step, ',');
    std::getline(row, loss, ',');
    if (loss.empty()) continue;  // a validation row
    c.duplicated += c.loss.count(std::stoll(step)) ? 1 : 0;
    c.loss[std::stoll(step)] = std::stod(loss);
  }
  return c;
}

// The largest difference between two checkpoints' parameters, per tensor relative to its largest
// magnitude: max |a - b| / max |a|. (Element-wise relative differences are no measure: Adam moves a
// weight whose gradient is near zero by about the learning rate whatever the gradient's sign.)
double parameter_distance(const std::string& a_dir, const std::string& b_dir) {
  const auto a = io::load_safetensors(a_dir + "/model.safetensors");
  const auto b = io::load_safetensors(b_dir + "/model.safetensors");
  REQUIRE(a.tensors.size() == b.tensors.size());
  double worst = 0;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    const std::vector<double> x = a.tensors[i].second.to_vector(), y = b.tensors[i].second.to_vector();
    REQUIRE(x.size() == y.size());
    double diff = 0, scale = 1e-12;
    for (size_t k = 0; k < x.size(); ++k)
      diff = std::max(diff, std::abs(x[k] - y[k])), scale = std::max(scale, std::abs(x[k]));
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

bool same_curve_bits(const Curve& a, const Curve& b) {
  return a.loss == b.loss;
}

// The same global batch of 12 over 1, 2 and 4 ranks: 12 divides by all, 10 does not by 4.
constexpr int kSteps = 25;

}  // namespace

TEST_CASE("N ranks train the single-process model: 1 rank bitwise, 2 and 4 within float tolerance",
          "[distributed]") {
  REQUIRE_MPI_OR_SKIP();
  const std::string steps = "--steps " + std::to_string(kSteps) + " ";
  for (const int batch : {12, 10}) {
    CAPTURE(batch);
    // Plain SGD: the parameters differ by the learning rate times the gradients' difference (Adam would
    // amplify the rounding of gradients near zero to steps of about the learning rate).
    const std::string args = kTiny + steps +
                             "--optimizer sgd --momentum 0.9 --lr 0.3 --warmup 0 --schedule constant " +
                             "--batch-size " + std::to_string(batch) + " --out ";
    const std::string one = temp_dir("one");
    const Run r1 = tapegrad::test::run(args + one);
    REQUIRE(r1.code == 0);
    const Curve c1 = read_curve(one);
    REQUIRE(c1.loss.size() == size_t(kSteps));
    for (const int ranks : {1, 2, 4}) {
      CAPTURE(ranks);
      const std::string dir = temp_dir(std::string("n").append(std::to_string(ranks)));
      const Run r = mpirun(ranks, args + dir);
      INFO(r.out);
      REQUIRE(r.code == 0);
      // The layout line opens rank 0's log, and no other rank printed.
      const int64_t fewest = batch / ranks, most = fewest + (batch % ranks ? 1 : 0);
      std::string per_rank = std::to_string(fewest);
      if (most != fewest) per_rank.append(1, '-').append(std::to_string(most));
      CHECK(r.out.rfind("data-parallel: " + std::to_string(ranks) + (ranks == 1 ? " rank, " : " ranks, ") +
                            per_rank + " sequences per rank per step, buckets of 4 MiB\n",
                        0) == 0);
      size_t trainings = 0;
      for (size_t at = 0; (at = r.out.find("\ntraining ", at)) != std::string::npos; ++at) ++trainings;
      CHECK(trainings == 1);
      const Curve c = read_curve(dir);
      CHECK(c.duplicated == 0);
      REQUIRE(c.loss.size() == size_t(kSteps));
      if (ranks == 1) {
        CHECK(same_curve_bits(c, c1));
        tapegrad::test::require_same_parameters(one, dir);
      } else {
        double worst = 0;
        for (const auto& [step, loss] : c1.loss)
          worst = std::max(worst, std::abs(c.loss.at(step) - loss) / loss);
        CAPTURE(worst);
        CHECK(worst < 1e-5);
        CHECK(parameter_distance(one, dir) < 2e-5);
      }
      fs::remove_all(dir);
    }
    fs::remove_all(one);
  }
}

TEST_CASE("2 ranks train the attention RNN (stacked weight gradients) as one process does", "[distributed]") {
  REQUIRE_MPI_OR_SKIP();
  // The GRU's weights are used once per time step with a few rows each: their gradient is one GEMM
  // over the stacked uses, complete only when the last use runs.
  const std::string args =
      "train --model attention-rnn --task reverse --min-len 3 --max-len 7 --d-model 16 "
      "--hidden 24 --layers 1 --threads 1 --valid-size 20 --eval-every 0 --log-every 1 "
      "--dropout 0 --seed 3 --steps 10 --batch-size 10 --bucket-mb 0.01 " +
      kSgd + "--out ";
  const std::string one = temp_dir("rnn-one"), two = temp_dir("rnn-two");
  REQUIRE(tapegrad::test::run(args + one).code == 0);
  const Run r = mpirun(2, args + two);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const Curve c1 = read_curve(one), c2 = read_curve(two);
  REQUIRE(c2.loss.size() == c1.loss.size());
  for (const auto& [step, loss] : c1.loss) CHECK(std::abs(c2.loss.at(step) - loss) <= 1e-5 * loss);
  CHECK(parameter_distance(one, two) < 2e-5);
  fs::remove_all(one), fs::remove_all(two);
}

TEST_CASE("the deterministic all-reduce repeats bit for bit and agrees with one process", "[distributed]") {
  REQUIRE_MPI_OR_SKIP();
  const std::string args =
      kTiny + kSgd + "--steps 15 --batch-size 12 --deterministic-allreduce --bucket-mb 0.01 --out ";
  const std::string a = temp_dir("det-a"), b = temp_dir("det-b"), one = temp_dir("det-one");
  const Run ra = mpirun(4, args + a);
  INFO(ra.out);
  REQUIRE(ra.code == 0);
  CHECK(ra.out.find("summed in rank order (deterministic)") != std::string::npos);
  REQUIRE(mpirun(4, args + b).code == 0);
  CHECK(same_curve_bits(read_curve(a), read_curve(b)));
  tapegrad::test::require_same_parameters(a, b);
  REQUIRE(tapegrad::test::run(kTiny + kSgd + "--steps 15 --batch-size 12 --out " + one).code == 0);
  CHECK(parameter_distance(one, a) < 2e-5);
  for (const auto& d : {a, b, one}) fs::remove_all(d);
}

TEST_CASE("checkpointed layers on 2 ranks train the bits of plain layers: buckets wait for the recomputation",
          "[distributed][checkpoint]") {
  // A gradient is complete when its parameter's last use has run backward; a checkpointed layer's
  // parameters are used again on the tapes its recomputation records on. Small buckets are sent as soon
  // as they are complete, so one sent too early would carry a partial gradient.
  REQUIRE_MPI_OR_SKIP();
  const std::string args = kTiny + kSgd +
                           "--layers 2 --dropout 0.1 --steps 4 --batch-size 8 --deterministic-allreduce "
                           "--bucket-mb 0.001 --out ";
  const std::string plain = temp_dir("ck-plain"), checkpointed = temp_dir("ck-on");
  const Run a = mpirun(2, args + plain), b = mpirun(2, args + checkpointed + " --checkpoint-layers");
  INFO(a.out + b.out);
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  tapegrad::test::require_same_parameters(plain, checkpointed);
  for (const auto& d : {plain, checkpointed}) fs::remove_all(d);
}

TEST_CASE("a resume may change the number of ranks", "[distributed]") {
  REQUIRE_MPI_OR_SKIP();
  const std::string args = kTiny + kSgd + "--batch-size 12 --save-every 10 ";
  const std::string straight = temp_dir("straight"), two = temp_dir("two"), one = temp_dir("one-more"),
                    four = temp_dir("four-more");
  REQUIRE(tapegrad::test::run(args + "--steps 20 --out " + straight).code == 0);
  // 2 ranks to step 10, then one process to 15, then 4 ranks to 20: the straight run's curve.
  const Run r2 = mpirun(2, args + "--steps 10 --out " + two);
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  const Run r1 = tapegrad::test::run("train --resume " + two + " --steps 15 --out " + one);
  INFO(r1.out);
  REQUIRE(r1.code == 0);
  const Run r4 = mpirun(4, "train --resume " + one + " --steps 20 --out " + four);
  INFO(r4.out);
  REQUIRE(r4.code == 0);
  CHECK(r4.out.find("resuming at step 15") != std::string::npos);
  const Curve s = read_curve(straight), c = read_curve(four);
  REQUIRE(c.loss.size() == 20);  // the earlier runs' rows are carried over
  double worst = 0;
  for (const auto& [step, loss] : s.loss) worst = std::max(worst, std::abs(c.loss.at(step) - loss) / loss);
  CAPTURE(worst);
  CHECK(worst < 1e-5);
  CHECK(parameter_distance(straight, four) < 2e-5);
  for (const auto& d : {straight, two, one, four}) fs::remove_all(d);
}

TEST_CASE("an empty shard and options that differ across ranks are refused; an error on one rank stops all",
          "[distributed]") {
  REQUIRE_MPI_OR_SKIP();
  const std::string dir = temp_dir("refused");
  SECTION("a global batch smaller than the ranks") {
    const Run r = mpirun(4, kTiny + "--steps 2 --batch-size 3 --out " + dir);
    INFO(r.out);
    CHECK(r.code == 2);
    const std::string line =
        "tapegrad: --batch-size 3: fewer sequences than the 4 ranks of this data-parallel run (each rank "
        "needs "
        "at least one per step)";
    CHECK(r.out.find(line) != std::string::npos);
    CHECK(r.out.find(line) == r.out.rfind(line));  // rank 0 alone says it
    CHECK(!fs::exists(dir + "/model.safetensors"));
  }
  SECTION("an error on rank 0 alone stops every rank") {
    // Rank 0 alone creates the run directory: here it cannot, and the others must not wait for it.
    const std::string file = dir + ".file";
    std::ofstream(file) << "x";
    const Run r = mpirun(2, kTiny + "--steps 2 --batch-size 4 --out " + file + "/run");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find("tapegrad: rank 0 of 2: --out " + file + "/run: cannot create the directory") !=
          std::string::npos);
    CHECK(r.out.find("; stopping every rank") != std::string::npos);
    fs::remove(file);
  }
  SECTION("another seed on one rank") {
    const Run r =
        shell(kMpirun + "-np 1 " + kTapegrad + " " + kTiny + "--steps 2 --batch-size 4 --out " + dir +
              " : -np 1 " + kTapegrad + " " + kTiny + "--steps 2 --batch-size 4 --seed 12 --out " + dir);
    INFO(r.out);
    CHECK(r.code == 2);
    const std::string line =
        "tapegrad: data-parallel: rank 1 started with other options than rank 0 (or resumed another step): "
        "every rank must run the same command";
    CHECK(r.out.find(line) != std::string::npos);
    CHECK(r.out.find(line) == r.out.rfind(line));
  }
  fs::remove_all(dir);
}

TEST_CASE("a rank killed with kill -9 ends the job within seconds; the checkpoint stays valid and resumes",
          "[distributed]") {
  REQUIRE_MPI_OR_SKIP();
  for (const int victim : {1, 0}) {
    CAPTURE(victim);
    const std::string dir = temp_dir("killed"), log = dir + ".log";
    const std::string cmd = kMpirun + "-np 2 " + kTapegrad + " " + kTiny +
                            "--steps 1000000 --batch-size 8 --save-every 20 --out " + dir + " >" + log +
                            " 2>&1";
    const pid_t launcher = ::fork();
    if (launcher == 0) {
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Wait for a checkpoint, then kill the victim rank (mpirun's child with OMPI_COMM_WORLD_RANK=victim).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!fs::exists(dir + "/model.safetensors") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(fs::exists(dir + "/model.safetensors"));
    pid_t rank_pid = 0;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string pid, comm, state, ppid;
      if (!(stat >> pid >> comm >> state >> ppid) || std::stoi(ppid) != launcher) continue;
      std::ifstream env(entry.path() / "environ");
      std::string var;
      while (std::getline(env, var, '\0'))
        if (var == "OMPI_COMM_WORLD_RANK=" + std::to_string(victim)) rank_pid = std::stoi(pid);
    }
    REQUIRE(rank_pid > 0);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(::kill(rank_pid, SIGKILL) == 0);
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(launcher, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done == 0) ::kill(launcher, SIGKILL), ::waitpid(launcher, &status, 0);
    CAPTURE(seconds);
    REQUIRE(done == launcher);  // the job ended by itself, well within the bound
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    std::ifstream in(log);
    const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(out);
    CHECK(out.find("rank " + std::to_string(victim)) != std::string::npos);
    CHECK(out.find("exited on signal 9 (Killed)") != std::string::npos);
    // The last checkpoint loads, and one process continues from it.
    const Run eval = tapegrad::test::run("eval --checkpoint " + dir + " --size 5");
    INFO(eval.out);
    CHECK(eval.code == 0);
    const std::string at = "(step ";
    const int64_t saved = std::stoll(eval.out.substr(eval.out.find(at) + at.size()));
    CHECK(saved % 20 == 0);
    const Run more = tapegrad::test::run("train --resume " + dir + " --out " + dir +
                                         "-more --threads 1 --steps " + std::to_string(saved + 5));
    INFO(more.out);
    CHECK(more.code == 0);
    CHECK(more.out.find("resuming at step " + std::to_string(saved)) != std::string::npos);
    fs::remove_all(dir), fs::remove_all(dir + "-more"), fs::remove(log);
  }
}

TEST_CASE("the default job on 2 ranks reaches the single-process job's accuracy", "[distributed][.slow]") {
  REQUIRE_MPI_OR_SKIP();
  // `tapegrad train --model transformer --task reverse` as it stands (1500 steps), then eval on 1000
  // held-out examples: a few minutes each on 2 cores.
  auto exact_match = [](const Run& eval) {
    const std::string key = "exact_match: ";
    const size_t at = eval.out.find(key);
    REQUIRE(at != std::string::npos);
    return std::stod(eval.out.substr(at + key.size()));
  };
  const std::string one = temp_dir("default-one"), two = temp_dir("default-two");
  const std::string job = "train --model transformer --task reverse --out ";
  REQUIRE(tapegrad::test::run(job + one).code == 0);
  const Run r = mpirun(2, job + two);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const double a = exact_match(tapegrad::test::run("eval --checkpoint " + one + " --task reverse"));
  const double b = exact_match(tapegrad::test::run("eval --checkpoint " + two + " --task reverse"));
  CAPTURE(a, b);
  CHECK(a >= 0.99);
  CHECK(b >= a - 0.01);
  fs::remove_all(one), fs::remove_all(two);
}
