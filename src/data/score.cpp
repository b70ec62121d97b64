// Corpus BLEU and chrF as sacreBLEU computes them by default (score.hpp says which settings).
//
// Written from the published definitions (mteval-v13a's tokenisation rules, sacreBLEU's documented
// defaults); the tests compare with NLTK and with sacreBLEU's published figures. Python semantics are
// kept where they change a figure: whitespace is what str.split() splits on (Unicode spaces too), a
// character is a code point, and the 13a substitutions scan left to right without overlapping, as
// re.sub does. Working on UTF-8 bytes gives the same result as Python's code points for every rule
// here, because each rule's special characters are ASCII and a multi-byte character only ever plays
// the part of "any non-digit".
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <unordered_map>

#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/score.hpp"

namespace tapegrad::data {

namespace {

// The code point starting at s[i] and its length in bytes; s is valid UTF-8 (checked by the callers).
std::pair<char32_t, size_t> code_point_at(const std::string& s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {c, len};
}

// Python's str.isspace(), which str.split() and str.rstrip() use.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's s.split(): the runs of non-space characters.
std::vector<std::string> split_python(const std::string& s) {
  std::vector<std::string> words;
  size_t start = 0, i = 0;
  bool in_word = false;
  while (i < s.size()) {
    const auto [c, len] = code_point_at(s, i);
    if (is_python_space(c)) {
      if (in_word) words.push_back(s.substr(start, i - start));
      in_word = false;
    } else if (!in_word) {
      start = i, in_word = true;
    }
    i += len;
  }
  if (in_word) words.push_back(s.substr(start));
  return words;
}

// Python's s.rstrip().
std::string rstrip_python(const std::string& s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    const auto [c, len] = code_point_at(s, i);
    i += len;
    if (!is_python_space(c)) end = i;
  }
  return s.substr(0, end);
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// 13a's first rule: these ASCII punctuation characters (and the space) get a space on each side. Not
// here: the apostrophe, the dash, the period and the comma, which have rules of their own or none.
bool is_13a_punctuation(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// One left-to-right pass of a two-character rule: where `first` holds at i and `second` at i + 1, emit
// `replace(a, b)` and continue after both (re.sub's non-overlapping matches).
template <class First, class Second, class Emit>
std::string two_character_pass(const std::string& s, First first, Second second, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

void check_utf8(const std::string& what, const std::string& side, size_t line, const std::string& text) {
  if (const int64_t bad = first_invalid_utf8(text); bad >= 0)
    throw Error(what + ": " + side + " line " + std::to_string(line + 1) + ": invalid UTF-8 at byte " +
                std::to_string(bad + 1));
}

// Checks the corpus layout and returns, per line, its non-empty references.
std::vector<std::vector<const std::string*>> references_by_line(
    const std::string& what, const std::vector<std::string>& hypotheses,
    const std::vector<std::vector<std::string>>& references) {
  if (references.empty()) throw Error(what + ": no references");
  for (size_t i = 0; i < hypotheses.size(); ++i) check_utf8(what, "hypothesis", i, hypotheses[i]);
  for (size_t k = 0; k < references.size(); ++k) {
    if (references[k].size() != hypotheses.size())
      throw Error(what + ": reference " + std::to_string(k + 1) + " has " + std::to_string(references[k].size()) +
                  " lines, the hypotheses " + std::to_string(hypotheses.size()));
    for (size_t i = 0; i < references[k].size(); ++i)
      check_utf8(what, "reference " + std::to_string(k + 1), i, references[k][i]);
  }
  std::vector<std::vector<const std::string*>> by_line(hypotheses.size());
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    for (const auto& stream : references)
      if (!stream[i].empty()) by_line[i].push_back(&stream[i]);
    if (by_line[i].empty()) throw Error(what + ": line " + std::to_string(i + 1) + " has only empty references");
  }
  return by_line;
}

// Word n-grams of orders 1..kBleuOrder with their counts; the key joins the words with a space (no word
// holds one), so n-grams of different orders never share a key.
std::unordered_map<std::string, int64_t> word_ngrams(const std::vector<std::string>& words) {
  std::unordered_map<std::string, int64_t> counts;
  for (size_t start = 0; start < words.size(); ++start) {
    std::string key;
    for (size_t n = 0; n < size_t(kBleuOrder) && start + n < words.size(); ++n) {
      if (n) key += ' ';
      key += words[start + n];
      ++counts[key];
    }
  }
  return counts;
}

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

}  // namespace

std::vector<std::string> tokenize_13a(const std::string& raw) {
  check_utf8("tokenize_13a", "input", 0, raw);
  std::string line = rstrip_python(raw);
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  std::string spaced = " ";
  for (char c : line) {
    if (is_13a_punctuation(c)) spaced += ' ', spaced += c, spaced += ' ';
    else spaced += c;
  }
  spaced += ' ';
  const auto not_digit = [](char c) { return !is_digit(c); };
  const auto period_or_comma = [](char c) { return c == '.' || c == ','; };
  // A period or comma is split off unless a digit precedes it, then unless a digit follows it.
  spaced = two_character_pass(spaced, not_digit, period_or_comma, [](std::string& out, char a, char b) {
    out += a, out += ' ', out += b, out += ' ';
  });
  spaced = two_character_pass(spaced, period_or_comma, not_digit, [](std::string& out, char a, char b) {
    out += ' ', out += a, out += ' ', out += b;
  });
  // A dash after a digit is split off.
  spaced = two_character_pass(spaced, is_digit, [](char c) { return c == '-'; }, [](std::string& out, char a, char b) {
    out += a, out += ' ', out += b, out += ' ';
  });
  return split_python(spaced);
}

BleuStatistics& BleuStatistics::operator+=(const BleuStatistics& other) {
  hyp_len += other.hyp_len, ref_len += other.ref_len;
  for (int n = 0; n < kBleuOrder; ++n) matches[n] += other.matches[n], totals[n] += other.totals[n];
  return *this;
}

BleuStatistics bleu_statistics(const std::vector<std::string>& hypothesis,
                               const std::vector<std::vector<std::string>>& references) {
  if (references.empty()) throw Error("bleu_statistics: no reference");
  BleuStatistics s;
  s.hyp_len = int64_t(hypothesis.size());
  // Each n-gram is clipped to its largest count in any single reference.
  std::unordered_map<std::string, int64_t> most;
  int64_t closest = -1;
  for (const auto& ref : references) {
    for (const auto& [gram, count] : word_ngrams(ref)) most[gram] = std::max(most[gram], count);
    const int64_t len = int64_t(ref.size());
    const int64_t diff = std::abs(len - s.hyp_len), best = std::abs(closest - s.hyp_len);
    if (closest < 0 || diff < best || (diff == best && len < closest)) closest = len;
  }
  s.ref_len = closest;
  for (const auto& [gram, count] : word_ngrams(hypothesis)) {
    const size_t order = size_t(std::count(gram.begin(), gram.end(), ' '));
    s.totals[order] += count;
    if (const auto it = most.find(gram); it != most.end()) s.matches[order] += std::min(count, it->second);
  }
  return s;
}

BleuScore bleu_from_statistics(const BleuStatistics& s) {
  BleuScore r;
  r.statistics = s;
  r.hyp_len = s.hyp_len, r.ref_len = s.ref_len;
  r.ratio = s.ref_len > 0 ? double(s.hyp_len) / double(s.ref_len) : 0.0;
  r.bp = s.hyp_len >= s.ref_len ? 1.0 : s.hyp_len > 0 ? std::exp(1.0 - double(s.ref_len) / double(s.hyp_len)) : 0.0;
  bool any_match = false;
  for (int64_t m : s.matches) any_match |= m > 0;
  if (!any_match) return r;
  // 'exp' smoothing: the k-th order without a match counts 1 / 2^k matches.
  double halvings = 1.0;
  for (int n = 0; n < kBleuOrder; ++n) {
    if (s.totals[n] == 0) return r;  // no n-gram of this order at all: log 0, BLEU 0 (precisions so far kept)
    if (s.matches[n] == 0) {
      halvings *= 2;
      r.precisions[n] = 100.0 / (halvings * double(s.totals[n]));
    } else {
      r.precisions[n] = 100.0 * double(s.matches[n]) / double(s.totals[n]);
    }
  }
  double log_sum = 0;
  for (double p : r.precisions) log_sum += std::log(p);
  r.score = r.bp * std::exp(log_sum / kBleuOrder);
  return r;
}

std::string BleuScore::text() const {
  std::string t = "BLEU = " + format("%.2f", score) + " ";
  for (int n = 0; n < kBleuOrder; ++n) t += (n ? "/" : "") + format("%.1f", precisions[n]);
  return t + " (BP = " + format("%.3f", bp) + " ratio = " + format("%.3f", ratio) +
         " hyp_len = " + std::to_string(hyp_len) + " ref_len = " + std::to_string(ref_len) + ")";
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references) {
  const auto by_line = references_by_line("corpus_bleu", hypotheses, references);
  BleuStatistics total;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    std::vector<std::vector<std::string>> refs;
    for (const std::string* r : by_line[i]) refs.push_back(tokenize_13a(*r));
    total += bleu_statistics(tokenize_13a(hypotheses[i]), refs);
  }
  return bleu_from_statistics(total);
}

namespace {

using CharNgrams = std::vector<std::unordered_map<std::u32string, int64_t>>;  // by order - 1

// Character n-grams of orders 1..order of `text` with its whitespace removed.
CharNgrams char_ngrams(const std::string& text, int order) {
  std::u32string chars;
  for (size_t i = 0; i < text.size();) {
    const auto [c, len] = code_point_at(text, i);
    if (!is_python_space(c)) chars += c;
    i += len;
  }
  CharNgrams grams(static_cast<size_t>(order));
  for (size_t n = 1; n <= size_t(order); ++n)
    for (size_t start = 0; start + n <= chars.size(); ++start) ++grams[n - 1][chars.substr(start, n)];
  return grams;
}

// Per order: hypothesis n-grams (0 when the reference has none of this order, as sacreBLEU counts),
// reference n-grams, matches.
std::vector<int64_t> chrf_statistics(const CharNgrams& hyp, const CharNgrams& ref) {
  std::vector<int64_t> s;
  for (size_t n = 0; n < hyp.size(); ++n) {
    int64_t hyp_count = 0, ref_count = 0, match = 0;
    for (const auto& [gram, count] : hyp[n]) {
      hyp_count += count;
      if (const auto it = ref[n].find(gram); it != ref[n].end()) match += std::min(count, it->second);
    }
    for (const auto& entry : ref[n]) ref_count += entry.second;
    s.insert(s.end(), {ref[n].empty() ? 0 : hyp_count, ref_count, match});
  }
  return s;
}

double chrf_from_statistics(const std::vector<int64_t>& s, const ChrfOptions& o) {
  constexpr double eps = 1e-16;
  const double factor = double(o.beta) * double(o.beta);
  double eps_score = 0, mean_precision = 0, mean_recall = 0;
  int effective_order = 0;
  for (size_t n = 0; n < size_t(o.char_order); ++n) {
    const int64_t hyp = s[3 * n], ref = s[3 * n + 1], match = s[3 * n + 2];
    const double precision = hyp > 0 ? double(match) / double(hyp) : eps;
    const double recall = ref > 0 ? double(match) / double(ref) : eps;
    const double denominator = factor * precision + recall;
    eps_score += denominator > 0 ? (1 + factor) * precision * recall / denominator : eps;
    // By default only the orders present on both sides are averaged (sacreBLEU's effective order).
    if (hyp > 0 && ref > 0) mean_precision += precision, mean_recall += recall, ++effective_order;
  }
  if (o.eps_smoothing) return 100 * eps_score / o.char_order;
  if (effective_order == 0) return 0.0;
  mean_precision /= effective_order, mean_recall /= effective_order;
  if (mean_precision + mean_recall == 0) return 0.0;
  return 100 * ((1 + factor) * mean_precision * mean_recall / (factor * mean_precision + mean_recall));
}

}  // namespace

std::string ChrfScore::text() const { return "chrF" + std::to_string(beta) + " = " + format("%.2f", score); }

ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const ChrfOptions& options) {
  if (options.char_order < 1 || options.char_order > 32)
    throw Error("corpus_chrf: char_order " + std::to_string(options.char_order) + ": expected an integer in [1, 32]");
  if (options.beta < 1) throw Error("corpus_chrf: beta " + std::to_string(options.beta) + ": expected at least 1");
  const auto by_line = references_by_line("corpus_chrf", hypotheses, references);
  ChrfScore r;
  r.beta = options.beta;
  r.statistics.assign(3 * size_t(options.char_order), 0);
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const CharNgrams hyp = char_ngrams(hypotheses[i], options.char_order);
    std::vector<int64_t> best;
    double best_f = -1;
    for (const std::string* ref : by_line[i]) {
      std::vector<int64_t> s = chrf_statistics(hyp, char_ngrams(*ref, options.char_order));
      if (const double f = chrf_from_statistics(s, options); f > best_f) best_f = f, best = std::move(s);
    }
    for (size_t k = 0; k < best.size(); ++k) r.statistics[k] += best[k];
  }
  r.score = chrf_from_statistics(r.statistics, options);
  return r;
}

}  // namespace tapegrad::data
