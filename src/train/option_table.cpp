// The option table of `tapegrad train`: one row per option (flag, JSON key, the key before the table,
// type, scope, resumable, whether --help shows the default, help text, and the field with its range).
// Everything about an option but its field's declaration and its use is generated from its row: the
// command line (tools/cli/run_options.cpp), validate(), the resume comparison and the JSON of
// checkpoints and config.json (options.cpp). The field types below parse, check and store a value by
// the C++ type of the field they reach.
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

#include "src/train/option_field.hpp"
#include "src/train/train_internal.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::train {

namespace {

std::string number(double v) {  // as ranges are written: 1e+30, 0.001
  std::ostringstream os;
  os << v;
  return os.str();
}

// A field reached through `Get`, a captureless lambda `(auto& o) -> auto&` (so one works on const and
// mutable options alike), typed by what it returns.
template <class Get>
struct Reach {
  using T = std::remove_cvref_t<decltype(Get{}(std::declval<TrainOptions&>()))>;
  static T& of(TrainOptions& o) { return Get{}(o); }
  static const T& of(const TrainOptions& o) { return Get{}(const_cast<TrainOptions&>(o)); }
};

template <class Get>
struct FieldBase : OptionSpec::Field {
  using R = Reach<Get>;
  void copy(const TrainOptions& from, TrainOptions& to) const override { R::of(to) = R::of(from); }
};

// int, int64_t in [lo, hi]; uint64_t (the seed) over its whole range.
template <class Get>
struct IntegerField : FieldBase<Get> {
  using R = Reach<Get>;
  using T = typename R::T;
  int64_t lo, hi;
  IntegerField(int64_t lo_, int64_t hi_) : lo(lo_), hi(hi_) {}
  std::string text(const TrainOptions& o) const override { return std::to_string(R::of(o)); }
  bool parse(TrainOptions& o, const std::string& text) const override {
    T v{};
    // Digits with an optional sign ("+5" as strtoll reads it); no sign on an unsigned field.
    const char* begin = text.data() + (text.size() > 1 && text[0] == '+' && std::is_signed_v<T>);
    const char* end_of_text = text.data() + text.size();
    if (begin == end_of_text || *begin == '+' || (std::is_unsigned_v<T> && *begin == '-')) return false;
    const auto [end, ec] = std::from_chars(begin, end_of_text, v);
    if (ec != std::errc() || end != end_of_text) return false;
    R::of(o) = v;
    return true;
  }
  bool in_range(const TrainOptions& o) const override {
    if constexpr (std::is_unsigned_v<T>)
      return true;
    else
      return R::of(o) >= lo && R::of(o) <= hi;
  }
  std::string expected() const override {
    if constexpr (std::is_unsigned_v<T>)
      return "an integer in [0, " + std::to_string(std::numeric_limits<T>::max()) + "]";
    else
      return hi == INT64_MAX ? "an integer of at least " + std::to_string(lo)
                             : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  Json json(const TrainOptions& o) const override { return R::of(o); }
  // An integer that fits T exactly: no wrap-around of -1 into an unsigned, no truncation.
  std::string read(TrainOptions& o, const Json& v) const override {
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                      : v.is_number_integer()
                          ? std::is_signed_v<T> && v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max())
                          : false;
    if (!fits) return std::is_signed_v<T> ? "an integer in range" : "a non-negative integer in range";
    R::of(o) = v.get<T>();
    return "";
  }
};

// A finite double in [lo, hi], either end open.
template <class Get>
struct RealField : FieldBase<Get> {
  using R = Reach<Get>;
  double lo, hi;
  bool lo_open, hi_open;
  RealField(double lo_, double hi_, bool lo_open_, bool hi_open_)
      : lo(lo_), hi(hi_), lo_open(lo_open_), hi_open(hi_open_) {}
  std::string text(const TrainOptions& o) const override { return exact_decimal(R::of(o)); }
  bool parse(TrainOptions& o, const std::string& text) const override {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') return false;
    R::of(o) = v;
    return true;
  }
  bool in_range(const TrainOptions& o) const override {
    const double v = R::of(o);
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string expected() const override {
    if (std::isinf(hi)) return "a finite number " + std::string(lo_open ? "above " : "of at least ") + number(lo);
    return "a finite number in " + std::string(lo_open ? "(" : "[") + number(lo) + ", " + number(hi) +
           (hi_open ? ")" : "]");
  }
  Json json(const TrainOptions& o) const override { return R::of(o); }
  std::string read(TrainOptions& o, const Json& v) const override {
    if (!v.is_number()) return "a number";
    R::of(o) = v.get<double>();
    return "";
  }
};

// A string, one of `choices` when there are any.
template <class Get>
struct TextField : FieldBase<Get> {
  using R = Reach<Get>;
  std::vector<std::string> choices;
  explicit TextField(std::vector<std::string> c = {}) : choices(std::move(c)) {}
  std::string text(const TrainOptions& o) const override { return R::of(o); }
  bool parse(TrainOptions& o, const std::string& text) const override {
    R::of(o) = text;
    return true;
  }
  bool in_range(const TrainOptions& o) const override {
    if (choices.empty()) return true;
    for (const auto& c : choices)
      if (c == R::of(o)) return true;
    return false;
  }
  std::string expected() const override {
    std::string s;
    for (size_t i = 0; i < choices.size(); ++i)
      s += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    return s;
  }
  Json json(const TrainOptions& o) const override { return R::of(o); }
  std::string read(TrainOptions& o, const Json& v) const override {
    if (!v.is_string()) return "a string";
    R::of(o) = v.get<std::string>();
    return "";
  }
};

// An enum named by `name` and read by `parse` (which throws Error naming the valid choices).
template <class Get, auto name, auto parse_name>
struct ChoiceField : FieldBase<Get> {
  using R = Reach<Get>;
  std::string text(const TrainOptions& o) const override { return name(R::of(o)); }
  bool parse(TrainOptions& o, const std::string& text) const override {
    R::of(o) = parse_name(text);
    return true;
  }
  bool in_range(const TrainOptions&) const override { return true; }
  std::string expected() const override { return ""; }
  Json json(const TrainOptions& o) const override { return name(R::of(o)); }
  std::string read(TrainOptions& o, const Json& v) const override {
    if (!v.is_string()) return "a string";
    R::of(o) = parse_name(v.get<std::string>());
    return "";
  }
};

template <class Get>
struct FlagField : FieldBase<Get> {
  using R = Reach<Get>;
  std::string text(const TrainOptions& o) const override { return R::of(o) ? "on" : "off"; }
  bool parse(TrainOptions& o, const std::string& text) const override {
    if (text != "on" && text != "off") return false;
    R::of(o) = text == "on";
    return true;
  }
  bool in_range(const TrainOptions&) const override { return true; }
  std::string expected() const override { return "on or off"; }
  Json json(const TrainOptions& o) const override { return R::of(o); }
  std::string read(TrainOptions& o, const Json& v) const override {
    if (!v.is_boolean()) return "true or false";
    R::of(o) = v.get<bool>();
    return "";
  }
};

// Row builders: the type of the row follows from the field's kind.
#define TAPEGRAD_FIELD(path) decltype([](auto& o) -> auto& { return o.path; })

template <class Get>
std::shared_ptr<const OptionSpec::Field> int_field(int64_t lo, int64_t hi) {
  return std::make_shared<IntegerField<Get>>(lo, hi);
}
template <class Get>
std::shared_ptr<const OptionSpec::Field> real_field(double lo, double hi, bool hi_open = false) {
  return std::make_shared<RealField<Get>>(lo, hi, false, hi_open);
}
template <class Get>
std::shared_ptr<const OptionSpec::Field> above_field(double lo) {
  return std::make_shared<RealField<Get>>(lo, std::numeric_limits<double>::infinity(), true, false);
}
template <class Get>
std::shared_ptr<const OptionSpec::Field> text_field(std::vector<std::string> choices = {}) {
  return std::make_shared<TextField<Get>>(std::move(choices));
}
template <class Get, auto name, auto parse_name>
std::shared_ptr<const OptionSpec::Field> choice_field() {
  return std::make_shared<ChoiceField<Get, name, parse_name>>();
}
template <class Get>
std::shared_ptr<const OptionSpec::Field> flag_field() {
  return std::make_shared<FlagField<Get>>();
}

constexpr int64_t kSteps = int64_t(1) << 40;
constexpr OptionType kInteger = OptionType::integer, kReal = OptionType::real, kText = OptionType::text,
                     kPath = OptionType::path, kFlag = OptionType::flag;
constexpr OptionScope kRun = OptionScope::run, kTrainOnly = OptionScope::train;
// The data layer's limit on task lengths (data::validate_task_options checks it too).
constexpr int64_t kTaskLen = 4096;
constexpr bool kResumable = true, kFixed = false, kShown = true, kInHelp = false;
// A row added after checkpoints were first written (OptionSpec::default_when_absent).
constexpr bool kAbsentIsDefault = true;

}  // namespace

const std::vector<OptionSpec>& option_table() {
  // flag, JSON key, key before the table, type, scope, resumable, --help shows the default, help, field.
  static const std::vector<OptionSpec> table = {
      {"--model", "model.model", "", kText, kRun, kFixed, kShown,
       "transformer | attention-rnn | rnn | gpt (a decoder-only language model: needs --text)",
       choice_field<TAPEGRAD_FIELD(model.kind), models::model_name, models::parse_model>()},
      {"--task", "task", "", kText, kRun, kFixed, kShown, "Built-in task: copy, reverse, sort, recall, rotate",
       text_field<TAPEGRAD_FIELD(task)>()},
      {"--min-len", "min_len", "task_min_len", kInteger, kRun, kFixed, kShown, "Shortest task source",
       int_field<TAPEGRAD_FIELD(task_options.min_len)>(1, kTaskLen)},
      {"--max-len", "max_len", "task_max_len", kInteger, kRun, kFixed, kShown, "Longest task source",
       int_field<TAPEGRAD_FIELD(task_options.max_len)>(1, kTaskLen)},
      {"--symbols", "symbols", "task_symbols", kInteger, kRun, kFixed, kShown, "Distinct task symbols (at most 26)",
       int_field<TAPEGRAD_FIELD(task_options.symbols)>(1, 26)},
      {"--train", "train", "train_file", kPath, kRun, kFixed, kInHelp,
       "TSV file of source<TAB>target lines (instead of --task); every line is data ('#' too), blank lines "
       "are skipped and counted",
       text_field<TAPEGRAD_FIELD(train)>()},
      {"--valid", "valid", "valid_file", kPath, kRun, kFixed, kInHelp,
       "Held-out TSV file (default: hold out --valid-fraction of --train)", text_field<TAPEGRAD_FIELD(valid)>()},
      {"--valid-fraction", "valid_fraction", "", kReal, kRun, kFixed, kShown,
       "Fraction of --train held out without --valid", real_field<TAPEGRAD_FIELD(valid_fraction)>(0, 1, true)},
      {"--tokens", "tokens", "tokenization", kText, kRun, kFixed, kShown,
       "TSV tokenisation: chars | whitespace | sentencepiece (subword pieces: a model trained on the "
       "training split, or --spm-model; stored in the checkpoint); --text: chars | sentencepiece",
       choice_field<TAPEGRAD_FIELD(tokens), data::tokenization_name, data::parse_tokenization>()},
      {"--text", "text", "", kPath, kRun, kFixed, kInHelp,
       "Plain-text file for --model gpt (instead of --task or --train): read whole, tokenised by characters "
       "(or --tokens sentencepiece); the first 90% of its characters trains, the last 10% validates",
       text_field<TAPEGRAD_FIELD(text)>(), kAbsentIsDefault},
      {"--block-size", "block_size", "", kInteger, kRun, kFixed, kShown,
       "--text: tokens per training block, the gpt's context length",
       int_field<TAPEGRAD_FIELD(block_size)>(1, kTaskLen * 16), kAbsentIsDefault},
      {"--vocab-size", "vocab_size", "", kInteger, kRun, kFixed, kShown,
       "SentencePiece pieces per trained model, the 4 specials included (--tokens sentencepiece)",
       int_field<TAPEGRAD_FIELD(vocab_size)>(5, int64_t(1) << 20), kAbsentIsDefault},
      {"--spm-type", "spm_type", "", kText, kRun, kFixed, kShown,
       "SentencePiece algorithm: unigram | bpe (--tokens sentencepiece)",
       choice_field<TAPEGRAD_FIELD(spm_type), data::sentencepiece_type_name, data::parse_sentencepiece_type>(),
       kAbsentIsDefault},
      {"--spm-model", "spm_model", "", kPath, kRun, kFixed, kInHelp,
       "An existing SentencePiece .model (ids 0-3 <pad> <bos> <eos> <unk>) instead of training one "
       "(--tokens sentencepiece)",
       text_field<TAPEGRAD_FIELD(spm_model)>(), kAbsentIsDefault},
      {"--spm-sides", "spm_sides", "", kText, kRun, kFixed, kShown,
       "joint: one SentencePiece model for source and target; separate: one per side, sharing one "
       "vocabulary (the source model's pieces, then the target model's new ones)",
       text_field<TAPEGRAD_FIELD(spm_sides)>({"joint", "separate"}), kAbsentIsDefault},
      {"--batch-size", "batch_size", "", kInteger, kRun, kFixed, kShown, "Sequences per step",
       int_field<TAPEGRAD_FIELD(batch_size)>(1, int64_t(1) << 20)},
      {"--batch-tokens", "batch_tokens", "", kInteger, kRun, kFixed, kInHelp,
       "Batches by padded tokens instead of --batch-size: each step takes as many examples as fit N "
       "positions (batch size x the longer of longest source and longest target + 1), length-bucketed "
       "(0: off)",
       int_field<TAPEGRAD_FIELD(batch_tokens)>(0, int64_t(1) << 30), kAbsentIsDefault},
      {"--optimizer", "optimizer", "", kText, kRun, kFixed, kShown, "adamw | adam | sgd",
       text_field<TAPEGRAD_FIELD(optimizer)>({"adamw", "adam", "sgd"})},
      {"--lr", "lr", "", kReal, kRun, kFixed, kShown, "Peak learning rate", above_field<TAPEGRAD_FIELD(lr)>(0)},
      {"--schedule", "schedule", "", kText, kRun, kFixed, kShown,
       "Learning-rate schedule: cosine (linear warm-up to --lr, then cosine annealing to 0 at the last step), "
       "inverse_sqrt (linear warm-up to --lr, then --lr * sqrt(warmup / step)), constant (--lr at every "
       "step: no warm-up unless --warmup is given)",
       choice_field<TAPEGRAD_FIELD(schedule), optim::schedule_name, optim::parse_schedule>()},
      {"--warmup", "warmup", "", kInteger, kRun, kFixed, kInHelp,
       "Linear warm-up steps from 0 to --lr (default: 0 with --schedule constant, else 200)",
       int_field<TAPEGRAD_FIELD(warmup)>(0, kSteps)},
      {"--weight-decay", "weight_decay", "", kReal, kRun, kFixed, kShown, "Weight decay (decoupled for adamw)",
       real_field<TAPEGRAD_FIELD(weight_decay)>(0, 1e3)},
      {"--decay", "decay", "", kText, kRun, kFixed, kShown,
       "Which parameters --weight-decay applies to: all | matrices (only those of 2 or more dimensions: "
       "no decay on biases and norm scales, nanoGPT's parameter groups)",
       text_field<TAPEGRAD_FIELD(decay)>({"all", "matrices"}), kAbsentIsDefault},
      {"--beta2", "beta2", "", kReal, kRun, kFixed, kShown,
       "adam and adamw: decay rate of the second-moment estimate (beta1 is 0.9)",
       real_field<TAPEGRAD_FIELD(beta2)>(0, 1, true), kAbsentIsDefault},
      {"--adam-eps", "adam_eps", "", kReal, kRun, kFixed, kShown, "adam and adamw: epsilon added to the root of the second moment",
       above_field<TAPEGRAD_FIELD(adam_eps)>(0), kAbsentIsDefault},
      {"--min-lr", "min_lr", "", kReal, kRun, kFixed, kShown,
       "--schedule cosine: the learning rate at the last step (at most --lr)",
       real_field<TAPEGRAD_FIELD(min_lr)>(0, 1e30), kAbsentIsDefault},
      {"--momentum", "momentum", "", kReal, kRun, kFixed, kShown, "SGD momentum",
       real_field<TAPEGRAD_FIELD(momentum)>(0, 1, true)},
      {"--clip", "clip", "clip_norm", kReal, kRun, kFixed, kShown, "Clip gradients to this global L2 norm (0: off)",
       real_field<TAPEGRAD_FIELD(clip)>(0, 1e30)},
      {"--label-smoothing", "label_smoothing", "", kReal, kRun, kFixed, kShown, "Label smoothing epsilon",
       real_field<TAPEGRAD_FIELD(label_smoothing)>(0, 1, true)},
      {"--layers", "model.layers", "", kInteger, kRun, kFixed, kShown, "Layers per side (encoder and decoder)",
       int_field<TAPEGRAD_FIELD(model.layers)>(1, INT64_MAX)},
      {"--d-model", "model.d_model", "", kInteger, kRun, kFixed, kShown, "Model / embedding width",
       int_field<TAPEGRAD_FIELD(model.d_model)>(1, INT64_MAX)},
      {"--heads", "model.heads", "", kInteger, kRun, kFixed, kShown, "Attention heads (transformer)",
       int_field<TAPEGRAD_FIELD(model.heads)>(1, INT64_MAX)},
      {"--d-ff", "model.d_ff", "", kInteger, kRun, kFixed, kShown, "Feed-forward width (transformer)",
       int_field<TAPEGRAD_FIELD(model.d_ff)>(1, INT64_MAX)},
      {"--dropout", "model.dropout", "", kReal, kRun, kFixed, kInHelp,
       "Dropout probability (default: 0 for a built-in task, whose data is unlimited and fresh every step; "
       "0.1 for TSV data)",
       real_field<TAPEGRAD_FIELD(model.dropout)>(0, 1, true)},
      {"--positional", "model.positional", "", kText, kRun, kFixed, kShown,
       "sinusoidal | learned | none (transformer)",
       choice_field<TAPEGRAD_FIELD(model.positional), nn::positional_name, nn::parse_positional>()},
      {"--pre-ln", "model.norm_first", "", kFlag, kRun, kFixed, kInHelp,
       "Layer norm before each sub-layer instead of after (transformer)", flag_field<TAPEGRAD_FIELD(model.norm_first)>()},
      {"--tie-embeddings", "model.tie_embeddings", "", kFlag, kRun, kFixed, kInHelp,
       "One table for the source embedding, the target embedding and the output projection (logits = x E^T, "
       "no bias), as in the paper; source and target share one vocabulary, so all three are tied "
       "(transformer). Default: untied, two embeddings and an output projection with its own weight and bias",
       flag_field<TAPEGRAD_FIELD(model.tie_embeddings)>()},
      {"--checkpoint-layers", "model.checkpoint_layers", "", kFlag, kRun, kFixed, kInHelp,
       "Activation checkpointing (transformer, gpt): a training step keeps only each layer's input and "
       "recomputes the layer in backward, with the same dropout masks; less memory, more time, the same "
       "bits",
       flag_field<TAPEGRAD_FIELD(model.checkpoint_layers)>()},
      {"--activation", "model.activation", "", kText, kRun, kFixed, kShown,
       "Feed-forward activation (transformer): relu | gelu-tanh (the tanh approximation, PyTorch's "
       "gelu(approximate='tanh'); 'gelu' is an alias of it) | gelu-exact (x Phi(x) with erf, PyTorch's "
       "default gelu)",
       choice_field<TAPEGRAD_FIELD(model.activation), nn::activation_name, nn::parse_activation>()},
      {"--rnn-cell", "model.rnn_cell", "", kText, kRun, kFixed, kShown, "elman | gru | lstm (rnn models)",
       choice_field<TAPEGRAD_FIELD(model.cell), nn::cell_name, nn::parse_cell>()},
      {"--hidden", "model.hidden", "", kInteger, kRun, kFixed, kShown, "RNN hidden size",
       int_field<TAPEGRAD_FIELD(model.hidden)>(1, INT64_MAX)},
      {"--attention", "model.attention", "", kText, kRun, kFixed, kShown,
       "Attention score (attention-rnn): additive (Bahdanau, v^T tanh(W_q s + W_k h)) | general (Luong, "
       "s^T W h) | dot (Luong, s^T h, no parameters). Checkpoints from before general existed called it "
       "dot; they load as general",
       choice_field<TAPEGRAD_FIELD(model.score), nn::score_name, nn::parse_score>()},
      {"--threads", "threads", "", kInteger, kRun, kResumable, kShown, "Kernel threads (0: all cores)",
       int_field<TAPEGRAD_FIELD(threads)>(0, 1024)},
      {"--seed", "seed", "", kInteger, kRun, kFixed, kShown,
       "Seed for initialisation, data and dropout (an unsigned 64-bit integer)", int_field<TAPEGRAD_FIELD(seed)>(0, 0)},
      {"--steps", "steps", "", kInteger, kTrainOnly, kResumable, kShown, "Training steps (total, also when resuming)",
       int_field<TAPEGRAD_FIELD(steps)>(0, kSteps)},
      {"--out", "", "", kPath, kTrainOnly, kResumable, kInHelp,
       "Directory for checkpoints, metrics.csv, samples.txt and config.json", text_field<TAPEGRAD_FIELD(out_dir)>()},
      {"--resume", "", "", kPath, kTrainOnly, kResumable, kInHelp,
       "Continue training from this checkpoint directory, with its options; only the options named at the end "
       "of this help may be given differently (--out DIR continues into DIR, leaving the original as it is)",
       text_field<TAPEGRAD_FIELD(resume_dir)>()},
      {"--overwrite", "", "", kFlag, kTrainOnly, kResumable, kInHelp,
       "Replace the checkpoint already in --out (refused otherwise)", flag_field<TAPEGRAD_FIELD(overwrite)>()},
      {"--detect-anomaly", "", "", kFlag, kTrainOnly, kResumable, kInHelp,
       "Check every op's output and every gradient for NaN/Inf; stop at the first, naming the op and tape "
       "entry (slower)",
       flag_field<TAPEGRAD_FIELD(detect_anomaly)>()},
      {"--eval-every", "eval_every", "", kInteger, kTrainOnly, kResumable, kShown,
       "Validate every N steps (0: only at the end)", int_field<TAPEGRAD_FIELD(eval_every)>(0, INT64_MAX)},
      {"--log-every", "log_every", "", kInteger, kTrainOnly, kResumable, kShown, "Log a line (and a CSV row) every N steps",
       int_field<TAPEGRAD_FIELD(log_every)>(1, INT64_MAX)},
      {"--save-every", "save_every", "", kInteger, kTrainOnly, kResumable, kShown,
       "Checkpoint every N steps (and at the end; 0: only at the end)",
       int_field<TAPEGRAD_FIELD(save_every)>(0, INT64_MAX)},
      {"--valid-size", "valid_size", "", kInteger, kTrainOnly, kFixed, kShown,
       "Held-out examples of a built-in task (0: none); --text: validation blocks, evenly spaced over the last 10%", int_field<TAPEGRAD_FIELD(valid_size)>(0, int64_t(1) << 24)},
      {"--decode-max-len", "decode_max_len", "", kInteger, kTrainOnly, kFixed, kInHelp,
       "Longest output decoded at validation (default: the longest target in the data + 8)",
       int_field<TAPEGRAD_FIELD(decode_max_len)>(0, int64_t(1) << 24)},
      {"--bucket-mb", "", "", kReal, kTrainOnly, kResumable, kShown,
       "Under mpirun: sum gradients across ranks in buckets of this many MiB, each sent as soon as backward "
       "has completed it",
       real_field<TAPEGRAD_FIELD(bucket_mb)>(1.0 / 1024, 65536)},
      {"--deterministic-allreduce", "", "", kFlag, kTrainOnly, kResumable, kInHelp,
       "Under mpirun: gather the gradients and sum them in rank order (identical bits on every run; more "
       "traffic)",
       flag_field<TAPEGRAD_FIELD(deterministic_allreduce)>()},
  };
  return table;
}

#undef TAPEGRAD_FIELD

}  // namespace tapegrad::train
