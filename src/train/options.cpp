// TrainOptions <-> JSON: stored in checkpoints so that --resume and `tapegrad eval` know what was trained.
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "src/train/train_internal.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

namespace {

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void require(bool ok, const std::string& option, const std::string& value, const std::string& expected) {
  if (!ok) throw Error(option + " " + value + ": expected " + expected);
}

void require_int(int64_t v, int64_t lo, int64_t hi, const std::string& option) {
  require(v >= lo && v <= hi, option, std::to_string(v),
          hi == INT64_MAX ? "an integer of at least " + std::to_string(lo)
                          : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// A finite number in [lo, hi] (or [lo, hi) when hi_open).
void require_real(double v, double lo, double hi, bool hi_open, const std::string& option) {
  const bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
  require(ok, option, number(v),
          "a finite number in [" + number(lo) + ", " + number(hi) + (hi_open ? ")" : "]"));
}

}  // namespace

void TrainOptions::validate() const {
  require(std::isfinite(lr) && lr > 0, "--lr", number(lr), "a finite number above 0");
  require_int(steps, 0, int64_t(1) << 40, "--steps");
  require_int(batch_size, 1, int64_t(1) << 20, "--batch-size");
  require_int(warmup, 0, int64_t(1) << 40, "--warmup");
  require_real(valid_fraction, 0, 1, true, "--valid-fraction");
  require_real(clip_norm, 0, 1e30, false, "--clip");
  require_real(label_smoothing, 0, 1, true, "--label-smoothing");
  require_real(weight_decay, 0, 1e3, false, "--weight-decay");
  require_real(momentum, 0, 1, true, "--momentum");
  require_real(model.dropout, 0, 1, true, "--dropout");
  require(optimizer == "adamw" || optimizer == "adam" || optimizer == "sgd", "--optimizer", optimizer,
          "adamw, adam or sgd");
  require_int(threads, 0, 1024, "--threads");
  require_int(valid_size, 0, int64_t(1) << 24, "--valid-size");
  require_int(eval_every, 0, INT64_MAX, "--eval-every");
  require_int(log_every, 1, INT64_MAX, "--log-every");
  require_int(save_every, 0, INT64_MAX, "--save-every");
  if (train_file.empty()) data::validate_task_options(task, task_options);
  if (!resume_dir.empty() && overwrite && (out_dir.empty() || out_dir == resume_dir))
    throw Error("--overwrite: cannot replace the checkpoint being resumed (--resume " + resume_dir +
                "); pass --out NEW_DIR to continue elsewhere");
}

const std::vector<std::string> kResumableOptions = {
    "--steps", "--threads", "--log-every", "--eval-every", "--save-every", "--out", "--resume"};

namespace {

// Every option that shapes the run, with how its value reads: what a resume compares.
using Field = std::function<std::string(const TrainOptions&)>;
const std::vector<std::pair<std::string, Field>>& run_shaping_options() {
  static const std::vector<std::pair<std::string, Field>> table = {
      {"--model", [](const TrainOptions& o) { return std::string(models::model_name(o.model.kind)); }},
      {"--task", [](const TrainOptions& o) { return o.task; }},
      {"--min-len", [](const TrainOptions& o) { return std::to_string(o.task_options.min_len); }},
      {"--max-len", [](const TrainOptions& o) { return std::to_string(o.task_options.max_len); }},
      {"--symbols", [](const TrainOptions& o) { return std::to_string(o.task_options.symbols); }},
      {"--train", [](const TrainOptions& o) { return o.train_file; }},
      {"--valid", [](const TrainOptions& o) { return o.valid_file; }},
      {"--valid-fraction", [](const TrainOptions& o) { return number(o.valid_fraction); }},
      {"--tokens",
       [](const TrainOptions& o) { return std::string(data::tokenization_name(o.tokenization)); }},
      {"--batch-size", [](const TrainOptions& o) { return std::to_string(o.batch_size); }},
      {"--optimizer", [](const TrainOptions& o) { return o.optimizer; }},
      {"--lr", [](const TrainOptions& o) { return number(o.lr); }},
      {"--schedule", [](const TrainOptions& o) { return std::string(optim::schedule_name(o.schedule)); }},
      {"--warmup", [](const TrainOptions& o) { return std::to_string(o.warmup); }},
      {"--weight-decay", [](const TrainOptions& o) { return number(o.weight_decay); }},
      {"--momentum", [](const TrainOptions& o) { return number(o.momentum); }},
      {"--clip", [](const TrainOptions& o) { return number(o.clip_norm); }},
      {"--label-smoothing", [](const TrainOptions& o) { return number(o.label_smoothing); }},
      {"--layers", [](const TrainOptions& o) { return std::to_string(o.model.layers); }},
      {"--d-model", [](const TrainOptions& o) { return std::to_string(o.model.d_model); }},
      {"--heads", [](const TrainOptions& o) { return std::to_string(o.model.heads); }},
      {"--d-ff", [](const TrainOptions& o) { return std::to_string(o.model.d_ff); }},
      {"--dropout", [](const TrainOptions& o) { return number(o.model.dropout); }},
      {"--positional",
       [](const TrainOptions& o) { return std::string(nn::positional_name(o.model.positional)); }},
      {"--pre-ln", [](const TrainOptions& o) { return std::string(o.model.norm_first ? "on" : "off"); }},
      {"--tie-embeddings",
       [](const TrainOptions& o) { return std::string(o.model.tie_embeddings ? "on" : "off"); }},
      {"--activation",
       [](const TrainOptions& o) { return std::string(nn::activation_name(o.model.activation)); }},
      {"--rnn-cell", [](const TrainOptions& o) { return std::string(nn::cell_name(o.model.cell)); }},
      {"--hidden", [](const TrainOptions& o) { return std::to_string(o.model.hidden); }},
      {"--attention", [](const TrainOptions& o) { return std::string(nn::score_name(o.model.score)); }},
      {"--seed", [](const TrainOptions& o) { return std::to_string(o.seed); }},
      {"--valid-size", [](const TrainOptions& o) { return std::to_string(o.valid_size); }},
  };
  return table;
}

}  // namespace

void TrainOptions::check_resume(const TrainOptions& saved) const {
  std::string conflicts;
  for (const auto& [name, value] : run_shaping_options()) {
    if (!given.count(name)) continue;
    const std::string want = value(*this), have = value(saved);
    const bool path = name == "--train" || name == "--valid";  // one file, however it was spelt
    if (want != have && !(path && absolute_path(want) == absolute_path(have)))
      conflicts += (conflicts.empty() ? "" : "; ") + name + " " + want + " (checkpoint: " + have + ")";
  }
  if (conflicts.empty()) return;
  std::string allowed;
  for (const auto& n : kResumableOptions) allowed += (allowed.empty() ? "" : ", ") + n;
  throw Error("--resume " + resume_dir + ": options conflict with the checkpoint: " + conflicts +
              ". A resumed run keeps the checkpoint's options; only " + allowed + " may change");
}

std::string TrainOptions::to_json(int indent) const {
  nlohmann::json j = {
      {"model", nlohmann::json::parse(model.to_json())},
      {"task", task},
      {"task_min_len", task_options.min_len},
      {"task_max_len", task_options.max_len},
      {"task_symbols", task_options.symbols},
      {"train_file", train_file},
      {"valid_file", valid_file},
      {"tokenization", data::tokenization_name(tokenization)},
      {"valid_fraction", valid_fraction},
      {"steps", steps},
      {"batch_size", batch_size},
      {"optimizer", optimizer},
      {"lr", lr},
      {"momentum", momentum},
      {"weight_decay", weight_decay},
      {"schedule", optim::schedule_name(schedule)},
      {"warmup", warmup},
      {"clip_norm", clip_norm},
      {"label_smoothing", label_smoothing},
      {"seed", seed},
      {"threads", threads},
      {"valid_size", valid_size},
      {"eval_every", eval_every},
      {"log_every", log_every},
      {"save_every", save_every},
      {"decode_max_len", decode_max_len},
  };
  return j.dump(indent);
}

namespace {

using Json = nlohmann::json;

const Json& field(const Json& j, const char* key) {
  if (!j.is_object())
    throw Error(std::string("training options: expected a JSON object, got ") + j.type_name());
  const auto it = j.find(key);
  if (it == j.end()) throw Error(std::string("training options: no field '") + key + "'");
  return *it;
}

[[noreturn]] void bad_field(const char* key, const Json& v, const char* expected) {
  throw Error(std::string("training options: field '") + key + "' is " + v.dump() + "; expected " + expected);
}

// An integer field that fits T exactly (no wrap-around of -1 into an unsigned, no truncation).
template <class T>
T integer(const Json& j, const char* key) {
  const Json& v = field(j, key);
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                    : v.is_number_integer()
                        ? std::is_signed_v<T> && v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                              v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max())
                        : false;
  if (!fits)
    bad_field(key, v, std::is_signed_v<T> ? "an integer in range" : "a non-negative integer in range");
  return v.get<T>();
}

double number(const Json& j, const char* key) {
  const Json& v = field(j, key);
  if (!v.is_number()) bad_field(key, v, "a number");
  return v.get<double>();
}

std::string text(const Json& j, const char* key) {
  const Json& v = field(j, key);
  if (!v.is_string()) bad_field(key, v, "a string");
  return v.get<std::string>();
}

// Runs f; an Error from parsing a named field's value gets the field's name.
template <class F>
auto named(const char* key, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(std::string("training options: field '") + key + "': " + e.what());
  }
}

}  // namespace

