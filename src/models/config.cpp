// ModelConfig <-> JSON (stored in checkpoint metadata), validation, and the model factory.
#include <nlohmann/json.hpp>

#include "src/models/models_internal.hpp"

namespace tapegrad::models {

const char* model_name(ModelKind k) {
  switch (k) {
    case ModelKind::rnn: return "rnn";
    case ModelKind::attention_rnn: return "attention-rnn";
    case ModelKind::transformer: return "transformer";
  }
  return "?";
}

ModelKind parse_model(const std::string& name) {
  if (name == "rnn" || name == "seq2seq") return ModelKind::rnn;
  if (name == "attention-rnn" || name == "attention_rnn" || name == "attention") return ModelKind::attention_rnn;
  if (name == "transformer") return ModelKind::transformer;
  throw Error("model: unknown kind '" + name + "' (expected transformer, attention-rnn or rnn)");
}

std::string ModelConfig::to_json() const {
  nlohmann::json j = {
      {"model", model_name(kind)}, {"vocab_size", vocab_size}, {"d_model", d_model},
      {"layers", layers}, {"dropout", dropout}, {"heads", heads}, {"d_ff", d_ff},
      {"positional", nn::positional_name(positional)}, {"norm_first", norm_first},
      {"activation", nn::activation_name(activation)}, {"max_len", max_len},
      {"rnn_cell", nn::cell_name(cell)}, {"hidden", hidden}, {"attention", nn::score_name(score)},
  };
  return j.dump();
}

ModelConfig ModelConfig::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model config: invalid JSON: ") + e.what());
  }
  ModelConfig c;
  try {
    c.kind = parse_model(j.at("model").get<std::string>());
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.layers = j.at("layers").get<int64_t>();
    c.dropout = j.at("dropout").get<double>();
    c.heads = j.at("heads").get<int64_t>();
    c.d_ff = j.at("d_ff").get<int64_t>();
    c.positional = nn::parse_positional(j.at("positional").get<std::string>());
    c.norm_first = j.at("norm_first").get<bool>();
    c.activation = nn::parse_activation(j.at("activation").get<std::string>());
    c.max_len = j.at("max_len").get<int64_t>();
    c.cell = nn::parse_cell(j.at("rnn_cell").get<std::string>());
    c.hidden = j.at("hidden").get<int64_t>();
    c.score = nn::parse_score(j.at("attention").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model config: ") + e.what());
  }
  c.validate();
  return c;
}

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) throw Error(std::string("model config: ") + name + " must be positive, got " + std::to_string(v));
  };
  positive(vocab_size, "vocab_size");
  positive(d_model, "d_model");
  positive(layers, "layers");
  positive(heads, "heads");
  positive(d_ff, "d_ff");
  positive(max_len, "max_len");
  positive(hidden, "hidden");
  if (vocab_size < 5) throw Error("model config: vocab_size must include the 4 specials and a token");
  if (!(dropout >= 0 && dropout < 1)) throw Error("model config: dropout must be in [0, 1)");
  if (kind == ModelKind::transformer && d_model % heads != 0)
    throw Error("model config: d_model " + std::to_string(d_model) + " is not divisible by heads " +
                std::to_string(heads));
}

std::unique_ptr<Seq2Seq> make_model(const ModelConfig& config, uint64_t seed) {
  config.validate();
  if (config.kind == ModelKind::transformer) return make_transformer(config, seed);
  return make_rnn_seq2seq(config, seed);
}

}  // namespace tapegrad::models
