// Experiments that measure the claims behind the path Vanilla Seq2Seq -> Attention Seq2Seq -> Transformer:
// what `tapegrad experiment NAME` runs, as a library so tests drive the same code.
//
//   bottleneck   vanilla GRU seq2seq vs attention GRU on copy and reverse; accuracy per source-length bin
//   long-range   the recall task (a value far back in the source) per length bin: rnn, attention-rnn,
//                transformer
//   positional   Transformer with sinusoidal, learned and no positions, on reverse (order matters) and
//                sort (a control: the sorted output does not depend on the source order)
//   parallelism  training-step time and tokens/s vs sequence length, attention GRU vs Transformer of
//                similar size, at 1 and N threads
//
// Every arm of an accuracy experiment trains with the same seed (so the same batches), the same step
// budget and the same optimizer settings, through train::train; it is then scored by greedy decoding
// (train::evaluate) on fresh examples drawn from a separate seed, per length bin. Not here: repeats over
// several seeds or confidence intervals; one seed per run, so small differences are noise.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tapegrad::experiment {

struct Options {
  int64_t steps = 0;   // training steps per arm (parallelism: timed steps per point); 0: the default
  uint64_t seed = 1;   // one seed shared by every arm
  int threads = 0;     // kernel threads (0: the default); parallelism measures 1 and this many
  bool quick = false;  // tiny models, lengths and budgets: seconds, for tests and a first look
  std::string out_dir; // when set: results.csv and report.txt are written here
};

// A table of formatted cells; `to_text` aligns the chosen columns, `to_csv` writes them all.
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  void add(std::vector<std::string> row);                        // throws Error if the width differs
  std::string to_text(const std::vector<std::string>& shown) const;  // shown: column names (empty: all)
  std::string to_csv() const;
  const std::string& cell(size_t row, const std::string& column) const;  // throws Error on an unknown column
};

struct Report {
  std::string name;
  Table table;
  std::vector<std::string> shown;    // the columns worth printing
  std::vector<std::string> summary;  // one line per finding, computed from the numbers
  std::string to_text() const;       // the table, then the summary lines
};

// Progress while an arm trains (or a timing point runs).
struct Progress {
  std::string arm;          // e.g. "attention-rnn on copy"
  int arm_index, arms;      // 1-based
  int64_t step, steps;
  double loss;              // NaN while timing
  double seconds;           // since the arm started
};

struct Callbacks {
  std::function<void(const std::string&)> log;       // one line per arm (start, result)
  std::function<void(const Progress&)> on_step;     // after every step
};

std::vector<std::string> names();
// What the experiment runs and what it shows; throws Error naming the valid experiments.
std::string description(const std::string& name);
// Throws Error naming the bad value (unknown experiment, negative steps or threads).
void validate(const std::string& name, const Options& options);
// Runs one experiment; writes out_dir/results.csv and out_dir/report.txt when out_dir is set.
Report run(const std::string& name, const Options& options, const Callbacks& callbacks = {});

}  // namespace tapegrad::experiment
