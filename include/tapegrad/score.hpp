/// @file
/// Translation scores people recognise, as pure functions on strings: corpus BLEU and chrF computed
/// the way sacreBLEU computes them by default, so a figure printed here can be set beside a published
/// one.
///
/// BLEU (Papineni et al. 2002) as sacreBLEU's default `BLEU()`: each line is tokenised by the 13a rules
/// of mteval-v13a (tokenize_13a), n-grams of orders 1..4 are counted with each hypothesis n-gram clipped
/// to its largest count in any one reference of its line, the brevity penalty uses, per line, the
/// reference length closest to the hypothesis length (a tie goes to the shorter), and an order with no
/// match is smoothed by sacreBLEU's 'exp' method (the k-th such order counts 1 / (2^k total) matches).
/// chrF (Popović 2015) as sacreBLEU's default `CHRF()`, "chrF2": character n-grams of orders 1..6 with
/// whitespace removed, corpus-level counts, precision and recall averaged over the orders that occur
/// on both sides, then F-beta with beta = 2.
///
/// References come as sacreBLEU takes them: `references[k][i]` is the k-th reference of line i (one
/// vector per reference file). An empty reference string means "no reference" for that line, as in
/// sacreBLEU; a line needs at least one. Text is UTF-8 (whitespace as Python's str.split sees it,
/// characters as code points); invalid UTF-8 throws Error. Not here: other tokenisers (intl, zh,
/// ja-mecab), lowercasing, chrF++'s word n-grams, TER, confidence intervals.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

/// Scores on detokenised text (see score.hpp).
namespace tapegrad::data {

/// BLEU's n-gram orders (1..4).
inline constexpr int kBleuOrder = 4;

/// The 13a tokenisation of one line (mteval-v13a's, as sacreBLEU's tokenizer_13a applies it): trailing
/// whitespace stripped, `<skipped>` removed, `&quot;` `&amp;` `&lt;` `&gt;` unescaped, most ASCII
/// punctuation split off, period and comma split off unless between digits, a dash split off after a
/// digit, then split on whitespace.
std::vector<std::string> tokenize_13a(const std::string& line);

/// The counts corpus BLEU sums over lines.
struct BleuStatistics {
  int64_t hyp_len = 0;  ///< hypothesis tokens
  int64_t ref_len = 0;  ///< per line the reference length closest to the hypothesis's, summed
  /// Clipped matching n-grams and hypothesis n-grams, by order (index 0: unigrams).
  /// @{
  std::array<int64_t, kBleuOrder> matches{}, totals{};
  /// @}
  /// Adds another line's (or corpus's) counts.
  BleuStatistics& operator+=(const BleuStatistics& other);
};

/// One line's counts from already tokenised text: `hypothesis` against each of `references` (at least one).
BleuStatistics bleu_statistics(const std::vector<std::string>& hypothesis,
                               const std::vector<std::vector<std::string>>& references);

/// A BLEU figure with sacreBLEU's fields.
struct BleuScore {
  double score = 0;                            ///< BLEU in [0, 100]
  std::array<double, kBleuOrder> precisions{};  ///< n-gram precisions in [0, 100], smoothed as used
  double bp = 0;                               ///< brevity penalty: 1 if hyp_len >= ref_len, else exp(1 - ref_len / hyp_len)
  double ratio = 0;                            ///< hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0;                         ///< hypothesis tokens
  int64_t ref_len = 0;                         ///< closest reference tokens
  BleuStatistics statistics;                   ///< the counts it came from
  /// sacreBLEU's text form: `BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)`.
  std::string text() const;
};

/// BLEU from summed counts (sacreBLEU's compute_bleu with 'exp' smoothing): 0 when nothing matches or
/// when some order has no hypothesis n-gram at all (every line shorter than that order).
BleuScore bleu_from_statistics(const BleuStatistics& statistics);

/// Corpus BLEU of `hypotheses` against `references` (see score.hpp for the layout), 13a-tokenised.
/// Throws Error when a reference stream's length differs from the hypotheses', when a line has only
/// empty references, or on invalid UTF-8 (naming the stream and the 1-based line).
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references);

/// chrF's settings; the defaults are sacreBLEU's chrF2.
struct ChrfOptions {
  int char_order = 6;          ///< longest character n-gram
  int beta = 2;                ///< recall weighs beta times as much as precision
  bool eps_smoothing = false;  ///< sacreBLEU's --chrf-eps-smoothing: mean of per-order F scores (chrF++.py)
};

/// A chrF figure.
struct ChrfScore {
  double score = 0;  ///< chrF in [0, 100]
  int beta = 2;      ///< as computed with
  /// Per order n = 1..char_order, flattened: hypothesis n-grams, reference n-grams, matches.
  std::vector<int64_t> statistics;
  /// sacreBLEU's text form: `chrF2 = 59.73`.
  std::string text() const;
};

/// Corpus chrF of `hypotheses` against `references` (layout as corpus_bleu; for a line with several
/// references, the one giving the line the best chrF counts). Throws Error as corpus_bleu, and for
/// char_order outside [1, 32] or beta below 1.
ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const ChrfOptions& options = {});

}  // namespace tapegrad::data
