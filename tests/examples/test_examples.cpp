// The worked examples (examples/*.cpp): each built program runs with its defaults and must exit 0 and
// print what it promises: a loss that fell by a real margin, an accuracy above the bar, a passed
// gradient check, a sample of text. The figures are read back from the output, not hard-coded.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
