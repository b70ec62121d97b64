// Training, evaluation and checkpoints for the seq2seq models: what `tapegrad train/eval/translate`
// run, as a library so tests drive the same code.
//
// Reproducibility: the batch of step s is a pure function of (seed, s) (built-in tasks sample it from
// a generator seeded by both; TSV data is shuffled per epoch by a generator seeded by (seed, epoch)),
// dropout draws from the model's generator, whose state is checkpointed, and the learning rate is a
// function of s. So N straight steps and k steps + save + resume + N-k steps give identical bits.
//
// A checkpoint is model.safetensors (parameters named as the model names them; metadata: format,
// model config, vocabulary, tokenisation, step, the training options) and optimizer.safetensors
// (optimizer state and the model generator's state, with the same step). A run directory keeps the
// last two in step-N subdirectories behind an atomically replaced `latest` link, with
// DIR/model.safetensors linked through it, so a kill at any instant leaves a complete pair
// (layout: src/train/run_directory.hpp). A directory with just the two files also loads.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tapegrad/data.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/models/seq2seq.hpp"
#include "tapegrad/optim.hpp"

namespace tapegrad::train {

struct TrainOptions {
  models::ModelConfig model;      // vocab_size is filled from the data
  std::string task = "reverse";   // built-in task, unless train_file is set
  data::TaskOptions task_options;
  std::string train_file, valid_file;  // TSV
  data::Tokenization tokenization = data::Tokenization::chars;
  double valid_fraction = 0.1;    // TSV without valid_file: hold out this fraction
  int64_t steps = 1500;
  int64_t batch_size = 64;
  std::string optimizer = "adamw";  // adamw | adam | sgd
  double lr = 1e-3;
  double momentum = 0.9;          // sgd
  double weight_decay = 0.01;
  optim::Schedule schedule = optim::Schedule::cosine;  // anneals to a sharper final model than inverse_sqrt
  int64_t warmup = 200;
  double clip_norm = 1.0;
  double label_smoothing = 0.0;
  uint64_t seed = 1;
  int threads = 0;                // 0: the default
  int64_t valid_size = 500;       // built-in task: held-out examples
  int64_t eval_every = 500;
  int64_t log_every = 50;
  int64_t save_every = 1000;      // also at the end
  int64_t decode_max_len = 0;     // 0: longest target in the data + 8
  std::string out_dir;            // empty: no checkpoints or CSV
  std::string resume_dir;
  bool overwrite = false;         // out_dir may hold a checkpoint, which this run replaces (not saved)
  bool detect_anomaly = false;    // AnomalyMode around every step (not saved)
  /// Data-parallel runs (mpirun): gradients are summed in buckets of this many MiB, each sent as soon
  /// as its gradients are complete during backward (not saved; may change on resume).
  double bucket_mb = 4;
  /// Data-parallel runs: gather every rank's gradients and sum them in rank order, so that repeated
  /// runs give identical bits whatever MPI's reduction algorithm (not saved; may change on resume).
  bool deterministic_allreduce = false;
  // The options the user gave explicitly, as the command line spells them ("--d-model"): on
  // --resume, each must agree with the checkpoint unless it is one that may change (not saved).
  std::set<std::string> given;

  // Throws Error naming the option as the command line spells it and its allowed range, e.g.
  // "--lr nan: expected a finite number above 0". Called before anything is built or written.
  void validate() const;
  // On --resume: throws Error listing every option in `given` whose value differs from `saved`'s
  // (the checkpoint's), except those that may change on resume (kResumableOptions).
  void check_resume(const TrainOptions& saved) const;
  std::string to_json() const;
  static TrainOptions from_json(const std::string& json);
};

// The options a resumed run may change: "--steps", "--threads", ... (listed in `train --help`).
extern const std::vector<std::string> kResumableOptions;

struct EvalResult {
  double loss = 0;            // teacher-forced mean cross-entropy
  double token_accuracy = 0;  // greedy output vs target, position by position, over target tokens
  double exact_match = 0;     // greedy output equals the target exactly
  int64_t examples = 0;
  std::vector<std::string> samples;  // a few "source -> output (target)" lines
};

class RunDirectory;

// Everything a session needs: data, vocabulary, model, optimizer, and where it is.
struct Session {
  TrainOptions options;
  data::Vocab vocab;
  std::unique_ptr<data::Task> task;  // null for TSV data
  std::vector<data::Example> train_examples, valid_examples;
  int64_t blank_lines = 0;  // skipped in the TSV files
  std::unique_ptr<models::Seq2Seq> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  int64_t step = 0;  // steps completed
  std::shared_ptr<RunDirectory> run_dir;  // --out, locked for this session; null without --out

