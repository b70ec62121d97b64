// The worked examples (examples/*.cpp): each built program runs with its defaults and must exit 0 and
// print what it promises: a loss that fell by a real margin, an accuracy above the bar, a passed
// gradient check, a sample of text. The figures are read back from the output, not hard-coded.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/process.hpp"

using tapegrad::test::Run;

namespace {

Run run_example(const std::string& name, const std::string& args = "") {
  return tapegrad::test::run_command(std::string(TAPEGRAD_BUILD_DIR) + "/examples/" + name + " " + args);
}

// The first line of `out` that starts with `prefix` (REQUIREd to exist).
std::string line_starting(const std::string& out, const std::string& prefix) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line;
  FAIL("no line starting with \"" << prefix << "\"");
  return {};
}

// Two numbers from `line` in the sscanf `format` (REQUIREd to parse).
std::pair<double, double> two_numbers(const std::string& line, const char* format) {
  double a = 0, b = 0;
  REQUIRE(std::sscanf(line.c_str(), format, &a, &b) == 2);
  return {a, b};
}

int count_lines_starting(const std::string& out, const std::string& prefix) {
  std::istringstream in(out);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("mlp_spirals: the loss falls and the held-out accuracy clears 90%", "[examples]") {
  const Run r = run_example("mlp_spirals");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(count_lines_starting(r.out, "step ") >= 5);  // the loss as it falls, not just the end points
  const auto [first, last] = two_numbers(line_starting(r.out, "loss "), "loss %lf -> %lf");
  CHECK(last < 0.1 * first);
  const auto [train, held_out] =
      two_numbers(line_starting(r.out, "final accuracy:"), "final accuracy: train %lf, held-out %lf");
  CHECK(train >= 0.9);
  CHECK(held_out >= 0.9);
}

TEST_CASE("mlp_spirals: the model saved with nn::save and loaded into a fresh one gives identical outputs",
          "[examples]") {
  const Run r = run_example("mlp_spirals");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto [same, total] = two_numbers(line_starting(r.out, "saved and loaded into a fresh model: "),
                                         "saved and loaded into a fresh model: %lf of %lf held-out logits");
  CHECK(total == 400 * 2);  // 400 held-out points, 2 logits each
  CHECK(same == total);
}

TEST_CASE("char_lm: perplexity falls, then it samples text with word structure", "[examples]") {
  const Run r = run_example("char_lm");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto [first_loss, last_loss] =
      two_numbers(line_starting(r.out, "train loss "), "train loss %lf -> %lf");
  CHECK(last_loss < 0.5 * first_loss);
  const auto [first_ppl, last_ppl] = two_numbers(line_starting(r.out, "train loss "),
                                                 "train loss %*f -> %*f; held-out perplexity %lf -> %lf");
  CHECK(last_ppl < 0.5 * first_ppl);
  // The sample sits between two "---" lines, starts with the prompt and has the requested length.
  const size_t begin = r.out.find("---\n"), end = r.out.find("\n---", begin + 4);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string sample = r.out.substr(begin + 4, end - begin - 4);
  CHECK(sample.rfind("The ", 0) == 0);
  CHECK(sample.size() == 4 + 300);
  // A model that learned nothing picks each of the ~40 characters about equally (a space 1 time in
  // 40); English has a space about every 5 or 6 characters.
  int spaces = 0;
  for (char c : sample) spaces += c == ' ';
  CHECK(spaces >= int(sample.size()) / 10);
}

TEST_CASE("char_lm: --text trains on a file instead of the built-in text", "[examples]") {
  const std::string path = tapegrad::test::temp_dir("examples", "text.txt");
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(path) << text;
  const Run r = run_example("char_lm", "--text " + path + " --steps 60 --length 40");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("text: " + path + ", " + std::to_string(text.size()) + " characters"));
  // No capital T in this text: the sample starts from its first character instead of "The ".
  CHECK_THAT(r.out, Catch::Contains("---\nt"));
  std::filesystem::remove(path);
}

TEST_CASE("char_lm: a bad option is refused with exit code 2, naming it", "[examples]") {
  const Run unknown = run_example("char_lm", "--stepz 5");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.out, Catch::Contains("--stepz"));
  const Run missing = run_example("char_lm", "--text /nonexistent/corpus.txt");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.out, Catch::Contains("/nonexistent/corpus.txt"));
}

TEST_CASE("custom_op: the user-defined op passes gradcheck, catches a wrong backward, and trains",
          "[examples]") {
  const Run r = run_example("custom_op");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("gradcheck swish, x [4,5] and beta [5], float64: passed"));
  CHECK_THAT(r.out, Catch::Contains("gradcheck swish, beta constant, float64: passed"));
  CHECK_THAT(r.out, Catch::Contains("deliberately wrong backward (dy/dx = s): caught"));
  CHECK_THAT(r.out, Catch::Contains("#1 swish(") && Catch::Contains("#3 swish("));  // on the tape, by name
  const auto [first, last] = two_numbers(line_starting(r.out, "mse "), "mse %lf -> %lf");
  CHECK(last < 0.02 * first);
}

namespace {

// The numbers printed after each "label " in `out`'s lines that start with `prefix`, in order.
std::vector<double> column(const std::string& out, const std::string& prefix, const std::string& label) {
  std::vector<double> values;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t at = line.find(label + " ");
    REQUIRE(at != std::string::npos);
    values.push_back(std::stod(line.substr(at + label.size() + 1)));
  }
  return values;
}

