// The gradient-path experiment at tiny sizes, as a real process (`tapegrad experiment gradient-path
// --quick`) and through the library with two seeds: results.csv has one row per seed, arm and distance
// with finite, positive gradient norms, and the critical paths read from the tape grow with the source
// length for the RNNs and stay the same for the Transformer.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "tests/cli/process.hpp"
#include "experiments/experiment.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, sep);) cells.push_back(c);
  return cells;
}

// results.csv as rows of column name -> cell; every row as wide as the header.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f);
  std::string line;
  REQUIRE(std::getline(f, line));
  const auto header = split(line, ',');
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    const auto cells = split(line, ',');
    REQUIRE(cells.size() == header.size());
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < cells.size(); ++c) row[header[c]] = cells[c];
    rows.push_back(row);
  }
  return rows;
}

// Checks results.csv in `dir` for a run with these seeds (steps per arm as given).
void check_results(const std::string& dir, const std::set<std::string>& seeds, const std::string& steps) {
  const auto rows = read_csv(dir + "/results.csv");
  const std::set<std::string> arms = {"rnn-gru", "attention-rnn-gru", "transformer-sinusoidal"};
  // part gradient: (seed, arm, steps) -> distances seen; steps 0 (before training) and `steps`
  std::map<std::tuple<std::string, std::string, std::string>, std::set<int>> distances;
  // part tape: arm -> length -> critical path
  std::map<std::string, std::map<int, long>> path;
  for (const auto& row : rows) {
    CHECK(row.at("experiment") == "gradient-path");
    CHECK(arms.count(row.at("arm")) == 1);
    if (row.at("part") == "gradient") {
      CAPTURE(row.at("seed"), row.at("arm"), row.at("distance"));
      CHECK(distances[{row.at("seed"), row.at("arm"), row.at("steps")}]
                .insert(std::stoi(row.at("distance")))
                .second);
      CHECK((row.at("steps") == "0" || row.at("steps") == steps));
      for (const char* col :
           {"grad_norm", "grad_norm_rel", "grad_gain", "grad_gain_rel", "grad_norm_all_pairs"}) {
        const double v = std::stod(row.at(col));
        CHECK(std::isfinite(v));
        CHECK(v > 0);
      }
      if (row.at("distance") == "1") {
        CHECK(std::stod(row.at("grad_norm_rel")) == 1.0);
        CHECK(std::stod(row.at("grad_gain_rel")) == 1.0);
      }
    } else {
      REQUIRE(row.at("part") == "tape");
      CHECK(std::stol(row.at("entries")) >= std::stol(row.at("critical_path")));
      CHECK(std::stod(row.at("work_flops")) > 0);
      CHECK(std::stod(row.at("parallel_width")) > 0);
      path[row.at("arm")][std::stoi(row.at("seq_len"))] = std::stol(row.at("critical_path"));
    }
  }
  // Every seed x three arms x {before, after training}, each with distances 1, 3, ..., 2S-1 for the
  // quick source length S = 8.
  REQUIRE(distances.size() == 3 * 2 * seeds.size());
  std::set<std::string> seen;
  for (const auto& [key, d] : distances) {
    CAPTURE(std::get<0>(key), std::get<1>(key), std::get<2>(key));
    CHECK(d == std::set<int>{1, 3, 5, 7, 9, 11, 13, 15});
    seen.insert(std::get<0>(key));
  }
  CHECK(seen == seeds);
  // The tape part: three lengths per arm; the RNNs' path grows at every step, the Transformer's is constant.
  REQUIRE(path.size() == 3);
  for (const auto& [arm, by_len] : path) {
    CAPTURE(arm);
    REQUIRE(by_len.size() == 3);
    for (auto it = std::next(by_len.begin()); it != by_len.end(); ++it) {
      if (arm == "transformer-sinusoidal")
        CHECK(it->second == std::prev(it)->second);
      else
        CHECK(it->second > std::prev(it)->second);
    }
  }
}

}  // namespace

TEST_CASE("experiment gradient-path --quick: norms per arm and distance; critical paths by length",
          "[cli][experiment]") {
  const std::string dir = tapegrad::test::temp_dir("exp", "gradient-path");
  const tapegrad::test::Run r =
      tapegrad::test::run("experiment gradient-path --quick --seed 5 --threads 1 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("gradient norm at distance 15 / at distance 1") &&
                        Catch::Contains("critical path of one training step"));
  check_results(dir, {"5"}, "150");
  fs::remove_all(dir);
}

TEST_CASE("experiment gradient-path: one row per seed, arm and distance with two seeds",
          "[cli][experiment]") {
  const std::string dir = tapegrad::test::temp_dir("exp", "gradient-path-seeds");
  tapegrad::experiment::Options o;
  o.quick = true;
  o.steps = 40;
  o.seed = 5;
  o.seeds = 2;
  o.threads = 1;
  o.out_dir = dir;
  const tapegrad::experiment::Report r = tapegrad::experiment::run("gradient-path", o);
  CHECK(r.figures.size() == 3);  // gradient norm, gradient gain, critical path
  for (const auto& f : r.figures) {
    CAPTURE(f.file);
    // one series per arm; the gain also before training
    REQUIRE(f.series.size() == (f.file == "gradient_gain.png" ? 6u : 3u));
    for (const auto& s : f.series) CHECK(s.y.size() == s.x.size());
  }
  check_results(dir, {"5", "6"}, "40");
  fs::remove_all(dir);
}
