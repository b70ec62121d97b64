// `tapegrad experiment`, run as real processes: the table and results.csv of quick runs (one row per arm
// and length bin, fractions in [0, 1]; one row per seed with --seeds), report.md and the PNG figures it
// links, and the errors for a bad name or option.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "tests/cli/process.hpp"

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

// DIR/report.md names the experiment, and every PNG it links was drawn (the command says where) as a
// valid PNG of a sensible size.
void check_report_md(const std::string& dir, const std::string& name, const std::string& out) {
  std::ifstream f(dir + "/report.md");
  REQUIRE(f);
  const std::string md((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(md.rfind("# Experiment " + name + "\n", 0) == 0);
  CHECK_THAT(out, Catch::Contains("report.md: " + dir));
  size_t links = 0;
  for (size_t at = md.find("]("); at != std::string::npos; at = md.find("](", at + 2)) {
    const std::string file = md.substr(at + 2, md.find(')', at) - at - 2);
    if (file.size() < 4 || file.compare(file.size() - 4, 4, ".png") != 0) continue;
    ++links;
    CAPTURE(file);
    CHECK_THAT(out, Catch::Contains("figure: " + dir + "/" + file));
    const auto [w, h] = tapegrad::test::png_size(dir + "/" + file);
    CHECK(w >= 200);
    CHECK(w <= 4000);
    CHECK(h >= 150);
    CHECK(h <= 4000);
  }
  // Every figure drawn is linked, and no more.
  size_t drawn = 0;
  for (size_t at = out.find("figure: "); at != std::string::npos; at = out.find("figure: ", at + 1)) ++drawn;
  CHECK(drawn == links);
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
  REQUIRE(rows.size() == 1 + 6 * 2);  // {sinusoidal, learned, none} x {reverse, sort} x 2 length bins
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
  CHECK(fs::exists(dir + "/accuracy-reverse.png"));
  CHECK(fs::exists(dir + "/accuracy-sort.png"));
  // The exact part: permutation equivariance of the encoder (float64), one summary line per kind.
  CHECK_THAT(r.out, Catch::Contains("encoder, positional none: permuting the source permutes the outputs"));
  CHECK_THAT(r.out, Catch::Contains("encoder, positional sinusoidal: permuting the source does not permute"));
  CHECK_THAT(r.out, Catch::Contains("encoder, positional learned: permuting the source does not permute"));
  CHECK_THAT(r.out, !Catch::Contains("NOT as expected (threshold 1e-5)"));
  check_report_md(dir, "positional", r.out);
  fs::remove_all(dir);
}

TEST_CASE("experiment attention-maps --quick: one row per seed and arm, fractions in [0,1]",
          "[cli][experiment]") {
  const std::string dir = temp_dir("attention-maps");
  const Run r = run("experiment attention-maps --quick --threads 1 --seed 3 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("mass on the expected source position"));
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  REQUIRE(rows.size() == 1 + 1 * 2);  // one seed under --quick x {transformer, attention-rnn}
  std::set<std::string> arms;
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i][column(h, "experiment")] == "attention-maps");
    CHECK(rows[i][column(h, "seed")] == "3");
    arms.insert(rows[i][column(h, "arm")]);
    for (const char* c : {"exact_match", "mass_on_expected", "mass_within_1", "mass_on_previous_output",
                          "mass_on_next_output", "argmax_on_expected", "uniform_mass"})
      check_fraction(rows[i][column(h, c)]);
    // the window around the expected position holds at least the mass on it
    CHECK(std::stod(rows[i][column(h, "mass_within_1")]) >=
          std::stod(rows[i][column(h, "mass_on_expected")]));
  }
  CHECK(arms == std::set<std::string>{"transformer-sinusoidal", "attention-rnn-gru"});
  std::ifstream md(dir + "/report.md");
  std::stringstream text;
  text << md.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("attention_transformer-sinusoidal.png") &&
                             Catch::Contains("attention_attention-rnn-gru.png") &&
                             Catch::Contains("attention_mass.png"));
  check_report_md(dir, "attention-maps", r.out);
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

