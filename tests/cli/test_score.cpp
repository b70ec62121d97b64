// `tapegrad score` against an independent implementation (NLTK's corpus_bleu, from Debian's
// python3-nltk, on text tokenised by a 13a regex written in the Python script), its error lines, and the
// scores `eval --bleu` prints for a checkpoint; `translate` writes one line per input line.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "process.hpp"

namespace fs = std::filesystem;
using tapegrad::test::Run;
using tapegrad::test::run;
using tapegrad::test::run_command;

namespace {

std::string temp_dir(const std::string& name) {
  const std::string dir = tapegrad::test::temp_dir("score", name);
  fs::create_directories(dir);
  return dir;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path, std::ios::binary);
  for (const auto& l : lines) f << l << "\n";
}

// The mteval-v13a rules as regular expressions, then NLTK's corpus BLEU ('exp' smoothing is NLTK's
// method3, "NIST geometric sequence smoothing"). Prints 100 x BLEU.
const char* kNltkScript = R"(import re, sys
from nltk.translate.bleu_score import corpus_bleu, SmoothingFunction
def tok13a(line):
    line = line.rstrip().replace('<skipped>', '').replace('-\n', '').replace('\n', ' ')
    if '&' in line:
        line = line.replace('&quot;', '"').replace('&amp;', '&').replace('&lt;', '<').replace('&gt;', '>')
    line = re.sub(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])', r' \1 ', ' ' + line + ' ')
    line = re.sub(r'([^0-9])([\.,])', r'\1 \2 ', line)
    line = re.sub(r'([\.,])([^0-9])', r' \1 \2', line)
    line = re.sub(r'([0-9])(-)', r'\1 \2 ', line)
    return line.split()
hyp_path, smoothing, *ref_paths = sys.argv[1:]
read = lambda p: open(p, encoding='utf-8').read().split('\n')[:-1]
hyps = [tok13a(l) for l in read(hyp_path)]
refs = list(zip(*[[tok13a(l) for l in read(p)] for p in ref_paths]))
f = SmoothingFunction().method3 if smoothing == 'exp' else None
print(repr(100 * corpus_bleu([list(r) for r in refs], hyps, smoothing_function=f)))
)";

// A small made-up corpus with the punctuation 13a cares about (commas, periods, quotes, decimals,
// thousands, dashes after digits, apostrophes, parentheses, accents), from a fixed linear congruential
// sequence.
struct Corpus {
  std::vector<std::string> ref1, ref2, hyp, hyp_sparse;
};
Corpus make_corpus(int lines) {
  const std::vector<std::string> words = {
      "the",  "land", "was",  "without", "form,", "and",   "void.", "God",    "said", "\"Let",  "there",  "be",
      "light\"", "3.5", "1,000", "12-15", "don't", "(and", "so)", "caf\xc3\xa9", "day;", "night!", "seas?", "it's"};
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  Corpus c;
  for (int i = 0; i < lines; ++i) {
    std::vector<std::string> r;
    for (uint64_t k = 0, n = 6 + next(20); k < n; ++k) r.push_back(words[next(words.size())]);
    auto join = [](const std::vector<std::string>& w) {
      std::string s;
      for (const auto& x : w) s += (s.empty() ? "" : " ") + x;
      return s;
    };
    std::vector<std::string> h, r2 = r, sparse;
    for (size_t k = 0; k < r.size(); ++k) {
      const uint64_t roll = next(10);
      if (roll == 0) continue;                       // a word dropped
      h.push_back(roll == 1 ? words[next(words.size())] : r[k]);  // or replaced
      if (roll == 2) h.push_back(r[k]);             // or repeated
      // Unigram matches only: a plain word at every other position (13a splits punctuation into
      // tokens of their own, which would make bigrams).
      const bool plain = std::all_of(r[k].begin(), r[k].end(), [](char ch) { return ch >= 'a' && ch <= 'z'; });
      sparse.push_back(k % 2 == 0 && plain ? r[k] : "zz" + std::to_string(k));
    }
    if (i % 3 == 0) r2.erase(r2.begin());  // a second reference, a word shorter
    if (i % 4 == 0) h.insert(h.end(), {"more", "words"});  // a hypothesis longer than its reference
    c.ref1.push_back(join(r)), c.ref2.push_back(join(r2)), c.hyp.push_back(join(h)), c.hyp_sparse.push_back(join(sparse));
  }
  return c;
}

double nltk_bleu(const std::string& script, const std::string& hyp, const std::string& smoothing,
                 const std::vector<std::string>& refs) {
  std::string cmd = "/usr/bin/python3 " + script + " " + hyp + " " + smoothing;
  for (const auto& r : refs) cmd += " " + r;
  const Run p = run_command(cmd);
  INFO(p.out);
  REQUIRE(p.code == 0);  // tools/run test installs python3-nltk
  return std::stod(p.out);
}

