// What is generated from the option table (option_table.cpp): the rows' accessors, validation, the
// resume comparison, and TrainOptions <-> JSON (stored in checkpoints so that --resume and `tapegrad
// eval` know what was trained, and written as --out/config.json so that --config repeats a run). The
// command line registers the same rows (tools/cli/run_options.cpp). An option is one row of the table
// plus its field in TrainOptions and its use; the range a row states holds on the command line, in
// validate() and for a checkpoint's stored options alike.
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "src/train/option_field.hpp"
#include "src/train/train_internal.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

std::string OptionSpec::value(const TrainOptions& o) const { return field->text(o); }

void OptionSpec::check(const TrainOptions& o) const {
  if (!field->in_range(o)) throw Error(std::string(flag) + " " + value(o) + ": expected " + expected());
}

void OptionSpec::set(TrainOptions& o, const std::string& text) const {
  bool ok = false;
  try {
    ok = field->parse(o, text);
  } catch (const Error& e) {  // a choice's own message names the valid names
    throw Error(std::string(flag) + ": " + e.what());
  }
  if (!ok) throw Error(std::string(flag) + " " + text + ": expected " + expected());
  check(o);
}

void OptionSpec::copy(const TrainOptions& from, TrainOptions& to) const { field->copy(from, to); }

std::string OptionSpec::expected() const { return field->expected(); }

const std::vector<std::string> kResumableOptions = [] {
  std::vector<std::string> names;
  for (const OptionSpec& row : option_table())
    if (row.resumable) names.push_back(row.flag);
  return names;
}();

namespace {

// The SentencePiece options apply to --tokens sentencepiece alone, and a given model fixes what the
// training options would choose.
void check_tokenizer_options(const TrainOptions& o) {
  const TrainOptions defaults;
  std::string spm_option;  // the first SentencePiece option given a value of its own
  if (o.vocab_size != defaults.vocab_size)
    spm_option = "--vocab-size " + std::to_string(o.vocab_size);
  else if (o.spm_type != defaults.spm_type)
    spm_option = std::string("--spm-type ") + data::sentencepiece_type_name(o.spm_type);
  else if (o.spm_sides != defaults.spm_sides)
    spm_option = "--spm-sides " + o.spm_sides;
  if (o.tokens != data::Tokenization::sentencepiece) {
    if (!o.spm_model.empty()) spm_option = "--spm-model " + o.spm_model;
    if (!spm_option.empty())
      throw Error(spm_option + ": only with --tokens sentencepiece (the tokens are " +
                  data::tokenization_name(o.tokens) + ")");
    return;
  }
  if (o.train.empty() && o.text.empty())
    throw Error("--tokens sentencepiece: only with --train FILE or --text FILE (a built-in task has its own tokens)");
  // One text, one piece model: there are no sides to split.
  if (!o.text.empty() && (o.spm_sides != defaults.spm_sides || o.given.count("--spm-sides")))
    throw Error("--spm-sides " + o.spm_sides + ": only with --train (--text has no source and target sides)");
  if (!o.spm_model.empty() && !spm_option.empty())
    throw Error(spm_option + ": does not apply with --spm-model " + o.spm_model +
                " (the model fixes its pieces; it is one joint model)");
}

}  // namespace

void TrainOptions::validate() const {
  for (const OptionSpec& row : option_table()) row.check(*this);
  if (train.empty() && text.empty()) data::validate_task_options(task, task_options);
  const bool gpt = model.kind == models::ModelKind::gpt;
  if (!text.empty() && !train.empty()) throw Error("--text " + text + ": cannot be combined with --train (one data source)");
  if (gpt && text.empty())
    throw Error("--model gpt: a language model trains on text: pass --text FILE (not --task or --train)");
  if (!gpt && !text.empty())
    throw Error("--text " + text + ": only for --model gpt (the seq2seq models train on --task or --train)");
  if (!text.empty() && tokens == data::Tokenization::whitespace)
    throw Error("--tokens whitespace: --text is tokenised by characters (chars) or SentencePiece pieces "
                "(sentencepiece)");
  if (gpt)
    for (const char* fixed : {"--d-ff", "--positional", "--pre-ln", "--activation", "--tie-embeddings"})
      if (given.count(fixed))
        throw Error(std::string(fixed) + ": fixed by --model gpt (GPT-2's: MLP 4 x --d-model, learned positions, "
                    "pre-LN, exact GELU, tied embeddings)");
  if (min_lr > lr) throw Error("--min-lr " + exact_decimal(min_lr) + ": above --lr " + exact_decimal(lr));
  check_tokenizer_options(*this);
  if (batch_tokens > 0 && train.empty())
    throw Error("--batch-tokens " + std::to_string(batch_tokens) +
                ": only with --train (a built-in task samples --batch-size examples per step)");
  if (batch_tokens > 0 && given.count("--batch-size"))
    throw Error("--batch-tokens " + std::to_string(batch_tokens) + ": replaces --batch-size; give one of them");
  if (!resume_dir.empty() && overwrite && (out_dir.empty() || out_dir == resume_dir))
    throw Error("--overwrite: cannot replace the checkpoint being resumed (--resume " + resume_dir +
                "); pass --out NEW_DIR to continue elsewhere");
}

