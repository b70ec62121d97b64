/// @file
/// Training, evaluation and checkpoints for the seq2seq models: what `tapegrad train/eval/translate`
/// run, as a library so tests drive the same code.
///
/// Reproducibility: the batch of step s is a pure function of (seed, s) (built-in tasks sample it from
/// a generator seeded by both; TSV data is shuffled per epoch by a generator seeded by (seed, epoch)),
/// dropout draws from the model's generator, whose state is checkpointed, and the learning rate is a
/// function of s. So N straight steps and k steps + save + resume + N-k steps give identical bits.
///
/// A checkpoint is model.safetensors (parameters named as the model names them; metadata: format,
/// model config, vocabulary, tokenisation, step, the training options) and optimizer.safetensors
/// (optimizer state and the model generator's state, with the same step). A run directory keeps the
/// last two in step-N subdirectories behind an atomically replaced `latest` link, with
/// DIR/model.safetensors linked through it, so a kill at any instant leaves a complete pair
/// (layout: src/train/run_directory.hpp). A directory with just the two files also loads.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tapegrad/data.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/models/seq2seq.hpp"
#include "tapegrad/optim.hpp"
#include "tapegrad/train/step.hpp"

/// Training, evaluation and checkpoints (see train.hpp).
namespace tapegrad::train {

/// Every option of `tapegrad train`, with its defaults; stored in checkpoints as JSON. Each field is
/// described once, in option_table() (flag, JSON key, range, whether a resume may change it, help),
/// and named as its flag is ("--clip" is `clip`, stored as "clip").
struct TrainOptions {
  models::ModelConfig model;       ///< vocab_size is filled from the data
  std::string task = "reverse";    ///< built-in task, unless train is set
  data::TaskOptions task_options;  ///< the built-in task's lengths and symbols (--min-len, --max-len, --symbols)
  /// TSV files: training pairs and held-out pairs (--train, --valid)
  /// @{
  std::string train, valid;
  /// @}
  data::Tokenization tokens = data::Tokenization::chars;  ///< how TSV lines split into tokens
  /// --text: a plain-text file for a language model (--model gpt), instead of --task or --train
  std::string text;
  int64_t block_size = 64;  ///< --text: tokens per training block (the gpt's context length)
  /// --tokens sentencepiece: pieces per trained model, specials included (--vocab-size), the algorithm
  /// (--spm-type), an existing model to use instead of training one (--spm-model), and one joint
  /// model or one per side (--spm-sides joint | separate).
  /// @{
  int64_t vocab_size = 8000;
  data::SentencePieceType spm_type = data::SentencePieceType::unigram;
  std::string spm_model;
  std::string spm_sides = "joint";
  /// @}
  /// When above 0, each step's batch holds as many examples as fit this many padded tokens (batch
  /// size times the longer of its longest source and longest target + 1), length-bucketed, instead
  /// of batch_size sequences (--batch-tokens).
  int64_t batch_tokens = 0;
  double valid_fraction = 0.1;      ///< TSV without valid: hold out this fraction
  int64_t steps = 1500;             ///< the step to train up to (a resumed run continues to it)
  int64_t batch_size = 64;          ///< sequences per step
  std::string optimizer = "adamw";  ///< adamw | adam | sgd
  double lr = 1e-3;                 ///< peak learning rate
  double momentum = 0.9;            ///< sgd
  double weight_decay = 0.01;       ///< decoupled for adamw, L2 for adam and sgd
  std::string decay = "all";        ///< all | matrices: which parameters weight decay applies to
  double beta2 = 0.98;              ///< adam and adamw: decay of the second-moment estimate
  double adam_eps = 1e-9;           ///< adam and adamw: added to the root of the second moment
  double min_lr = 0;                ///< cosine: the rate the schedule ends at (at most lr)
  optim::Schedule schedule = optim::Schedule::cosine;  ///< anneals to a sharper final model than inverse_sqrt
  int64_t warmup = 200;                                ///< linear warm-up steps of the schedule
  double clip = 1.0;                                   ///< global gradient-norm limit (0: no clipping)
  double label_smoothing = 0.0;                        ///< of the cross-entropy, in [0, 1)
  uint64_t seed = 1;            ///< model weights, batches and dropout all follow from it
  int threads = 0;              ///< 0: the default
  int64_t valid_size = 500;     ///< built-in task: held-out examples
  int64_t eval_every = 500;     ///< validation every this many steps
  int64_t log_every = 50;       ///< a log line (and a metrics.csv row) every this many steps
  int64_t save_every = 1000;    ///< also at the end
  int64_t decode_max_len = 0;   ///< 0: longest target in the data + 8
  std::string out_dir;          ///< --out: empty: no checkpoints or CSV (not saved)
  std::string resume_dir;       ///< --resume: a checkpoint to continue from (empty: a fresh run; not saved)
  bool overwrite = false;       ///< out_dir may hold a checkpoint, which this run replaces (not saved)
  bool detect_anomaly = false;  ///< AnomalyMode around every step (not saved)
  /// Data-parallel runs (mpirun): gradients are summed in buckets of this many MiB, each sent as soon
  /// as its gradients are complete during backward (not saved; may change on resume).
  double bucket_mb = 4;
  /// Data-parallel runs: gather every rank's gradients and sum them in rank order, so that repeated
  /// runs give identical bits whatever MPI's reduction algorithm (not saved; may change on resume).
  bool deterministic_allreduce = false;
  /// The options the user gave explicitly, as the command line spells them ("--d-model"): on
  /// --resume, each must agree with the checkpoint unless it is one that may change (not saved).
  std::set<std::string> given;