TrainOptions TrainOptions::from_json(const std::string& json_text) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    throw Error(std::string("training options: not valid JSON: ") + e.what());
  }
  TrainOptions o;
  o.model = named("model", [&] { return models::ModelConfig::from_json(field(j, "model").dump()); });
  o.task = text(j, "task");
  o.task_options.min_len = integer<int>(j, "task_min_len");
  o.task_options.max_len = integer<int>(j, "task_max_len");
  o.task_options.symbols = integer<int>(j, "task_symbols");
  o.train_file = text(j, "train_file");
  o.valid_file = text(j, "valid_file");
  o.tokenization = named("tokenization", [&] { return data::parse_tokenization(text(j, "tokenization")); });
  o.valid_fraction = number(j, "valid_fraction");
  o.steps = integer<int64_t>(j, "steps");
  o.batch_size = integer<int64_t>(j, "batch_size");
  o.optimizer = text(j, "optimizer");
  o.lr = number(j, "lr");
  o.momentum = number(j, "momentum");
  o.weight_decay = number(j, "weight_decay");
  o.schedule = named("schedule", [&] { return optim::parse_schedule(text(j, "schedule")); });
  o.warmup = integer<int64_t>(j, "warmup");
  o.clip_norm = number(j, "clip_norm");
  o.label_smoothing = number(j, "label_smoothing");
  o.seed = integer<uint64_t>(j, "seed");
  o.threads = integer<int>(j, "threads");
  o.valid_size = integer<int64_t>(j, "valid_size");
  o.eval_every = integer<int64_t>(j, "eval_every");
  o.log_every = integer<int64_t>(j, "log_every");
  o.save_every = integer<int64_t>(j, "save_every");
  o.decode_max_len = integer<int64_t>(j, "decode_max_len");
  return o;
}