void TrainOptions::check_resume(const TrainOptions& saved) const {
  std::string conflicts;
  for (const OptionSpec& row : option_table()) {
    if (row.resumable || !given.count(row.flag)) continue;
    const std::string want = row.value(*this), have = row.value(saved);
    // A path names one file, however it was spelt.
    if (want != have && !(row.type == OptionType::path && absolute_path(want) == absolute_path(have)))
      conflicts += (conflicts.empty() ? "" : "; ") + std::string(row.flag) + " " + want + " (checkpoint: " + have + ")";
  }
  if (conflicts.empty()) return;
  std::string allowed;
  for (const auto& n : kResumableOptions) allowed += (allowed.empty() ? "" : ", ") + n;
  throw Error("--resume " + resume_dir + ": options conflict with the checkpoint: " + conflicts +
              ". A resumed run keeps the checkpoint's options; only " + allowed + " may change");
}

namespace {

// A row stored at the top level of the options object; the model's rows ("model.d_model") are in
// the object ModelConfig::to_json writes.
bool top_level(const OptionSpec& row) { return *row.key && !std::strchr(row.key, '.'); }

}  // namespace

std::string TrainOptions::to_json(int indent) const {
  Json j = Json::object();
  for (const OptionSpec& row : option_table())
    if (top_level(row)) j[row.key] = row.field->json(*this);
  j["model"] = Json::parse(model.to_json());
  return j.dump(indent);
}

namespace {

// The value of `key` in the options object `j`, or of `old_key` in a file written before the table.
const Json* find_field(const Json& j, const char* key, const char* old_key) {
  if (const auto it = j.find(key); it != j.end()) return &*it;
  if (*old_key)
    if (const auto it = j.find(old_key); it != j.end()) return &*it;
  return nullptr;
}

}  // namespace

TrainOptions TrainOptions::from_json(const std::string& json_text) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    throw Error(std::string("training options: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error(std::string("training options: expected a JSON object, got ") + j.type_name());
  auto bad_field = [](const std::string& key, const Json& v, const std::string& expected) {
    return Error("training options: field '" + key + "' is " + v.dump() + "; expected " + expected);
  };
  TrainOptions o;
  const Json* model = find_field(j, "model", "");
  if (!model) throw Error("training options: no field 'model'");
  try {
    o.model = models::ModelConfig::from_json(model->dump());
  } catch (const Error& e) {
    throw Error(std::string("training options: field 'model': ") + e.what());
  }
  for (const OptionSpec& row : option_table()) {
    if (!top_level(row)) continue;
    const Json* v = find_field(j, row.key, row.old_key);
    if (!v && row.default_when_absent) continue;
    if (!v) throw Error(std::string("training options: no field '") + row.key + "'");
    std::string expected;
    try {
      expected = row.field->read(o, *v);
    } catch (const Error& e) {  // a choice's own message
      throw Error(std::string("training options: field '") + row.key + "': " + e.what());
    }
    if (!expected.empty()) throw bad_field(row.key, *v, expected);
  }
  // The table's ranges hold for stored options too: a checkpoint saying batch_size 10^12 is refused
  // here, not by a run that never finishes its first step.
  for (const OptionSpec& row : option_table())
    if (*row.key && !row.field->in_range(o)) throw bad_field(row.key, row.field->json(o), row.expected());
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
// `file` must be one of `base`'s (or a key of before the table, read as its new name) and of its JSON
// type (so an object only where `base` has one). Records the keys set in `keys`.
void overlay(Json& base, const Json& file, const std::string& source, const std::string& prefix,
             std::set<std::string>& keys) {
  if (!file.is_object()) throw Error(source + ": expected a JSON object, got " + file.type_name());
  for (const auto& [file_key, value] : file.items()) {
    std::string key = file_key;
    if (prefix.empty())
      for (const OptionSpec& row : option_table())
        if (*row.old_key && key == row.old_key) {
          if (file.contains(row.key))
            throw Error(source + ": key '" + key + "' is the old name of '" + row.key + "', which is also given");
          key = row.key;
        }
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