  /// Throws Error naming the option as the command line spells it and its allowed range, as in
  /// "--lr nan: expected a finite number above 0": every row of option_table(), then the task's
  /// options and the combinations. Called before anything is built or written.
  void validate() const;
  /// On --resume: throws Error listing every option in `given` whose value differs from `saved`'s
  /// (the checkpoint's), except those that may change on resume (kResumableOptions). --train and
  /// --valid agree when they name the same absolute path.
  void check_resume(const TrainOptions& saved) const;
  /// The options as the JSON object stored in checkpoints and written to `--out/config.json`: every
  /// row of option_table() with a key (not out_dir, resume_dir, overwrite, detect_anomaly, bucket_mb,
  /// deterministic_allreduce or given), the model as ModelConfig::to_json writes it; numbers
  /// round-trip exactly. `indent` >= 0 pretty-prints with that many spaces per level.
  std::string to_json(int indent = -1) const;
  /// Parses to_json's output; every field must be present (a checkpoint's options), under its key or
  /// the key files written before the option table used (OptionSpec::old_key), and within its
  /// table range. Throws Error naming the field ("field 'batch_size' is 1000000000000; expected an
  /// integer in [1, 1048576]").
  static TrainOptions from_json(const std::string& json);
  /// Reads a config file (`train --config FILE.json`): to_json's object, or any subset of its keys
  /// (the missing ones keep their defaults; model.vocab_size is ignored: the data decide it); old
  /// keys read as their new names. A key unknown to to_json or a value of another JSON type than
  /// to_json writes throws Error as one line naming the file and the key (`run.json: key 'lr' is
  /// "fast"; expected a number`); a value out of range throws from_json's or validate()'s Error
  /// prefixed with the file; an unreadable file throws IoError naming it. When `keys` is given, it
  /// receives the keys the file set (new names), nested ones as "model.dropout".
  static TrainOptions from_config_file(const std::string& path, std::set<std::string>* keys = nullptr);
};

/// How an option's value reads on the command line and in JSON.
enum class OptionType {
  integer,  ///< a decimal integer (JSON: an integer)
  real,     ///< a finite decimal number (JSON: a number)
  text,     ///< a string, possibly one of named choices (JSON: a string)
  path,     ///< a file path (JSON: a string); on --resume two spellings of one file agree
  flag,     ///< a switch, on when given (JSON: true or false)
};

/// Which commands take an option.
enum class OptionScope {
  run,    ///< train, tape and profile: the model, the data and the optimisation
  train,  ///< train only: how long, checkpoints, logging, data-parallel runs
};

/// One row of the option table: an option of `tapegrad train` as the command line, validate(), the
/// JSON of checkpoints and config.json, and the resume comparison all see it. Only the field's
/// declaration and default (in TrainOptions or the structs nested in it) and its use live elsewhere.
struct OptionSpec {
  const char* flag;     ///< as the command line spells it and TrainOptions::given records it: "--clip"
  const char* key;      ///< JSON key: "clip", nested "model.d_model"; "" when the option is not saved
  const char* old_key;  ///< the key files written before the option table used ("clip_norm"), or ""
  OptionType type;      ///< how the value reads
  OptionScope scope;    ///< which commands take it
  bool resumable;       ///< a resumed run may give it differently (every option that is not saved)
  bool show_default;    ///< --help shows the default (false where the help text says it)
  const char* help;     ///< `train --help`'s text

