// `tapegrad tape --checkpoint`: the step it records is the run's next step, taken with the run's own
// optimizer (train::make_optimizer, as training builds it, in the state the run saved), not a
// default Adam: an SGD run's tape holds one velocity buffer per parameter and the learning rate of
// the step after the checkpoint.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/process.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using tapegrad::test::run;
using tapegrad::test::Run;

namespace {

// Bytes as format_bytes prints them ("6.4 KB") after `label` in `out`.
double bytes_after(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  REQUIRE(at != std::string::npos);
  double value = 0;
  char unit[8] = {};
  REQUIRE(std::sscanf(out.c_str() + at + label.size(), "%lf %7s", &value, unit) == 2);
  const std::string u = unit;
  return value * (u.rfind("KB", 0) == 0 ? 1e3 : u.rfind("MB", 0) == 0 ? 1e6 : 1);
}

// The lr column of metrics.csv's row for `step`.
std::string metrics_lr(const std::string& dir, int step) {
  std::ifstream in(dir + "/metrics.csv");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(std::to_string(step) + ",", 0) == 0) {
      std::stringstream fields(line);
      std::string f;
      for (int i = 0; i < 3; ++i) std::getline(fields, f, ',');
      return f;
    }
  FAIL("no metrics.csv row for step " << step);
  return {};
}

}  // namespace

TEST_CASE("tape --checkpoint of an sgd run takes the run's next step with the run's SGD", "[cli][tape]") {
  const std::string saved = tapegrad::test::temp_dir("tape", "saved"), straight = tapegrad::test::temp_dir("tape", "straight");
  const std::string common =
      "train --model transformer --task reverse --min-len 2 --max-len 5 --symbols 4 --d-model 8 --heads 2 "
      "--d-ff 8 --layers 1 --batch-size 4 --valid-size 4 --eval-every 0 --log-every 1 --threads 1 "
      "--optimizer sgd --momentum 0.5 --warmup 10 ";
  REQUIRE(run(common + "--steps 3 --out " + saved).code == 0);
  REQUIRE(run(common + "--steps 4 --out " + straight).code == 0);
  const Run r = run("tape --checkpoint " + saved + " --threads 1 --top 1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("optimizer sgd"));
  // The learning rate of step 4 (warm-up 4/10 of the peak), as the straight run logged it.
  double logged = std::stod(metrics_lr(straight, 4)), shown = 0;
  const size_t at = r.out.find("step 4: ");
  REQUIRE(at != std::string::npos);
  REQUIRE(std::sscanf(r.out.c_str() + at, "step 4: loss %*f, learning rate %lf", &shown) == 1);
  CHECK(shown == Approx(logged).epsilon(1e-5));
  // SGD keeps one velocity per parameter (Adam would keep two moments: twice the parameters).
  const double params = bytes_after(r.out, "mark); parameters "), state = bytes_after(r.out, "optimizer state ");
  CHECK(state >= params);
  CHECK(state < 1.2 * params);
  fs::remove_all(saved);
  fs::remove_all(straight);
}

namespace {

// The op column of a tape dump's rows, in order.
std::vector<std::string> tape_ops(const std::string& out) {
  std::vector<std::string> ops;
  std::istringstream in(out);
  bool rows = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("entries: ", 0) == 0) break;
    if (rows) {
      std::istringstream fields(line);
      std::string index, op;
      fields >> index >> op;
      ops.push_back(op);
    }
    rows = rows || line.find("  op  ") != std::string::npos;
  }
  return ops;
}

}  // namespace

TEST_CASE("tape --order 2 shows the recorded backward's entries after the forward's", "[cli][tape]") {
  const Run first = run("tape");
  const Run second = run("tape --order 2");
  INFO(first.out << second.out);
  REQUIRE(first.code == 0);
  REQUIRE(second.code == 0);
  const std::vector<std::string> forward = tape_ops(first.out), both = tape_ops(second.out);
  REQUIRE(forward == std::vector<std::string>{"linear", "relu", "linear", "cross_entropy"});
  // The same forward first, then the backward as ops: linear's dx and dW are matmuls, relu's and the
  // composite's derivatives unary_backward entries, then the squared norm of the gradient.
  REQUIRE(both.size() > forward.size() + 10);
  CHECK(std::vector<std::string>(both.begin(), both.begin() + 4) == forward);
  const auto count = [&](const std::string& op) { return std::count(both.begin() + 4, both.end(), op); };
  CHECK(count("matmul") == 3);  // dx of the second linear, dW of both
  CHECK(count("unary_backward") >= 2);
  CHECK(count("permute") >= 2);
  CHECK(count("sum_all") >= 4);  // one per parameter's squared norm
  CHECK(count("linear") == 0);  // the backward does not call the forward op
  CHECK_THAT(second.out, Contains("order 2: forward, its backward recorded (create_graph)"));
  CHECK_THAT(second.out, Contains("entries: " + std::to_string(both.size()) + " (" + std::to_string(both.size())));
}

TEST_CASE("tape --order 2 refuses a model's step, naming the option", "[cli][tape]") {
  const Run r = run("tape --order 2 --model transformer");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Contains("--order 2"));
  CHECK(run("tape --order 3").code != 0);
}
