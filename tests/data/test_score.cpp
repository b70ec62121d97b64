// Corpus BLEU and chrF (score.hpp) against figures sacreBLEU publishes, the 13a tokenisation rules
// one by one, and the edge cases (empty hypotheses, no match at all, a hypothesis longer than its
// reference). The comparison with an independent implementation (NLTK) runs the CLI: tests/cli/test_score.cpp.
#include <catch2/catch.hpp>
#include <cmath>

#include "tapegrad/error.hpp"
#include "tapegrad/score.hpp"

using namespace tapegrad;
using Catch::Matchers::Contains;

namespace {

using Words = std::vector<std::string>;

// sacreBLEU's README ("Using SacreBLEU from Python", version 2.x, github.com/mjpost/sacrebleu): two
// reference streams for three hypotheses.
const std::vector<std::string> kReadmeHypotheses = {"The dog bit the man.", "It wasn't surprising.",
                                                    "The man had just bitten him."};
const std::vector<std::vector<std::string>> kReadmeReferences = {
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};

}  // namespace

TEST_CASE("13a splits punctuation off words but keeps numbers, apostrophes and inner dashes whole", "[data][score]") {
  const auto cases = GENERATE(table<std::string, Words>({
      {"Hello, world.", {"Hello", ",", "world", "."}},
      {"It wasn't 3.14 or 1,000.", {"It", "wasn't", "3.14", "or", "1,000", "."}},
      {"pages 12-15 of a well-known book", {"pages", "12", "-", "15", "of", "a", "well-known", "book"}},
      {"(x+y)/2=z?", {"(", "x", "+", "y", ")", "/", "2", "=", "z", "?"}},
      {"&quot;Hi&quot; &amp; bye", {"\"", "Hi", "\"", "&", "bye"}},
      {"a <skipped> b", {"a", "b"}},
      {"Dijo: \xc2\xa1S\xc3\xad!", {"Dijo", ":", "\xc2\xa1S\xc3\xad", "!"}},  // inverted '!' is not ASCII: stays
      {"caf\xc3\xa9. Fin", {"caf\xc3\xa9", ".", "Fin"}},
      {"no\xc2\xa0" "break", {"no", "break"}},  // U+00A0 is whitespace to Python's str.split
      {"a..b", {"a", ".", ".", "b"}},
      {"   ", {}},
      {"", {}},
  }));
  CAPTURE(std::get<0>(cases));
  CHECK(data::tokenize_13a(std::get<0>(cases)) == std::get<1>(cases));
}

