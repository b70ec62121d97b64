// Shared by the files of src/train/experiments (not part of the public API): the model sizes every
// experiment uses, the accuracy runner and its summaries, and the cell formatting.
//
//   registry.cpp  the list of experiments, their descriptions, validate, run (and the out_dir files)
//   accuracy.cpp  bottleneck, long-range, positional: their arms, bins, budgets and summary lines
//   scoring.cpp   training each arm (train::train) and scoring it by greedy decoding per length bin
//   timing.cpp    parallelism: timed training steps per length and thread count
//   equivariance.cpp  positional's exact check: the encoder without positions is permutation-equivariant
//   attention_maps.cpp  attention-maps: cross-attention mass on the expected source position (reverse)
//   report.cpp    Table and Report (text and CSV), number formatting
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tapegrad/experiment.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::experiment::detail {

// ---- formatting (report.cpp) ----------------------------------------------------------------------
std::string fmt(double v, int digits = 3);
std::string range_name(int lo, int hi);
void write_file(const std::string& path, const std::string& text);

// ---- seeds and spread (report.cpp) ----------------------------------------------------------------
// The seeds every arm runs with: opts.seed, opts.seed + 1, ... (opts.seeds of them; by default 3, or 1
// under --quick).
std::vector<uint64_t> seed_list(const Options& opts);
struct Spread {
  double mean = 0, min = 0, max = 0;
};
Spread spread(const std::vector<double>& values);  // throws Error on an empty list
// "0.923 (0.880-0.951)", or just "0.923" when every value is the same (one seed)
std::string fmt_spread(const Spread& s, int digits = 3);

// ---- model sizes (registry.cpp) -------------------------------------------------------------------
models::ModelConfig rnn_config(models::ModelKind kind, bool quick);
models::ModelConfig transformer_config(nn::PositionalKind positional, bool quick);
std::string arm_label(const models::ModelConfig& c);

// ---- accuracy runs (scoring.cpp) ------------------------------------------------------------------
struct Arm {
  models::ModelConfig model;
  std::string task;
};

struct AccuracySetup {
  data::TaskOptions train_task;           // training lengths span every bin
  std::vector<std::pair<int, int>> bins;  // evaluation source-length ranges
  int64_t steps = 1500, batch_size = 32, warmup = 100, eval_examples = 200;
  double lr = 2e-3;
};

// One row per (arm, bin), plus the numbers the summaries need.
struct Score {
  std::string task, arm;
  int bin;
  double exact_match, token_accuracy;
};

extern const std::vector<std::string> kAccuracyColumns;

// Trains every arm with the same seed and budget, scores it per bin, adds one table row per (arm, bin).
std::vector<Score> run_accuracy(const std::string& name, const std::vector<Arm>& arms,
                                const AccuracySetup& setup, const Options& opts, const Callbacks& cb,
                                Table& table);
const Score& find(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin);
// "copy, rnn-gru: token_accuracy 0.98 (4-8) -> 0.31 (28-32), exact_match 0.95 -> 0.00"
std::string trend(const std::vector<Score>& s, const AccuracySetup& setup, const std::string& task,
                  const std::string& arm);
// The bottleneck claim for one task (thresholds stated in scoring.cpp and in the line itself).
std::string length_verdict(const std::vector<Score>& s, const AccuracySetup& setup, const std::string& task,
                           const std::string& vanilla, const std::string& attention);

// ---- permutation equivariance of the Transformer encoder (equivariance.cpp) -----------------------
inline constexpr double kEquivarianceTolerance = 1e-5;  // float64; exact equivariance gives ~1e-15
struct EquivarianceCheck {
  double max_diff = 0;  // max |encoder(x[perm])[i] - encoder(x)[perm[i]]| over every position and channel
  double scale = 0;     // max |encoder(x)|: what the difference compares with
};
// Encodes src and its permutation src[perm] (src[perm][i] = src[perm[i]]) with the model's encoder
// (Seq2Seq::encoder_states) and compares the outputs permuted back. The model's dtype and mode as given.
EquivarianceCheck permutation_check(models::Seq2Seq& model, const std::vector<int32_t>& src,
                                    const std::vector<int64_t>& perm);
// Set distance (Hausdorff, max-abs norm) between the encoder outputs of sentences a and b, tokenized
// at whitespace with `vocab`: 0 exactly when they are the same set of vectors.
double sentence_set_distance(models::Seq2Seq& model, const data::Vocab& vocab, const std::string& a,
                             const std::string& b);
struct EquivarianceRow {
  uint64_t seed;
  nn::PositionalKind positional;
  int64_t trained_steps;  // 0: the weights make_model draws from the seed
  EquivarianceCheck check;
  double sentence_distance;  // "I love cats" vs "cats love I"; NaN for a trained row (the task's vocabulary)
};
// For each positional kind (none, sinusoidal, learned) and seed: a Transformer (transformer_config) from
// make_model(seed) in float64, checked on a random reverse source and permutation drawn from the seed,
// and on the two sentences with a vocabulary of their three words; plus, when trained_steps > 0, one
// row per kind for a model trained that many steps on reverse (first seed).
std::vector<EquivarianceRow> permutation_equivariance(const std::vector<uint64_t>& seeds, bool quick,
                                                      int64_t trained_steps, int threads);
std::string equivariance_markdown(const std::vector<EquivarianceRow>& rows);  // for Report::sections
std::vector<std::string> equivariance_summary(const std::vector<EquivarianceRow>& rows);  // one line per kind

// ---- the experiments (accuracy.cpp, timing.cpp, attention_maps.cpp) ----------------------------
Report bottleneck(const Options& opts, const Callbacks& cb);
Report long_range(const Options& opts, const Callbacks& cb);
Report positional(const Options& opts, const Callbacks& cb);
Report parallelism(const Options& opts, const Callbacks& cb);
Report attention_maps(const Options& opts, const Callbacks& cb);

}  // namespace tapegrad::experiment::detail