// Hidden until the accuracy experiments run once per seed (they take --seeds but run the first seed only).
TEST_CASE("experiment bottleneck --quick --seeds 2: every row once per seed", "[cli][experiment]") {
  const std::string dir = temp_dir("seeds");
  const Run r = run("experiment bottleneck --quick --steps 20 --seeds 2 --seed 7 --threads 1 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  std::map<std::string, size_t> per_seed;
  for (size_t i = 1; i < rows.size(); ++i) ++per_seed[rows[i][column(h, "seed")]];
  CHECK(per_seed == std::map<std::string, size_t>{{"7", 8}, {"8", 8}});  // 2 models x 2 tasks x 2 bins each
  fs::remove_all(dir);
}

TEST_CASE("experiment long-range --quick --sweep: the sweep's choice is each arm's best, then every seed",
          "[cli][experiment]") {
  const std::string dir = temp_dir("long-range");
  const Run r =
      run("experiment long-range --quick --sweep --steps 40 --seeds 2 --seed 4 --threads 1 --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  std::map<std::pair<std::string, std::string>, size_t> per_arm_seed;
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i][column(h, "task")] == "pair-recall");
    check_fraction(rows[i][column(h, "exact_match")]);
    ++per_arm_seed[{rows[i][column(h, "arm")], rows[i][column(h, "seed")]}];
  }
  CHECK(per_arm_seed.size() == 3 * 2);                  // {rnn, attention-rnn, transformer} x seeds 4, 5
  for (const auto& [key, n] : per_arm_seed) CHECK(n == 2);  // two length bins under --quick
  // The sweep's table in report.md: 3 + 3 + 6 recipes, one chosen per arm, and the chosen one has the
  // best validation exact match of its arm.
  std::ifstream f(dir + "/report.md");
  const std::string md((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = md.find("| arm | task | recipe | valid_exact_match");
  REQUIRE(at != std::string::npos);
  std::map<std::string, std::vector<std::pair<double, bool>>> sweep;  // arm -> (valid exact match, chosen)
  std::stringstream lines(md.substr(at));
  std::string line;
  std::getline(lines, line);
  std::getline(lines, line);  // the header's separator
  while (std::getline(lines, line) && line.rfind("| ", 0) == 0) {
    std::vector<std::string> cells;
    for (const auto& c : split(line, '|')) cells.push_back(c.size() > 2 ? c.substr(1, c.size() - 2) : "");
    REQUIRE(cells.size() == 8);  // leading empty cell, then 7 columns
    sweep[cells[1]].push_back({std::stod(cells[4]), cells[7] == "yes"});
  }
  REQUIRE(sweep.size() == 3);
  CHECK(sweep["rnn-gru"].size() == 3);
  CHECK(sweep["transformer-sinusoidal"].size() == 6);
  for (const auto& [arm, recipes] : sweep) {
    CAPTURE(arm);
    double best = -1, chosen = -1;
    int n_chosen = 0;
    for (const auto& [em, yes] : recipes) {
      best = std::max(best, em);
      if (yes) chosen = em, ++n_chosen;
    }
    CHECK(n_chosen == 1);
    CHECK(chosen == best);
  }
  check_report_md(dir, "long-range", r.out);
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
  for (const char* seeds : {"0", "101", "-1", "two"}) {
    const Run bad = run(std::string("experiment positional --quick --seeds ") + seeds);
    CAPTURE(seeds, bad.out);
    CHECK(bad.code == 2);
    CHECK_THAT(bad.out, Catch::Contains("--seeds") && Catch::Contains(seeds));
    CHECK(std::count(bad.out.begin(), bad.out.end(), '\n') == 1);
  }
  const Run word = run("experiment positional --steps many");
  CHECK(word.code == 2);
  CHECK_THAT(word.out, Catch::Contains("many"));
  const Run none = run("experiment");
  CHECK(none.code == 2);
  const Run help = run("experiment --help");
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("bottleneck:") && Catch::Contains("long-range:") &&
                           Catch::Contains("positional:") && Catch::Contains("parallelism:") &&
                           Catch::Contains("--quick") && Catch::Contains("results.csv") &&
                           Catch::Contains("--seeds") && Catch::Contains("report.md"));
}