  /// The field's value as the command line spells it: "0.5" (shortest exact decimal), "on", "chars".
  std::string value(const TrainOptions& options) const;
  /// Parses command-line text into the field, then checks its range; throws Error naming the flag,
  /// the text and the range: "--clip -1: expected a finite number in [0, 1e+30]".
  void set(TrainOptions& options, const std::string& text) const;
  /// Throws the Error set() would for the field's present value.
  void check(const TrainOptions& options) const;
  /// Copies the field from `from` into `to`.
  void copy(const TrainOptions& from, TrainOptions& to) const;
  /// The range as errors say it ("an integer in [1, 1048576]"); "" when any value of the type goes.
  std::string expected() const;

  struct Field;                        ///< how the field is reached, read and written (options.cpp)
  std::shared_ptr<const Field> field;  ///< this row's
  /// An option added after checkpoints were first written: a stored object without its key (an
  /// older checkpoint) reads as the default, which is what that run trained with.
  bool default_when_absent = false;
};

/// The option table, in `train --help` order: every command-line option of `tapegrad train` but
/// --config (which names a file of them), with the model's options (ModelConfig's fields) too.
const std::vector<OptionSpec>& option_table();

/// The options a resumed run may change: "--steps", "--threads", ... (listed in `train --help`);
/// the table's resumable rows.
extern const std::vector<std::string> kResumableOptions;

/// What evaluate measured.
struct EvalResult {
  double loss = 0;                   ///< teacher-forced mean cross-entropy
  double token_accuracy = 0;         ///< greedy output vs target, position by position, over target tokens
  double exact_match = 0;            ///< greedy output equals the target exactly
  /// Text (evaluate_text): loss x tokens / (characters x ln 2), the loss in bits per character of the
  /// targets (characters of the original text, also for pieces); 0 for seq2seq evaluation.
  double bits_per_char = 0;
  int64_t examples = 0;              ///< examples scored
  std::vector<std::string> samples;  ///< a few "source -> output (target)" lines
  std::vector<std::string> outputs;  ///< every example's greedy output, detokenised, in order (for BLEU)
};

class RunDirectory;
class TokenBatches;

/// Everything a session needs: data, vocabulary, model, optimizer, and where it is.
struct Session {
  TrainOptions options;              ///< as given (resumed: the checkpoint's, with the changes allowed)
  data::Vocab vocab;                 ///< the task's, the TSV data's, or the checkpoint's
  /// How text becomes tokens of `vocab` and back (options.tokens; the task's for a built-in task).
  std::shared_ptr<const data::Tokenizer> tokenizer;
  std::unique_ptr<data::Task> task;  ///< null for TSV data
  /// TSV data (training empty for a built-in task, which samples each batch) and the held-out examples.
  /// @{
  std::vector<data::Example> train_examples, valid_examples;
  /// @}
  int64_t blank_lines = 0;                      ///< skipped in the TSV files
  /// --text: the training part's ids (the first 90% of the file); each step's blocks are drawn from it,
  /// and valid_examples holds the validation blocks (evenly spaced over the last 10%).
  std::vector<int32_t> train_text;
  /// --text with SentencePiece pieces: characters (code points of the file) per token of the validation
  /// part, which turns its nats per token into bits per character; 0 for characters (one per token).
  double valid_characters_per_token = 0;
  std::unique_ptr<models::Seq2Seq> model;       ///< built from options.model
  std::unique_ptr<optim::Optimizer> optimizer;  ///< over model's parameters
  int64_t step = 0;                             ///< steps completed
  std::shared_ptr<RunDirectory> run_dir;        ///< --out, locked for this session; null without --out
  /// --batch-tokens: the length-bucketed batches (src/train/token_batches.hpp); null by sequence count.
  std::shared_ptr<TokenBatches> token_batches;

