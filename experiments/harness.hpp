// Shared by the files of experiments/ (the research harness, beside the library and not installed): the
// harness every experiment runs on, the model sizes, the accuracy runner and its summaries, and the cell
// formatting.
//
//   harness.cpp   one of each: an arm's training options, a logged training run, seeds, held-out examples
//   registry.cpp  the list of experiments, their descriptions, validate, run (and the out_dir files)
//   accuracy.cpp  bottleneck, long-range, positional: their arms, bins, budgets and summary lines
//   scoring.cpp   training each arm of an accuracy experiment and scoring it by greedy decoding per bin
//   timing.cpp    parallelism: timed training steps per length and thread count, beside the tape's shape
//   gradient_path.cpp  gradient-path: d log p(y_j) / d(source embedding) against distance; critical paths
//   tape_shape.cpp the shape of one training step's tape: entries, critical path, work, parallel width
//   equivariance.cpp  positional's exact check: the encoder without positions is permutation-equivariant
//   attention_maps.cpp  attention-maps: cross-attention mass on the expected source position (reverse)
//   bleu_vs_length.cpp  bleu-vs-length: test BLEU per source-length bin on a TSV corpus, three models
//   report.cpp    Table and Report (text and CSV), number formatting
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "experiments/experiment.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::experiment::detail {

// ---- formatting (report.cpp) ----------------------------------------------------------------------
std::string fmt(double v, int digits = 3);
// Significant digits, for values spanning orders of magnitude (gradient norms, FLOPs): "1.234e+05".
inline std::string fmt_sig(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}
std::string range_name(int lo, int hi);
void write_file(const std::string& path, const std::string& text);

// ---- spread over seeds (report.cpp) ---------------------------------------------------------------
struct Spread {
  double mean = 0, min = 0, max = 0;
};
Spread spread(const std::vector<double>& values);  // throws Error on an empty list
// "0.923 (0.880-0.951)", or just "0.923" when every value is the same (one seed)
std::string fmt_spread(const Spread& s, int digits = 3);

// A line chart with its file, title and axis labels (series added by the caller).
inline Figure line_figure(std::string file, std::string title, std::string x_label, std::string y_label,
                          bool log_y = false) {
  Figure f;
  f.kind = Figure::Kind::lines;
  f.file = std::move(file), f.title = std::move(title), f.x_label = std::move(x_label);
  f.y_label = std::move(y_label), f.log_y = log_y;
  return f;
}

// ---- model sizes (registry.cpp) -------------------------------------------------------------------
models::ModelConfig rnn_config(models::ModelKind kind, bool quick);
models::ModelConfig transformer_config(nn::PositionalKind positional, bool quick);
std::string arm_label(const models::ModelConfig& c);

// ---- the harness (harness.cpp): one of each, shared by every experiment ---------------------------
// The options every experiment's runs share: train::TrainOptions' optimizer defaults (AdamW, cosine,
// clipping), warm-up min(warmup, steps / 10), no validation, evaluation or checkpoints.
train::TrainOptions run_options(const models::ModelConfig& model, const std::string& task,
                                const data::TaskOptions& task_options, int64_t steps, int64_t batch_size,
                                int64_t warmup, double lr, uint64_t seed, int threads);
struct Trained {
  train::Session session;
  double train_loss = 0, seconds = 0;  // train_loss: the mean of the last 50 steps' losses
};
// Builds the session and logs "[index/total] what: N parameters, S steps".
train::Session start_run(const train::TrainOptions& options, const std::string& what, int index, int total,
                         const Callbacks& cb);
// Trains t.session to its options' step count, reporting progress through cb.on_step; sets train_loss and
// seconds.
void train_run(Trained& t, const std::string& what, int index, int total, const Callbacks& cb);
// start_run, then train_run.
Trained train_logged(const train::TrainOptions& options, const std::string& what, int index, int total,
                     const Callbacks& cb);
// Runs work(0), ..., work(count - 1), at most `jobs` at once, each on a fresh thread of its own with
// `threads` kernel threads: a fresh thread starts with fresh thread-local state (its tape, the default
// generator, GEMM's packing cache), so a run's result depends on its own options alone, not on which
// runs came before it on the same thread or beside it. jobs 1 runs them in order on this thread. The
// first exception a job throws is rethrown here once every started job has finished.
void run_jobs(size_t count, int jobs, int threads, const std::function<void(size_t)>& work);
// cb with both callbacks behind one mutex, for jobs that report at the same time.
Callbacks serialized(const Callbacks& cb);
// The seeds every arm runs with: opts.seed, opts.seed + 1, ... (opts.seeds of them; by default 3, or 1
// under --quick).
std::vector<uint64_t> seed_list(const Options& opts);
// `count` examples of `task` never seen in training, drawn from a generator of their own derived from
// (seed, stream): the same seed, task and stream give every arm the same examples; another stream gives
// another set (a validation split apart from the test split, one set per length bin).
std::vector<data::Example> held_out(const data::Task& task, uint64_t seed, uint64_t stream, int64_t count);