namespace {

// The JSON type a value of `reference` (to_json's value for the key) accepts, as errors say it.
const char* json_kind(const Json& reference) {
  if (reference.is_boolean()) return "true or false";
  if (reference.is_string()) return "a string";
  if (reference.is_number_integer()) return "an integer";
  if (reference.is_number()) return "a number";
  return "an object";
}

bool same_kind(const Json& reference, const Json& v) {
  if (reference.is_boolean()) return v.is_boolean();
  if (reference.is_string()) return v.is_string();
  if (reference.is_number_integer()) return v.is_number_integer();
  if (reference.is_number()) return v.is_number();
  return v.is_object();
}

// Lays `file` over `base` (to_json of the defaults) key by key, one level into objects: every key of
// `file` must be one of `base`'s and of its JSON type (so an object only where `base` has one).
// Records the keys set in `keys`.
void overlay(Json& base, const Json& file, const std::string& source, const std::string& prefix,
             std::set<std::string>& keys) {
  if (!file.is_object()) throw Error(source + ": expected a JSON object, got " + file.type_name());
  for (const auto& [key, value] : file.items()) {
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    const auto it = base.find(key);
    if (it == base.end()) throw Error(source + ": unknown key '" + name + "'");
    if (!same_kind(*it, value))
      throw Error(source + ": key '" + name + "' is " + value.dump() + "; expected " + json_kind(*it));
    if (it->is_object())
      overlay(*it, value, source, name, keys);
    else
      *it = value, keys.insert(name);
  }
}

}  // namespace

TrainOptions TrainOptions::from_config_file(const std::string& path, std::set<std::string>* keys) {
  if (std::filesystem::is_directory(path)) throw IoError(path + ": is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open: " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json file;
  try {
    file = Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  Json merged = Json::parse(TrainOptions{}.to_json());
  std::set<std::string> set_keys;
  overlay(merged, file, path, "", set_keys);
  // The vocabulary size comes from the data; a placeholder passes the model config's checks.
  merged["model"]["vocab_size"] = 5;
  TrainOptions o;
  try {
    o = from_json(merged.dump());
    o.model.vocab_size = 0;
    o.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  if (keys) *keys = std::move(set_keys);
  return o;
}

}  // namespace tapegrad::train