// The number that follows `label` in `out` (REQUIREd to be there).
double number_after(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  REQUIRE(at != std::string::npos);
  return std::stod(out.substr(at + label.size()));
}

}  // namespace

TEST_CASE("hessian_vector: hvp matches finite differences; power iteration converges to the dense eigenvalue",
          "[examples]") {
  const Run r = run_example("hessian_vector");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("321 parameters"));
  CHECK(number_after(r.out, "max relative error ") < 1e-6);
  // The Rayleigh quotients settle: the last few agree to many digits, the first ones did not.
  const std::vector<double> q = column(r.out, "iteration ", "rayleigh");
  REQUIRE(q.size() >= 5);
  REQUIRE(q.size() < 300);
  CHECK(std::abs(q.back() - q[q.size() - 2]) < 1e-8 * std::abs(q.back()));
  CHECK(std::abs(q.back() - q[0]) > 1e-3 * std::abs(q.back()));
  CHECK(number_after(r.out, "top eigenvalue: ") == Approx(q.back()).epsilon(1e-12));
  CHECK(q.back() > 0);  // a minimum's sharpest direction curves upwards
  // The tiny net: the full Hessian's largest eigenvalue (Jacobi) is the power iteration's.
  const double power = number_after(r.out, "tiny net top eigenvalue: power iteration ");
  const double jacobi = number_after(r.out, "Jacobi on hessian() ");
  CHECK(power == Approx(jacobi).epsilon(1e-8));
  CHECK(number_after(r.out, "symmetric to ") < 1e-10);
}

TEST_CASE("newton_logistic: Newton converges quadratically to 1e-10 in under 10 steps, gradient descent does not",
          "[examples]") {
  const Run r = run_example("newton_logistic");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::vector<double> newton = column(r.out, "iteration ", "newton"), gd = column(r.out, "iteration ", "gd");
  REQUIRE(newton.size() >= 10);
  REQUIRE(gd.size() == newton.size());
  size_t reached = newton.size();
  for (size_t k = 0; k < newton.size() && reached == newton.size(); ++k)
    if (newton[k] < 1e-10) reached = k;
  CHECK(reached < 10);
  // Quadratic: once close, each step's error is about the square of the last (the exponent doubles):
  // log e_{k+1} / log e_k near 2, where a linear method keeps it near 1.
  int quadratic_steps = 0;
  for (size_t k = 0; k + 1 < newton.size(); ++k)
    if (newton[k] < 1e-2 && newton[k + 1] > 1e-14) {
      CHECK(std::log(newton[k + 1]) / std::log(newton[k]) > 1.7);
      ++quadratic_steps;
    }
  CHECK(quadratic_steps >= 2);
  REQUIRE(reached < gd.size());
  CHECK(gd[reached] > 1e-2);  // gradient descent is still far when Newton has converged
  for (size_t k = 1; k < gd.size(); ++k) CHECK(gd[k] < gd[k - 1]);  // ...though its safe step always helps
  CHECK(number_after(r.out, "gradient descent needed ") > 50);
}

TEST_CASE("gradient_penalty: the penalty's gradient matches finite differences; loss and penalty both fall",
          "[examples]") {
  const Run r = run_example("gradient_penalty");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::vector<double> errors = column(r.out, "d(penalty)/d ", "relative error");
  REQUIRE(errors.size() == 4);  // one entry of each of the four weights
  for (double e : errors) CHECK(e < 1e-6);
  CHECK(count_lines_starting(r.out, "step ") >= 5);
  const auto [loss0, loss1] = two_numbers(line_starting(r.out, "loss "), "loss %lf -> %lf");
  const auto [pen0, pen1] = two_numbers(line_starting(r.out, "loss "), "loss %*f -> %*f, penalty %lf -> %lf");
  CHECK(loss1 < 0.1 * loss0);
  CHECK(pen1 < 0.2 * pen0);
  // Trained without the penalty, the same model ends with a larger one.
  const auto [plain_loss, plain_pen] = two_numbers(line_starting(r.out, "trained on the loss alone instead: "),
                                                   "trained on the loss alone instead: loss %lf, penalty %lf");
  CHECK(plain_pen > pen1);
  (void)plain_loss;
}

TEST_CASE("meta_gradient: d L_val / d lr matches its closed form and finite differences; tuning lr helps",
          "[examples]") {
  const Run r = run_example("meta_gradient");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(number_after(r.out, "one step, a = 0.05: d L_val(w')/d a = ") ==
        Approx(number_after(r.out, "-<grad L_val(w'), grad L_train(w)> = ")).epsilon(1e-10));
  const std::vector<double> errors = column(r.out, "3 unrolled steps: ", "relative error");
  REQUIRE(errors.size() == 2);  // in the learning rate and in one weight
  for (double e : errors) CHECK(e < 1e-6);
  const std::vector<double> lr = column(r.out, "outer ", "lr"), val = column(r.out, "outer ", "val loss");
  REQUIRE(lr.size() == 20);
  CHECK(lr.back() > 3 * lr.front());  // 0.01 is far too small for 5 steps: the meta-gradient raises it
  CHECK(val.back() < 0.8 * val.front());
  const auto [before, after] =
      two_numbers(line_starting(r.out, "lr 0.0100 -> "), "lr 0.0100 -> %*f: val loss after 5 steps %lf -> %lf");
  CHECK(after < 0.8 * before);
}