// ---- accuracy runs (scoring.cpp) ------------------------------------------------------------------
// How an arm trains: the knobs the recipe sweep varies (everything else is shared by every arm).
struct Recipe {
  double lr = 2e-3;
  bool pre_ln = false;  // Transformer only: layer norm before each sub-layer
  std::string name(bool transformer) const;  // "lr 2e-3, post-LN" ("lr 2e-3" for an RNN)
};

struct Arm {
  models::ModelConfig model;
  std::string task;
  Recipe recipe;  // the default: the winner of the stated sweep (docs/experiments.md)
};

struct AccuracySetup {
  data::TaskOptions train_task;           // training lengths span every bin
  std::vector<std::pair<int, int>> bins;  // evaluation source-length ranges
  int64_t steps = 1500, batch_size = 32, warmup = 100, eval_examples = 200;
  // Where the arms' default recipes come from, for the report (replaced by the sweep under --sweep).
  std::string recipe_source = "lr 2e-3 for every arm, not swept; --sweep runs the sweep";
};

// One (arm, seed, bin) result.
struct Score {
  std::string task, arm;
  uint64_t seed;
  int bin;
  double exact_match, token_accuracy;
};

extern const std::vector<std::string> kAccuracyColumns;

// The recipes --sweep tries for an arm: lr in {5e-4, 1e-3, 2e-3}, and post-LN or pre-LN for a
// Transformer.
std::vector<Recipe> sweep_recipes(const Arm& arm);

// Trains every arm once per seed (seed_list) with the same budget, scores each run per bin on fresh
// held-out examples, adds one row per (arm, seed, bin) to report.table and the mean and min-max over
// seeds to report.aggregate, and an accuracy-against-length figure per task. With opts.sweep, first
// trains every recipe of sweep_recipes (first seed only) and scores it on a separate validation split;
// each arm then runs with its best recipe (the sweep's table goes into report.sections).
std::vector<Score> run_accuracy(const std::vector<Arm>& arms, const AccuracySetup& setup, const Options& opts,
                                const Callbacks& cb, Report& report);
// The mean over seeds of one (task, arm, bin) cell.
Spread exact_match(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin);
Spread token_accuracy(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin);
// "copy, rnn-gru: token_accuracy 0.98 (4-8) -> 0.31 (28-32), exact_match 0.95 -> 0.00" (means over seeds)
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

// ---- the shape of one training step's tape (tape_shape.cpp) ----------------------------------------
// Work convention: matmul and linear entries count 2 * output elements * inner dimension FLOPs in
// forward (forward_flops); every other entry counts one FLOP per element of its largest operand (input
// or output), except views and copies (permute, reshape, contiguous, concat, narrow, embedding), which
// count none; backward counts twice the forward of each entry.
struct TapeShape {
  int64_t entries = 0;        // tape entries one training step records (its forward)
  int64_t critical_path = 0;  // the longest chain of dependent entries (TapeRecorder::critical_path);
                              // backward walks the same chain in reverse
  double work_flops = 0;      // forward + backward
  // FLOPs per dependent level of the whole step: work / (2 * critical_path), forward and backward
  // levels both counted.
  double parallel_width() const;
};
// Takes one training step (train::train_step) on `batch` under a tape recorder and returns its shape.
TapeShape record_step(train::Session& session, const data::Batch& batch);
// A fresh session of `config` on `task` with every source `length` tokens long, one recorded step.
TapeShape tape_shape(const models::ModelConfig& config, const std::string& task, int length,
                     int64_t batch_size, uint64_t seed);

// ---- the experiments (accuracy.cpp, timing.cpp, gradient_path.cpp, attention_maps.cpp) -----------
Report bottleneck(const Options& opts, const Callbacks& cb);
Report long_range(const Options& opts, const Callbacks& cb);
Report positional(const Options& opts, const Callbacks& cb);
Report parallelism(const Options& opts, const Callbacks& cb);
Report gradient_path(const Options& opts, const Callbacks& cb);
Report attention_maps(const Options& opts, const Callbacks& cb);
Report bleu_vs_length(const Options& opts, const Callbacks& cb);  // bleu_vs_length.cpp

}  // namespace tapegrad::experiment::detail