  /// The batch of 1-based `step`: a pure function of (seed, step), see train.hpp.
  data::Batch batch_for_step(int64_t step) const;
  /// The examples of step `step`'s batch, in order (batch_for_step pads them into tensors). Text:
  /// batch_size blocks at offsets drawn uniformly from Generator::derive(seed, step).
  std::vector<data::Example> examples_for_step(int64_t step) const;
  /// Examples as the batch the model trains on: data::make_block_batch for text, data::make_batch otherwise.
  data::Batch batch_of(const std::vector<data::Example>& examples) const;
  /// One line: model, parameter count, vocabulary size and data.
  std::string describe() const;
};

/// Builds a fresh session (or loads options.resume_dir when set; CLI options other than the data and
/// model shape then override, such as a larger --steps). With --text: the file read whole, its
/// character vocabulary (the checkpoint's when resuming), the first 90% of its ids for training and
/// --valid-size validation blocks evenly spaced over the last 10% (nanoGPT's prepare.py split).
Session make_session(const TrainOptions& options);

/// The optimizer `options` name (adamw | adam | sgd) over `params`, with their lr, momentum and
/// weight decay (on every parameter, or with --decay matrices only on those of 2 or more dimensions),
/// betas (0.9, --beta2) and --adam-eps (defaults 0.98 and 1e-9): what training builds, and
/// what `tapegrad tape --checkpoint` builds to take the run's next step. Throws Error naming an
/// unknown optimizer.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& options, optim::ParamList params);

/// A training step on a seq2seq batch (train/step.hpp's train_step with the loss
/// model.loss(batch, recipe.label_smoothing)); StepResult::tokens counts the batch's target tokens.
StepResult train_step(models::Seq2Seq& model, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const data::Batch& batch, int64_t step);
/// The same on a session: takes step session.step + 1 with the session's options and advances it.
StepResult train_step(Session& session, const data::Batch& batch);

/// What train reports after each step.
struct StepLog {
  int64_t step;  ///< the 1-based step just taken
  /// As in StepResult; target tokens per second of the step; seconds since train started.
  /// @{
  double loss, lr, grad_norm, tokens_per_second, seconds;
  /// @}
  double step_seconds = 0;            ///< this step's wall time
  double backward_seconds = 0;        ///< of which backward (with the wait for the gradient sums)
  double allreduce_wait_seconds = 0;  ///< of which waiting for gradient sums (data-parallel runs)
  double padding_fraction = 0;        ///< of the step's batch (data::Batch::padding_fraction)
};
/// Trains from session.step to options.steps. Calls on_step after every step and on_eval after each
/// validation; writes checkpoints, metrics.csv and samples.txt under out_dir when set.
void train(Session& session, const std::function<void(const StepLog&)>& on_step,
           const std::function<void(int64_t step, const EvalResult&)>& on_eval);

/// Scores `examples` in batches of `batch_size`: teacher-forced loss and greedy decoding of up to
/// `max_len` tokens, under NoGrad and in eval mode (the mode is restored afterwards); keeps `samples`
/// decoded lines.
EvalResult evaluate(models::Seq2Seq& model, const data::Vocab& vocab, const data::Tokenizer& tokenizer,
                    const std::vector<data::Example>& examples, int64_t batch_size, int64_t max_len, int samples = 5);
/// evaluate with data::make_tokenizer(tok) (chars or whitespace: a built-in task's).
EvalResult evaluate(models::Seq2Seq& model, const data::Vocab& vocab, data::Tokenization tok,
                    const std::vector<data::Example>& examples, int64_t batch_size, int64_t max_len, int samples = 5);

/// Scores text blocks (data::text_blocks' examples) in batches of `batch_size` under NoGrad and in
/// eval mode (restored afterwards): the mean loss in nats per target token, and in bits per character
/// of the targets: with `characters_per_token` > 0 (pieces: Session::valid_characters_per_token), nats
/// per token / (characters_per_token x ln 2); otherwise each token's characters counted from its text
/// in `vocab` (characters).
EvalResult evaluate_text(models::Seq2Seq& model, const data::Vocab& vocab, const std::vector<data::Example>& blocks,
                         int64_t batch_size, double characters_per_token = 0);

/// Saves the session as step-N in run directory `dir` (created if needed) behind the `latest` link
/// (see train.hpp). Throws NonFiniteError if a parameter is not finite (the last checkpoint is kept)
/// and IoError if a file cannot be written.
void save_checkpoint(const Session& session, const std::string& dir);
/// A checkpoint loaded for inference.
struct LoadedModel {
  std::unique_ptr<models::Seq2Seq> model;  ///< in eval mode
  data::Vocab vocab;                       ///< its vocabulary
  /// Its tokenizer (options.tokens; a SentencePiece model comes from the checkpoint itself).
  std::shared_ptr<const data::Tokenizer> tokenizer;
  TrainOptions options;                    ///< the options it was trained with
  int64_t step = 0;                        ///< steps it was trained for
  std::string optimizer_path;              ///< the optimizer state saved with this model
};
/// Loads a checkpoint for inference: model (eval mode), vocabulary and the training options, from a
/// run directory or a directory holding the two files. Throws IoError naming the file and what is wrong.
LoadedModel load_checkpoint(const std::string& dir);

/// Where examples for a loaded checkpoint come from (`tapegrad eval`, `tapegrad tape --checkpoint`): a TSV
/// file, or a built-in task whose vocabulary must be the checkpoint's.
struct CheckpointExampleSource {
  std::string tsv;   ///< A TSV file of pairs, read with the checkpoint's tokenisation; empty: a task.
  std::string task;  ///< The built-in task when there is no TSV; empty: the checkpoint's own.
  std::optional<data::TaskOptions> task_options;  ///< The task's options; unset: the checkpoint's.
  int64_t count = 0;  ///< Task examples to sample (a TSV gives all its pairs).
  uint64_t seed = 0;  ///< The seed the task examples are sampled from.
};
/// Examples for a checkpoint, as ids of its vocabulary, and the tokenisation they were read in.
struct CheckpointExamples {
  std::vector<data::Example> examples;  ///< Every TSV pair, or `count` task samples.
  /// The TSV's (the checkpoint's) or the task's.
  data::Tokenization tokenization = data::Tokenization::chars;
  /// Each example's target text: the TSV's target column as written, or a task's target detokenised.
  std::vector<std::string> target_text;
  /// The tokenizer of that tokenisation (the checkpoint's own for its TSV).
  std::shared_ptr<const data::Tokenizer> tokenizer;
  /// Source and target tokens of a TSV, and how many of them the vocabulary lacks (became data::kUnk).
  /// @{
  int64_t tokens = 0, unknown_tokens = 0;
  /// @}
};
/// The examples `source` names for `m`: a TSV's pairs encoded with the checkpoint's vocabulary
/// (unknown tokens become data::kUnk), or `count` samples of the task from Generator(seed). Throws
/// Error, starting with `what`, when a checkpoint trained on a TSV file is given neither a TSV nor a
/// task, or when the task with these options has another vocabulary than the checkpoint (its ids would
/// mean other tokens); and what read_tsv and make_task throw.
CheckpointExamples examples_for_checkpoint(const LoadedModel& m, const CheckpointExampleSource& source,
                                           const std::string& what);

/// A text file as a language-model checkpoint scores it (`tapegrad eval --text`).
struct CheckpointText {
  std::vector<data::Example> blocks;  ///< evenly spaced blocks of the checkpoint's block size (text_blocks)
  /// Pieces: the file's characters per token (evaluate_text's characters_per_token); 0 for characters.
  double characters_per_token = 0;
  /// The file's tokens, and how many of them the vocabulary lacks (became data::kUnk).
  /// @{
  int64_t tokens = 0, unknown_tokens = 0;
  /// @}
};
/// The text of `path` through `m`'s own tokenizer (a SentencePiece model from the checkpoint) and
/// vocabulary, cut into `count` evenly spaced blocks over the whole file. Throws what read_text throws,
/// and IoError when the file holds too few tokens for one block.
CheckpointText text_for_checkpoint(const LoadedModel& m, const std::string& path, int64_t count);

/// The checks behind loading, on files already read (wherever they live). Each throws IoError naming
/// the file and the metadata field or tensor at fault.
///
/// A model file against its parsed config, before anything is built: the sizes its tensors imply
/// (src_embed.weight -> vocab_size, d_model; encoder.layers.N -> layers; d_ff, hidden, learned max_len),
/// the closed-form parameter count against the file's values, position tables within the file's size
/// plus 64 MB, the machine's memory (models::check_config), every value finite.
void check_model_file(const io::SafetensorsFile& model_file, const models::ModelConfig& config);
/// Parses the metadata strictly (format, step, options, vocab, config), runs check_model_file, then
/// builds the model and copies the parameters in (eval mode). What load_checkpoint does after reading.
LoadedModel load_model_file(const io::SafetensorsFile& model_file);
/// load_model_file's checks alone (everything before the model is built); throws what it would throw.
void check_model_loadable(const io::SafetensorsFile& model_file);
/// An optimizer file: format, step (digits only), generator state, finite moments (second moments >= 0).
void check_training_state(const io::SafetensorsFile& optimizer_file);
/// Its 'generator' entry: exactly 4 comma-separated unsigned 64-bit decimal words, not all zero.
std::vector<uint64_t> generator_state(const io::SafetensorsFile& optimizer_file);
/// Restores `optimizer` from an optimizer file's state tensors (after check_training_state); a tensor
/// missing or of another shape than the optimizer's throws IoError naming the file and the tensor.
void load_optimizer_state(optim::Optimizer& optimizer, const io::SafetensorsFile& optimizer_file);

}  // namespace tapegrad::train