TEST_CASE("corpus BLEU reproduces sacreBLEU's README example to every printed digit", "[data][score]") {
  const data::BleuScore b = data::corpus_bleu(kReadmeHypotheses, kReadmeReferences);
  CHECK(b.text() == "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
  // sacreBLEU's test/test_bleu.py: the same corpus gives 48.530827 (to its 1e-8 tolerance there).
  CHECK(b.score == Approx(48.530827).margin(1e-6));
  CHECK(data::corpus_chrf(kReadmeHypotheses, kReadmeReferences).text() == "chrF2 = 59.73");
}

TEST_CASE("an empty reference leaves its line to the other references, as in sacreBLEU's README", "[data][score]") {
  // README, "Variable Number of References": the first line's first reference removed.
  auto refs = kReadmeReferences;
  refs[0][0] = "";
  CHECK(data::corpus_bleu(kReadmeHypotheses, refs).text() ==
        "BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 ratio = 0.895 hyp_len = 17 ref_len = 19)");
  refs[1][0] = "";
  CHECK_THROWS_WITH(data::corpus_bleu(kReadmeHypotheses, refs), Contains("line 1 has only empty references"));
}

TEST_CASE("BLEU counts clipped n-grams and scores them as sacreBLEU's tests publish", "[data][score]") {
  // test/test_bleu.py, test_case_statistics.
  const auto s = data::bleu_statistics(data::tokenize_13a("am I am a character sequence"),
                                       {data::tokenize_13a("I am a symbol string sequence a a")});
  CHECK(s.matches == std::array<int64_t, 4>{4, 2, 1, 0});
  CHECK(s.totals == std::array<int64_t, 4>{6, 5, 4, 3});
  // test/test_bleu.py, test_case_scoring: compute_bleu([9,7,5,3], [10,8,6,4], 11, 11) = 0.8375922397.
  data::BleuStatistics t;
  t.matches = {9, 7, 5, 3}, t.totals = {10, 8, 6, 4}, t.hyp_len = 11, t.ref_len = 11;
  CHECK(data::bleu_from_statistics(t).score / 100 == Approx(0.8375922397).margin(1e-10));
}

TEST_CASE("the closest reference length sets the brevity penalty; a tie takes the shorter", "[data][score]") {
  const Words hyp = {"a", "b", "c", "d"};
  CHECK(data::bleu_statistics(hyp, {{"a", "b"}, {"a", "b", "c", "d", "e"}}).ref_len == 5);
  CHECK(data::bleu_statistics(hyp, {{"a", "b", "c"}, {"a", "b", "c", "d", "e"}}).ref_len == 3);
  CHECK(data::bleu_statistics(hyp, {{"a", "b", "c", "d", "e", "f"}, {"a"}}).ref_len == 6);
}

TEST_CASE("empty hypotheses score 0 and are not dropped (sacreBLEU's test_corpus_bleu)", "[data][score]") {
  const data::BleuScore b = data::corpus_bleu({"", "", ""}, kReadmeReferences);
  CHECK(b.score == 0.0);
  CHECK(b.bp == 0.0);
  CHECK(b.hyp_len == 0);
  CHECK(b.ref_len == 17);  // per line the shortest reference (closest to 0 tokens): 6 + 5 + 6
  CHECK(data::corpus_chrf({"", "", ""}, kReadmeReferences).score == 0.0);
}

TEST_CASE("no match at all scores 0 with the brevity penalty still reported", "[data][score]") {
  const data::BleuScore b = data::corpus_bleu({"w x y z"}, {{"a b c d e f g h"}});
  CHECK(b.score == 0.0);
  CHECK(b.precisions == std::array<double, 4>{0, 0, 0, 0});
  CHECK(b.bp == Approx(std::exp(1.0 - 8.0 / 4.0)));
  CHECK(data::corpus_chrf({"wxyz"}, {{"abcdefgh"}}).score == 0.0);
}

TEST_CASE("a hypothesis longer than its reference has BP 1 and a ratio above 1", "[data][score]") {
  const data::BleuScore b = data::corpus_bleu({"a b c d e f g h i j"}, {{"a b c d e f"}});
  CHECK(b.bp == 1.0);
  CHECK(b.ratio == Approx(10.0 / 6.0));
  // Every reference n-gram matched once: precisions 6/10, 5/9, 4/8, 3/7.
  CHECK(b.score == Approx(100 * std::pow(0.6 * 5 / 9.0 * 0.5 * 3 / 7.0, 0.25)).epsilon(1e-12));
}

TEST_CASE("an order without matches is smoothed by 1/2^k of its n-grams ('exp')", "[data][score]") {
  // "a b c x d" against "a b c y d": 1-grams 4/5, 2-grams 2/4, 3-grams 1/3, 4-grams 0/2 -> 1/(2*2).
  const data::BleuScore b = data::corpus_bleu({"a b c x d"}, {{"a b c y d"}});
  CHECK(b.precisions[3] == Approx(100.0 / 4));
  CHECK(b.score == Approx(100 * std::pow(0.8 * 0.5 * (1 / 3.0) * 0.25, 0.25)).epsilon(1e-12));
  // Two orders without matches: the second counts 1/4 of a match. "a x b y" vs "a z b w": 2/4, 0/3, 0/2, 0/1.
  const data::BleuScore c = data::corpus_bleu({"a x b y"}, {{"a z b w"}});
  CHECK(c.precisions[1] == Approx(100.0 / (2 * 3)));
  CHECK(c.precisions[2] == Approx(100.0 / (4 * 2)));
  CHECK(c.precisions[3] == Approx(100.0 / (8 * 1)));
}

TEST_CASE("lines shorter than four tokens everywhere give BLEU 0 (no 4-gram to score)", "[data][score]") {
  CHECK(data::corpus_bleu({"a b c", "d e"}, {{"a b c", "d e"}}).score == 0.0);
}

TEST_CASE("chrF with effective order reproduces sacreBLEU's published cases (beta 3)", "[data][score]") {
  // test/test_chrf.py, test_cases_effective_order (char_order 6, beta 3, eps_smoothing False).
  using Case = std::tuple<std::vector<std::string>, std::vector<std::string>, double>;
  const auto c = GENERATE(table<std::vector<std::string>, std::vector<std::string>, double>({
      Case{{"a"}, {"a"}, 100.0},
      Case{{""}, {"reference"}, 0.0},
      Case{{"a b c"}, {"a b c"}, 100.0},
      Case{{"a b c"}, {"abc"}, 100.0},
      Case{{""}, {"c"}, 0.0},
      Case{{"a", "b"}, {"a", "c"}, 50.0},
      Case{{"aa"}, {"ab"}, 25.0},
  }));
  CAPTURE(std::get<0>(c), std::get<1>(c));
  data::ChrfOptions o;
  o.beta = 3;
  CHECK(data::corpus_chrf(std::get<0>(c), {std::get<1>(c)}, o).score == Approx(std::get<2>(c)).margin(1e-4));
}

TEST_CASE("chrF with epsilon smoothing reproduces sacreBLEU's published cases (beta 3)", "[data][score]") {
  // test/test_chrf.py, test_cases (char_order 6, beta 3, eps_smoothing True).
  using Case = std::tuple<std::string, std::string, double>;
  const auto c = GENERATE(table<std::string, std::string, double>({
      Case{"abcdefg", "hijklmnop", 0.0},
      Case{"aa", "ab", 8.3333},
      Case{"a", "a", 16.6667},
      Case{"a b c", "abc", 50.0},
      Case{" risk assessment must be made of those who are qualified and expertise in the sector - these are the "
           "scientists .",
           "risk assessment has to be undertaken by those who are qualified and expert in that area - that is the "
           "scientists .",
           63.361730},
      Case{" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. ",
           "Das Verh\xc3\xa4ltnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich.", 64.1302698},
      Case{"Niemand hat die Absicht, eine Mauer zu errichten", "Niemand hat die Absicht, eine Mauer zu errichten",
           100.0},
  }));
  CAPTURE(std::get<0>(c));
  data::ChrfOptions o;
  o.beta = 3, o.eps_smoothing = true;
  CHECK(data::corpus_chrf({std::get<0>(c)}, {{std::get<1>(c)}}, o).score == Approx(std::get<2>(c)).margin(1e-4));
}

TEST_CASE("corpus scores refuse misaligned streams and invalid UTF-8, naming the line", "[data][score]") {
  CHECK_THROWS_WITH(data::corpus_bleu({"a", "b"}, {{"a"}}), Contains("reference 1 has 1 lines, the hypotheses 2"));
  CHECK_THROWS_WITH(data::corpus_chrf({"a", "b\xff"}, {{"a", "b"}}), Contains("hypothesis line 2: invalid UTF-8"));
  CHECK_THROWS_WITH(data::corpus_bleu({"a"}, {{"a\xc3"}}), Contains("reference 1 line 1: invalid UTF-8"));
  CHECK_THROWS_AS(data::corpus_bleu({"a"}, {}), Error);
}