double tapegrad_bleu(const std::string& hyp, const std::vector<std::string>& refs) {
  std::string args = "score --json --hyp " + hyp;
  for (const auto& r : refs) args += " --ref " + r;
  const Run s = run(args);
  INFO(s.out);
  REQUIRE(s.code == 0);
  return nlohmann::json::parse(s.out)["bleu"]["score"].get<double>();
}

}  // namespace

TEST_CASE("tapegrad score's BLEU equals NLTK's corpus_bleu on 13a tokens, one or two references",
          "[cli][score]") {
  const std::string dir = temp_dir("nltk");
  const Corpus c = make_corpus(120);
  write_lines(dir + "/ref1.txt", c.ref1), write_lines(dir + "/ref2.txt", c.ref2);
  write_lines(dir + "/hyp.txt", c.hyp), write_lines(dir + "/sparse.txt", c.hyp_sparse);
  std::ofstream(dir + "/nltk_bleu.py") << kNltkScript;
  const std::string script = dir + "/nltk_bleu.py";
  // Every order has matches here, so no smoothing applies; NLTK sums exact fractions, sacreBLEU's way
  // counts integers: the two agree to rounding (1e-9 of a BLEU point).
  for (const auto& refs : std::vector<std::vector<std::string>>{{dir + "/ref1.txt"}, {dir + "/ref1.txt", dir + "/ref2.txt"}}) {
    CAPTURE(refs.size());
    const double want = nltk_bleu(script, dir + "/hyp.txt", "none", refs);
    CHECK(want > 10);
    CHECK(tapegrad_bleu(dir + "/hyp.txt", refs) == Approx(want).margin(1e-9));
  }
  // Unigram matches only: orders 2-4 are smoothed ('exp' = NLTK's method3).
  const double want = nltk_bleu(script, dir + "/sparse.txt", "exp", {dir + "/ref1.txt"});
  CHECK(want > 0);
  CHECK(tapegrad_bleu(dir + "/sparse.txt", {dir + "/ref1.txt"}) == Approx(want).margin(1e-9));
  fs::remove_all(dir);
}