  data::Batch batch_for_step(int64_t step) const;
  /// The examples of step `step`'s batch, in order (batch_for_step pads them into tensors).
  std::vector<data::Example> examples_for_step(int64_t step) const;
  std::string describe() const;
};

// Builds a fresh session (or loads options.resume_dir when set; CLI options other than the data and
// model shape then override, e.g. a larger --steps).
Session make_session(const TrainOptions& options);

// What a step needs besides the model, the optimizer and the batch.
struct StepRecipe {
  double lr = 1e-3;
  optim::Schedule schedule = optim::Schedule::constant;
  int64_t warmup = 0, total_steps = 0;  // the schedule's shape
  double clip_norm = 0;                 // 0: no clipping
  double label_smoothing = 0;
  static StepRecipe from(const TrainOptions& options);
};

struct StepResult {
  int64_t step = 0;       // the 1-based step just taken
  double loss = 0, lr = 0;
  double grad_norm = 0;   // global L2 norm before clipping
  int64_t tokens = 0;     // target tokens in the batch
  double seconds = 0;     // wall time of the step, split into:
  double forward_seconds = 0, backward_seconds = 0;  // loss; backward
  double update_seconds = 0;  // clipping, the optimizer update and zeroing the gradients
  /// Data-parallel runs: the part of the step spent after backward waiting for the gradient sums
  /// (the communication backward did not hide); 0 for one process.
  double allreduce_wait_seconds = 0;
};

// One training step, the only place a step is written: sets the learning rate of `step`, computes
// the loss, runs backward, clips, updates and zeroes the gradients. A non-finite loss or gradient
// norm throws NonFiniteError (naming the step, the quantity and the first parameter whose gradient
// is not finite) before the update, so the parameters stay as they were.
StepResult train_step(models::Seq2Seq& model, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const data::Batch& batch, int64_t step);
// The same on a session: takes step session.step + 1 with the session's options and advances it.
StepResult train_step(Session& session, const data::Batch& batch);

struct StepLog {
  int64_t step;
  double loss, lr, grad_norm, tokens_per_second, seconds;
  double step_seconds = 0;            ///< this step's wall time
  double backward_seconds = 0;        ///< of which backward (with the wait for the gradient sums)
  double allreduce_wait_seconds = 0;  ///< of which waiting for gradient sums (data-parallel runs)
};
// Trains from session.step to options.steps. Calls on_step after every step and on_eval after each
// validation; writes checkpoints, metrics.csv and samples.txt under out_dir when set.
void train(Session& session, const std::function<void(const StepLog&)>& on_step,
           const std::function<void(int64_t step, const EvalResult&)>& on_eval);

EvalResult evaluate(models::Seq2Seq& model, const data::Vocab& vocab, data::Tokenization tok,
                    const std::vector<data::Example>& examples, int64_t batch_size, int64_t max_len, int samples = 5);

void save_checkpoint(const Session& session, const std::string& dir);
// Loads a checkpoint for inference: model (eval mode), vocabulary and the training options.
struct LoadedModel {
  std::unique_ptr<models::Seq2Seq> model;
  data::Vocab vocab;
  TrainOptions options;
  int64_t step = 0;
  std::string optimizer_path;  // the optimizer state saved with this model
};
LoadedModel load_checkpoint(const std::string& dir);

// The checks behind loading, on files already read (wherever they live). Each throws IoError naming
// the file and the metadata field or tensor at fault.
//
// A model file against its parsed config, before anything is built: the sizes its tensors imply
// (src_embed.weight -> vocab_size, d_model; encoder.layers.N -> layers; d_ff, hidden, learned max_len),
// the closed-form parameter count against the file's values, position tables within the file's size
// plus 64 MB, the machine's memory (models::check_config), every value finite.
void check_model_file(const io::SafetensorsFile& model_file, const models::ModelConfig& config);
// Parses the metadata strictly (format, step, options, vocab, config), runs check_model_file, then
// builds the model and copies the parameters in (eval mode). What load_checkpoint does after reading.
LoadedModel load_model_file(const io::SafetensorsFile& model_file);
// load_model_file's checks alone (everything before the model is built); throws what it would throw.
void check_model_loadable(const io::SafetensorsFile& model_file);
// An optimizer file: format, step (digits only), generator state, finite moments (second moments >= 0).
void check_training_state(const io::SafetensorsFile& optimizer_file);
// Its 'generator' entry: exactly 4 comma-separated unsigned 64-bit decimal words, not all zero.
std::vector<uint64_t> generator_state(const io::SafetensorsFile& optimizer_file);

}  // namespace tapegrad::train
