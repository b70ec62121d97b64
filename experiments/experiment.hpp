/// @file
/// Experiments that measure the claims behind the path Vanilla Seq2Seq -> Attention Seq2Seq -> Transformer:
/// what `tapegrad experiment NAME` runs, as a library so tests drive the same code.
///
/// ```
///   bottleneck   vanilla GRU seq2seq vs attention GRU on copy and reverse; accuracy per source-length bin
///   long-range   the recall task (a value far back in the source) per length bin: rnn, attention-rnn,
///                transformer
///   positional   Transformer with sinusoidal, learned and no positions, on reverse (order matters) and
///                sort (a control: the sorted output does not depend on the source order)
///   parallelism  training-step time and tokens/s vs sequence length, attention GRU vs Transformer of
///                similar size, at 1 and N threads, beside each step's critical path and parallel width
///   gradient-path  |d log p(y_j) / d source embedding| against distance for a trained rnn,
///                attention-rnn and transformer on reverse; the critical path of a step against length
///   bleu-vs-length  test BLEU per source-length bin on a real TSV corpus: rnn, attention-rnn,
///                transformer, each at its swept learning rate, two seeds
/// ```
///
/// Every arm of an accuracy experiment trains with the same seed (so the same batches), the same step
/// budget and the same optimizer settings, through train::train; it is then scored by greedy decoding
/// (train::evaluate) on fresh examples drawn from a separate seed, per length bin. Every arm runs once per
/// seed (--seeds N: seeds seed, seed+1, ...); results.csv keeps one row per seed and the printed tables
/// show the mean and the min-max over seeds. Not here: confidence intervals or significance tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

/// The experiments behind `tapegrad experiment` (see experiment.hpp).
namespace tapegrad::experiment {

/// What every experiment takes (zeros mean each experiment's own default).
struct Options {
  int64_t steps = 0;    ///< training steps per arm (parallelism: timed steps per point); 0: the default
  uint64_t seed = 1;    ///< the first seed; every arm runs with seeds seed, seed + 1, ..., seed + seeds - 1
  int seeds = 0;        ///< runs per arm (0: the default, 3 for a full run and 1 under --quick)
  int threads = 0;      ///< kernel threads (0: the default); parallelism measures 1 and this many
  /// bleu-vs-length: training runs at once, each on a thread of its own with `threads` kernel threads
  /// (results do not depend on it; 2 jobs of 1 thread use 2 cores better than 1 job of 2)
  int jobs = 1;
  bool quick = false;   ///< tiny models, lengths and budgets: seconds, for tests and a first look
  bool sweep = false;   ///< accuracy experiments: choose each arm's recipe by a sweep on a validation split
  std::string out_dir;  ///< when set: results.csv and report.txt are written here
  /// bleu-vs-length: the directory holding train.tsv, valid.tsv and test.tsv (empty: data/bible-es-en)
  std::string corpus;
};

/// A table of formatted cells; `to_text` aligns the chosen columns, `to_csv` writes them all.
struct Table {
  std::vector<std::string> columns;                                  ///< column names
  std::vector<std::vector<std::string>> rows;                        ///< each as wide as columns
  void add(std::vector<std::string> row);                            ///< throws Error if the width differs
  std::string to_text(const std::vector<std::string>& shown) const;  ///< shown: column names (empty: all)
  std::string to_csv() const;                                        ///< every column, a header line first
  std::string to_markdown(const std::vector<std::string>& shown) const;  ///< a GitHub-style table
  /// The cell in `row` under `column`; throws Error on an unknown column.
  const std::string& cell(size_t row, const std::string& column) const;
};

/// One line of a line chart: y against x, with an optional bar per point from y_lo to y_hi (the
/// spread over seeds); y_lo and y_hi are empty or as long as x.
struct Series {
  std::string label;  ///< the legend entry
  /// The points, and the optional bars' ends.
  /// @{
  std::vector<double> x, y, y_lo, y_hi;
  /// @}
};

/// A picture an experiment asks for. The library describes it; `tapegrad experiment --out DIR` draws it
/// as `DIR/<file>` (PNG, cairo), and report.md links it.
struct Figure {
  /// A line chart (series) or a heatmap (cells).
  enum class Kind { lines, heatmap };
  Kind kind = Kind::lines;  ///< which picture
  std::string file;         ///< the PNG's name, such as "accuracy.png"
  /// The title and the axis labels.
  /// @{
  std::string title, x_label, y_label;
  /// @}
  /// lines
  std::vector<Series> series;
  bool log_y = false;  ///< lines: logarithmic y axis
  /// heatmap: cells[row][col] in [0, 1] (such as attention weights: rows are output positions, columns
  /// source positions), with one label per row and per column
  std::vector<std::vector<double>> cells;
  /// heatmap: one label per row and per column of cells
  /// @{
  std::vector<std::string> row_labels, col_labels;
  /// @}
};

/// What run returns: the measurements, the findings and the pictures to draw.
struct Report {
  std::string name;                   ///< the experiment's name
  Table table;                        ///< every measurement (results.csv): one row per seed
  std::vector<std::string> shown;     ///< the columns of `table` worth printing when there is no aggregate
  std::vector<std::string> summary;   ///< one line per finding, computed from the numbers
  std::vector<Figure> figures;        ///< drawn by the command line into --out
  std::vector<std::string> sections;  ///< further markdown paragraphs or tables (e.g. a sweep)
  Table aggregate;              ///< mean and min-max over seeds; printed instead of `table` if it has columns
  std::string to_text() const;  ///< the table, then the summary lines
  std::string to_markdown() const;  ///< report.md: title, table, summary, sections, figure links
};

/// Progress while an arm trains (or a timing point runs).
struct Progress {
  std::string arm;  ///< its name, such as "attention-rnn on copy"
  /// This arm's number (1-based) and how many arms there are.
  /// @{
  int arm_index, arms;
  /// @}
  /// The step just taken (1-based) and the arm's total.
  /// @{
  int64_t step, steps;
  /// @}
  double loss;     ///< NaN while timing
  double seconds;  ///< since the arm started
};

/// Optional hooks run reports progress through (an empty function is skipped).
struct Callbacks {
  std::function<void(const std::string&)> log;   ///< one line per arm (start, result)
  std::function<void(const Progress&)> on_step;  ///< after every step
};

/// Every experiment name run accepts.
std::vector<std::string> names();
/// What the experiment runs and what it shows; throws Error naming the valid experiments.
std::string description(const std::string& name);
/// Throws Error naming the bad value (unknown experiment, negative steps, seeds or threads).
void validate(const std::string& name, const Options& options);
/// Runs one experiment; writes out_dir/results.csv, out_dir/report.txt and out_dir/report.md when out_dir
/// is set (the figures are drawn by the caller: see Figure).
Report run(const std::string& name, const Options& options, const Callbacks& callbacks = {});

}  // namespace tapegrad::experiment