TEST_CASE("tapegrad score prints BLEU and chrF2 as sacreBLEU's text form", "[cli][score]") {
  const std::string dir = temp_dir("text");
  // sacreBLEU's README example (github.com/mjpost/sacrebleu, "Using SacreBLEU from Python").
  write_lines(dir + "/hyp.txt", {"The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."});
  write_lines(dir + "/ref1.txt", {"The dog bit the man.", "It was not unexpected.", "The man bit him first."});
  write_lines(dir + "/ref2.txt", {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."});
  const Run s = run("score --ref " + dir + "/ref1.txt --ref " + dir + "/ref2.txt --hyp " + dir + "/hyp.txt");
  REQUIRE(s.code == 0);
  CHECK(s.out ==
        "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)\nchrF2 = 59.73\n");
  const Run j = run("score --json --ref " + dir + "/ref1.txt --ref " + dir + "/ref2.txt --hyp " + dir + "/hyp.txt");
  REQUIRE(j.code == 0);
  const auto o = nlohmann::json::parse(j.out);
  CHECK(o["bleu"]["score"].get<double>() == Approx(48.530827).margin(1e-6));
  CHECK(o["bleu"]["hyp_len"] == 17);
  CHECK(o["bleu"]["counts"].size() == 4);
  CHECK(o["chrf"]["name"] == "chrF2");
  CHECK(o["chrf"]["score"].get<double>() == Approx(59.73).margin(0.005));
  fs::remove_all(dir);
}

TEST_CASE("tapegrad score: misaligned, unreadable or invalid files give one line naming the file, exit 2",
          "[cli][score][errors]") {
  const std::string dir = temp_dir("errors");
  write_lines(dir + "/three.txt", {"a", "b", "c"});
  write_lines(dir + "/two.txt", {"a", "b"});
  write_lines(dir + "/bad.txt", {"a", "b\xff", "c"});
  write_lines(dir + "/empty_line.txt", {"a", "", "c"});
  const auto one_line = [](const Run& r) { return std::count(r.out.begin(), r.out.end(), '\n') == 1; };
  const Run counts = run("score --ref " + dir + "/three.txt --hyp " + dir + "/two.txt");
  CHECK(counts.code == 2);
  CHECK(one_line(counts));
  CHECK_THAT(counts.out, Catch::Contains("three.txt has 3 lines") && Catch::Contains("two.txt has 2"));
  const Run missing = run("score --ref " + dir + "/nope.txt --hyp " + dir + "/two.txt");
  CHECK(missing.code == 2);
  CHECK(one_line(missing));
  CHECK_THAT(missing.out, Catch::Contains("nope.txt: cannot open"));
  const Run utf8 = run("score --ref " + dir + "/three.txt --hyp " + dir + "/bad.txt");
  CHECK(utf8.code == 2);
  CHECK(one_line(utf8));
  CHECK_THAT(utf8.out, Catch::Contains("bad.txt:2: invalid UTF-8"));
  const Run no_ref = run("score --ref " + dir + "/empty_line.txt --hyp " + dir + "/three.txt");
  CHECK(no_ref.code == 2);
  CHECK_THAT(no_ref.out, Catch::Contains("line 2 is empty in every reference file"));
  // An empty hypothesis line is scored (as nothing), not an error.
  CHECK(run("score --ref " + dir + "/three.txt --hyp " + dir + "/empty_line.txt").code == 0);
  fs::remove_all(dir);
}

TEST_CASE("eval --bleu scores the outputs against the TSV's target text as written", "[cli][score][eval]") {
  const std::string dir = temp_dir("eval");
  {
    std::ofstream train(dir + "/train.tsv"), valid(dir + "/valid.tsv"), targets(dir + "/targets.txt");
    const char* w[] = {"sun", "moon", "star", "sky", "sea", "rain"};
    for (int i = 0; i < 60; ++i)
      train << w[i % 6] << " " << w[(i / 6) % 6] << "\t" << w[(i / 6) % 6] << " " << w[i % 6] << "\n";
    // "comet" is in no training line: re-joined target tokens would read <unk>, the text says comet.
    for (int i = 0; i < 8; ++i) {
      const std::string tgt = std::string(w[(i + 1) % 6]) + " " + (i % 2 ? "comet" : w[i % 6]);
      valid << w[i % 6] << " " << w[(i + 1) % 6] << "\t" << tgt << "\n";
      targets << tgt << "\n";
    }
  }
  const std::string ckpt = dir + "/run";
  const Run t = run("train --model transformer --tokens whitespace --train " + dir + "/train.tsv --steps 40 --d-model 32 "
                    "--layers 1 --heads 2 --d-ff 64 --batch-size 16 --threads 1 --eval-every 0 --out " + ckpt);
  INFO(t.out);
  REQUIRE(t.code == 0);
  const Run e = run("eval --checkpoint " + ckpt + " --valid " + dir + "/valid.tsv --bleu --hyp-out " + dir + "/hyp.txt");
  INFO(e.out);
  REQUIRE(e.code == 0);
  std::smatch bleu_line, chrf_line;
  REQUIRE(std::regex_search(e.out, bleu_line, std::regex("BLEU = [0-9.]+ [^\n]*\n")));
  REQUIRE(std::regex_search(e.out, chrf_line, std::regex("chrF2 = [0-9.]+\n")));
  // The same figures as `score` on the outputs and the raw target column.
  const Run s = run("score --ref " + dir + "/targets.txt --hyp " + dir + "/hyp.txt");
  REQUIRE(s.code == 0);
  CHECK(s.out == bleu_line.str() + chrf_line.str());
  std::ifstream hyp(dir + "/hyp.txt");
  CHECK(std::count(std::istreambuf_iterator<char>(hyp), {}, '\n') == 8);
  const Run j = run("eval --checkpoint " + ckpt + " --valid " + dir + "/valid.tsv --bleu --json");
  REQUIRE(j.code == 0);
  const auto o = nlohmann::json::parse(j.out);
  CHECK_THAT(bleu_line.str(), Catch::Contains(std::to_string(o["bleu"]["hyp_len"].get<int64_t>())));
  CHECK(o["decoding"] == "greedy");
  CHECK(o["chrf"]["name"] == "chrF2");
  // Beam search with a length penalty scores too.
  const Run b = run("eval --checkpoint " + ckpt + " --valid " + dir + "/valid.tsv --bleu --beam 3 --length-penalty 1");
  REQUIRE(b.code == 0);
  CHECK_THAT(b.out, Catch::Contains("beam 3, length penalty 1") && Catch::Contains("chrF2 = "));
  // translate: one output line per input line, an empty line and a last line without newline included.
  const auto tr = tapegrad::test::run_split("translate --checkpoint " + ckpt, "sun moon\n\nsea sky");
  REQUIRE(tr.code == 0);
  CHECK(std::count(tr.out.begin(), tr.out.end(), '\n') == 3);
  const auto tb = tapegrad::test::run_split("translate --beam 2 --length-penalty 0 --checkpoint " + ckpt, "sun moon\n\n");
  REQUIRE(tb.code == 0);
  CHECK(std::count(tb.out.begin(), tb.out.end(), '\n') == 2);
  fs::remove_all(dir);
}
