// TrainOptions <-> JSON: stored in checkpoints so that --resume and `tapegrad eval` know what was trained.
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

std::string TrainOptions::to_json() const {
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
  return j.dump();
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

}  // namespace tapegrad::train
