// `tapegrad experiment`, run as real processes: the table and results.csv of quick runs (one row per arm
// and length bin, fractions in [0, 1]) and the errors for a bad name or option.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "process.hpp"

namespace fs = std::filesystem;

namespace {

using tapegrad::test::Run;
using tapegrad::test::run;

std::string temp_dir(const std::string& name) { return tapegrad::test::temp_dir("exp", name); }

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, sep);) cells.push_back(c);
  return cells;
}

// results.csv as a header and rows of cells; every row as wide as the header.
std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(f, line);) rows.push_back(split(line, ','));
  REQUIRE(rows.size() >= 2);
  for (const auto& r : rows) REQUIRE(r.size() == rows[0].size());
  return rows;
}

size_t column(const std::vector<std::string>& header, const std::string& name) {
  const auto it = std::find(header.begin(), header.end(), name);
  REQUIRE(it != header.end());
  return size_t(it - header.begin());
}

void check_fraction(const std::string& cell) {
  CAPTURE(cell);
  const double v = std::stod(cell);
  CHECK(v >= 0.0);
  CHECK(v <= 1.0);
}

}  // namespace

TEST_CASE("experiment positional --quick: one row per arm, fractions in [0,1]", "[cli][experiment]") {
  const std::string dir = temp_dir("positional");
  const Run r = run("experiment positional --quick --threads 1 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  // The printed table and the summary.
  CHECK_THAT(r.out, Catch::Contains("exact_match") && Catch::Contains("token_accuracy"));
  CHECK_THAT(r.out, Catch::Contains("transformer-sinusoidal") && Catch::Contains("transformer-learned") &&
                        Catch::Contains("transformer-none"));
  CHECK_THAT(r.out, Catch::Contains("reverse: token_accuracy") && Catch::Contains("sort: token_accuracy"));
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  CHECK(h[0] == "experiment");
  REQUIRE(rows.size() == 1 + 6);  // {sinusoidal, learned, none} x {reverse, sort}
  std::set<std::pair<std::string, std::string>> arms;
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i][0] == "positional");
    arms.insert({rows[i][column(h, "task")], rows[i][column(h, "positional")]});
    check_fraction(rows[i][column(h, "exact_match")]);
    check_fraction(rows[i][column(h, "token_accuracy")]);
    CHECK(std::stoll(rows[i][column(h, "parameters")]) > 0);
  }
  CHECK(arms.size() == 6);
  CHECK(fs::exists(dir + "/report.txt"));
  fs::remove_all(dir);
}

TEST_CASE("experiment bottleneck --quick: a row per model, task and length bin", "[cli][experiment]") {
  const std::string dir = temp_dir("bottleneck");
  const Run r = run("experiment bottleneck --quick --steps 50 --seed 7 --threads 1 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("rnn-gru") && Catch::Contains("attention-rnn-gru"));
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  REQUIRE(rows.size() == 1 + 2 * 2 * 2);  // {rnn, attention-rnn} x {copy, reverse} x 2 bins in quick mode
  std::set<std::string> keys;
  for (size_t i = 1; i < rows.size(); ++i) {
    keys.insert(rows[i][column(h, "task")] + "/" + rows[i][column(h, "model")] + "/" + rows[i][column(h, "eval_lengths")]);
    CHECK(rows[i][column(h, "steps")] == "50");
    CHECK(rows[i][column(h, "seed")] == "7");
    check_fraction(rows[i][column(h, "exact_match")]);
    check_fraction(rows[i][column(h, "token_accuracy")]);
  }
  CHECK(keys.size() == 8);
  fs::remove_all(dir);
}

TEST_CASE("experiment parallelism --quick: step times at 1 and 2 threads", "[cli][experiment]") {
  const std::string dir = temp_dir("parallelism");
  const Run r = run("experiment parallelism --quick --threads 2 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  REQUIRE(rows.size() == 1 + 2 * 2 * 2);  // {attention-rnn, transformer} x 2 lengths x {1, 2} threads
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(std::stod(rows[i][column(h, "ms_per_step")]) > 0);
    CHECK(std::stod(rows[i][column(h, "tokens_per_second")]) > 0);
    if (rows[i][column(h, "threads")] == "1") CHECK(rows[i][column(h, "speedup_vs_1_thread")] == "1.00");
    CHECK(std::stod(rows[i][column(h, "work_flops")]) > 0);
    CHECK(std::stod(rows[i][column(h, "parallel_width")]) > 0);
  }
  // The tape's critical path at the two lengths: the same for the Transformer, longer for the GRU.
  std::map<std::string, std::set<std::pair<int, long>>> path;  // model -> (length, critical path)
  for (size_t i = 1; i < rows.size(); ++i)
    path[rows[i][column(h, "model")]].insert(
        {std::stoi(rows[i][column(h, "seq_len")]), std::stol(rows[i][column(h, "critical_path")])});
  REQUIRE(path["transformer"].size() == 2);  // one value per length: the threads do not change the tape
  CHECK(path["transformer"].begin()->second == path["transformer"].rbegin()->second);
  REQUIRE(path["attention-rnn"].size() == 2);
  CHECK(path["attention-rnn"].begin()->second < path["attention-rnn"].rbegin()->second);
  fs::remove_all(dir);
}

TEST_CASE("experiment: bad names and options exit 2 with the reason", "[cli][experiment][errors]") {
  const Run unknown = run("experiment nosuchexperiment --quick");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.out, Catch::Contains("nosuchexperiment") && Catch::Contains("bottleneck") &&
                              Catch::Contains("parallelism"));
  CHECK(std::count(unknown.out.begin(), unknown.out.end(), '\n') == 1);
  const Run steps = run("experiment positional --quick --steps -3");
  CHECK(steps.code == 2);
  CHECK_THAT(steps.out, Catch::Contains("--steps") && Catch::Contains("-3"));
  const Run threads = run("experiment positional --quick --threads -1");
  CHECK(threads.code == 2);
  CHECK_THAT(threads.out, Catch::Contains("--threads") && Catch::Contains("-1"));
  const Run word = run("experiment positional --steps many");
  CHECK(word.code == 2);
  CHECK_THAT(word.out, Catch::Contains("many"));
  const Run none = run("experiment");
  CHECK(none.code == 2);
  const Run help = run("experiment --help");
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("bottleneck:") && Catch::Contains("long-range:") &&
                           Catch::Contains("positional:") && Catch::Contains("parallelism:") &&
                           Catch::Contains("--quick") && Catch::Contains("results.csv"));
}
