// ModelConfig <-> JSON (stored in checkpoint metadata), validation, and the model factory.
#include <nlohmann/json.hpp>

#include "src/models/models_internal.hpp"
#include "tapegrad/models/gpt.hpp"

namespace tapegrad::models {

const char* model_name(ModelKind k) {
  switch (k) {
    case ModelKind::rnn: return "rnn";
    case ModelKind::attention_rnn: return "attention-rnn";
    case ModelKind::transformer: return "transformer";
    case ModelKind::gpt: return "gpt";
  }
  return "?";
}

ModelKind parse_model(const std::string& name) {
  if (name == "rnn" || name == "seq2seq") return ModelKind::rnn;
  if (name == "attention-rnn" || name == "attention_rnn" || name == "attention") return ModelKind::attention_rnn;
  if (name == "transformer") return ModelKind::transformer;
  if (name == "gpt") return ModelKind::gpt;
  throw Error("model: unknown kind '" + name + "' (expected transformer, attention-rnn, rnn or gpt)");
}

std::string ModelConfig::to_json() const {
  nlohmann::json j = {
      {"model", model_name(kind)}, {"vocab_size", vocab_size}, {"d_model", d_model},
      {"layers", layers}, {"dropout", dropout}, {"heads", heads}, {"d_ff", d_ff},
      {"positional", nn::positional_name(positional)}, {"norm_first", norm_first},
      {"activation", nn::activation_name(activation)}, {"max_len", max_len},
      {"rnn_cell", nn::cell_name(cell)}, {"hidden", hidden}, {"attention", nn::score_name(score)},
      {"tie_embeddings", tie_embeddings}, {"checkpoint_layers", checkpoint_layers}, {"version", kJsonVersion},
  };
  return j.dump();
}

namespace {

// The value of `key` in the config object, given to `parse`; a missing key or a value of the wrong
// type is an Error naming the key.
template <class F>
auto config_field(const nlohmann::json& j, const char* key, F&& parse) {
  const auto it = j.find(key);
  if (it == j.end()) throw Error(std::string("model config: no field '") + key + "'");
  try {
    return parse(*it);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model config: field '") + key + "': " + e.what());
  }
}

int64_t integer_field(const nlohmann::json& j, const char* key) {
  return config_field(j, key, [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      throw Error(std::string("model config: field '") + key + "' is " + v.dump() +
                  "; expected a 64-bit integer");
    return v.get<int64_t>();
  });
}

std::string string_field(const nlohmann::json& j, const char* key) {
  return config_field(j, key, [](const nlohmann::json& v) { return v.get<std::string>(); });
}

bool bool_field(const nlohmann::json& j, const char* key) {
  return config_field(j, key, [](const nlohmann::json& v) { return v.get<bool>(); });
}

// The attention score as stored by a config of `version`: version 1 had no "general" and stored
// that score (s^T W h_j) as "dot" (alias "luong").
nn::AttentionScore stored_score(const std::string& name, int64_t version) {
  if (version == 1 && (name == "dot" || name == "luong")) return nn::AttentionScore::general;
  return nn::parse_score(name);
}

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model config: invalid JSON: ") + e.what());
  }
  if (!j.is_object()) throw Error(std::string("model config: expected a JSON object, got ") + j.type_name());
  const int64_t version = j.contains("version") ? integer_field(j, "version") : 1;
  if (version < 1 || version > kJsonVersion)
    throw Error("model config: version " + std::to_string(version) + " is not one this build reads (1 to " +
                std::to_string(kJsonVersion) + ")");
  ModelConfig c;
  c.kind = parse_model(string_field(j, "model"));
  c.vocab_size = integer_field(j, "vocab_size");
  c.d_model = integer_field(j, "d_model");
  c.layers = integer_field(j, "layers");
  c.dropout = config_field(j, "dropout", [](const nlohmann::json& v) { return v.get<double>(); });
  c.heads = integer_field(j, "heads");
  c.d_ff = integer_field(j, "d_ff");
  c.positional = nn::parse_positional(string_field(j, "positional"));
  c.norm_first = bool_field(j, "norm_first");
  c.activation = nn::parse_activation(string_field(j, "activation"));
  c.max_len = integer_field(j, "max_len");
  c.cell = nn::parse_cell(string_field(j, "rnn_cell"));
  c.hidden = integer_field(j, "hidden");
  c.score = stored_score(string_field(j, "attention"), version);
  c.tie_embeddings = version >= 2 && bool_field(j, "tie_embeddings");
  // No version of its own: it changes no result, so a config without it (any version) means off.
  c.checkpoint_layers = j.contains("checkpoint_layers") && bool_field(j, "checkpoint_layers");
  c.validate(ConfigNames::json);
  return c;
}

void ModelConfig::validate(ConfigNames names) const {
  const bool cli = names == ConfigNames::cli;
  auto field = [&](const char* json, const char* option, const std::string& value) {
    return std::string(cli ? option : json) + " " + value;
  };
  auto positive = [&](int64_t v, const char* json, const char* option) {
    if (v <= 0) throw Error(field(json, option, std::to_string(v)) + ": must be positive");
  };
  positive(vocab_size, "vocab_size", "vocabulary size");
  positive(d_model, "d_model", "--d-model");
  positive(layers, "layers", "--layers");
  positive(heads, "heads", "--heads");
  positive(d_ff, "d_ff", "--d-ff");
  positive(max_len, "max_len", "max_len");
  positive(hidden, "hidden", "--hidden");
  if (vocab_size < 5)
    throw Error(field("vocab_size", "vocabulary size", std::to_string(vocab_size)) +
                ": must include the 4 specials and at least one token");
  if (!(dropout >= 0 && dropout < 1))
    throw Error(field("dropout", "--dropout", std::to_string(dropout)) + ": must be in [0, 1)");
  if (max_len > kMaxPositions)
    throw Error(field("max_len", "max_len", std::to_string(max_len)) + ": at most " +
                std::to_string(kMaxPositions) + " positions");
  if (tie_embeddings && kind != ModelKind::transformer)
    throw Error(std::string(cli ? "--tie-embeddings" : "tie_embeddings") +
                ": only for the transformer, not " + model_name(kind));
  if (checkpoint_layers && kind != ModelKind::transformer && kind != ModelKind::gpt)
    throw Error(std::string(cli ? "--checkpoint-layers" : "checkpoint_layers") +
                ": only for the transformer and gpt (their layers are checkpointed), not " + model_name(kind));
  if ((kind == ModelKind::transformer || kind == ModelKind::gpt) && d_model % heads != 0)
    throw Error(field("d_model", "--d-model", std::to_string(d_model)) + ": not divisible by " +
                field("heads", "--heads", std::to_string(heads)));
}

std::unique_ptr<Seq2Seq> make_model(const ModelConfig& config, uint64_t seed) {
  check_config(config, ConfigNames::cli);
  if (config.kind == ModelKind::transformer) return make_transformer(config, seed);
  if (config.kind == ModelKind::gpt) return std::make_unique<Gpt>(config, seed);
  return make_rnn_seq2seq(config, seed);
}

}  // namespace tapegrad::models