TEST_CASE("experiment bleu-vs-length --quick: BLEU per model, seed and source-length bin on a TSV corpus",
          "[cli][experiment]") {
  const std::string corpus = temp_dir("bleu-corpus"), dir = temp_dir("bleu-vs-length");
  fs::create_directories(corpus);
  // Reverse the words of a sentence; test sources of 5, 15 and 55 words (bins 1-10, 11-20, 51+).
  const char* words[] = {"in", "the", "beginning", "god", "created", "heavens", "and", "earth", "was", "void"};
  auto sentence = [&](int n, int shift, bool reversed) {
    std::string s;
    for (int k = 0; k < n; ++k) s += (k ? " " : "") + std::string(words[((reversed ? n - 1 - k : k) * 7 + shift) % 10]);
    return s;
  };
  std::map<int, int> test_lengths = {{5, 4}, {15, 3}, {55, 2}};
  {
    std::ofstream train(corpus + "/train.tsv"), valid(corpus + "/valid.tsv"), test(corpus + "/test.tsv");
    for (int i = 0; i < 40; ++i) train << sentence(2 + i % 12, i, false) << "\t" << sentence(2 + i % 12, i, true) << "\n";
    for (int i = 0; i < 6; ++i) valid << sentence(3 + i, i, false) << "\t" << sentence(3 + i, i, true) << "\n";
    for (const auto& [n, count] : test_lengths)
      for (int i = 0; i < count; ++i) test << sentence(n, i, false) << "\t" << sentence(n, i, true) << "\n";
  }
  const Run r = run("experiment bleu-vs-length --quick --steps 8 --seeds 2 --threads 1 --jobs 2 --corpus " + corpus + " --out " + dir);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const auto rows = read_csv(dir + "/results.csv");
  const auto& h = rows[0];
  REQUIRE(rows.size() == 1 + 3 * 2 * 3);  // {rnn, attention-rnn, transformer} x 2 seeds x 3 non-empty bins
  std::map<std::string, std::string> pairs;
  std::set<std::pair<std::string, std::string>> runs;
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i][column(h, "experiment")] == "bleu-vs-length");
    runs.insert({rows[i][column(h, "model")], rows[i][column(h, "seed")]});
    pairs[rows[i][column(h, "bin")]] = rows[i][column(h, "pairs")];
    for (const char* c : {"bleu", "test_bleu", "test_chrf"}) {
      const double v = std::stod(rows[i][column(h, c)]);
      CHECK(v >= 0);
      CHECK(v <= 100);
    }
  }
  CHECK(runs.size() == 6);
  CHECK(pairs == std::map<std::string, std::string>{{"1-10", "4"}, {"11-20", "3"}, {"51+", "2"}});
  CHECK_THAT(r.out, Catch::Contains("attention-rnn vs rnn on the longest bin (51+, 2 pairs)") &&
                        Catch::Contains("transformer "));
  CHECK_THAT(r.out, Catch::Contains("learning rates chosen by validation loss"));
  check_report_md(dir, "bleu-vs-length", r.out);
  std::ifstream md(dir + "/report.md");
  std::stringstream text;
  text << md.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("Learning-rate sweep") && Catch::Contains("bleu_vs_length.png"));
  // Runs trained two at once, each on a thread of its own, give the table of runs trained in order.
  const std::string in_order = temp_dir("bleu-vs-length-in-order");
  const Run one_job = run("experiment bleu-vs-length --quick --steps 8 --seeds 2 --threads 1 --jobs 1 --corpus " + corpus + " --out " + in_order);
  REQUIRE(one_job.code == 0);
  CHECK(read_csv(in_order + "/results.csv") == rows);
  fs::remove_all(in_order);
  // --jobs is refused where runs are timed (or simply run in order).
  const Run jobs_elsewhere = run("experiment parallelism --quick --jobs 2");
  CHECK(jobs_elsewhere.code == 2);
  CHECK_THAT(jobs_elsewhere.out, Catch::Contains("--jobs applies to bleu-vs-length only"));
  // Without the corpus: one line naming the missing file, exit 2.
  const Run missing = run("experiment bleu-vs-length --quick --corpus " + corpus + "/nowhere");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.out, Catch::Contains("nowhere/train.tsv"));
  fs::remove_all(corpus), fs::remove_all(dir);
}
