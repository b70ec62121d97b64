// Checkpoint directories: model.safetensors + optimizer.safetensors (see train.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>

#include "src/train/run_directory.hpp"
#include "src/train/train_internal.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"

namespace tapegrad::train {

namespace {

// Format 2 files carry the io layer's checksum (io.hpp) and must; format 1, written before it, has
// none and still loads (unverified).
constexpr const char* kFormat = "tapegrad-checkpoint-2";
constexpr const char* kFormatBeforeChecksum = "tapegrad-checkpoint-1";
// Position tables (built from max_len, not stored) may take at most this much beyond the file's own
// parameter bytes, so a small file cannot make the loader allocate much more than its size.
constexpr int64_t kTableAllowanceBytes = int64_t(64) << 20;

// SentencePiece models ride in the metadata (text) as base64 of their serialized bytes, under
// kSentencePieceJoint, or one key per side.
constexpr const char* kSentencePieceJoint = "sentencepiece";
constexpr const char* kSentencePieceSource = "sentencepiece.source";
constexpr const char* kSentencePieceTarget = "sentencepiece.target";
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string to_base64(const std::string& bytes) {
  const auto byte = [&](size_t i) { return uint32_t(uint8_t(bytes[i])); };
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t left = bytes.size() - i;  // 1, 2, or 3 and more
    const uint32_t group = byte(i) << 16 | (left > 1 ? byte(i + 1) << 8 : 0) | (left > 2 ? byte(i + 2) : 0);
    out += kBase64[group >> 18 & 63];
    out += kBase64[group >> 12 & 63];
    out += left > 1 ? kBase64[group >> 6 & 63] : '=';
    out += left > 2 ? kBase64[group & 63] : '=';
  }
  return out;
}

// nullopt unless `text` is padded base64 ('=' only as the last one or two characters).
std::optional<std::string> from_base64(const std::string& text) {
  if (text.size() % 4) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last && text[i + 3] == '=' ? (text[i + 2] == '=' ? 2 : 1) : 0;
    uint32_t group = 0;
    for (size_t k = 0; k < 4 - pad; ++k) {
      const char* at = text[i + k] ? std::strchr(kBase64, text[i + k]) : nullptr;
      if (!at) return std::nullopt;
      group = group << 6 | uint32_t(at - kBase64);
    }
    group <<= 6 * pad;
    out += char(group >> 16);
    if (pad < 2) out += char(group >> 8 & 0xff);
    if (pad < 1) out += char(group & 0xff);
  }
  return out;
}

std::string generator_words(const Generator& g) {
  std::string out;
  for (uint64_t w : g.state()) {
    if (!out.empty()) out += ',';  // piecewise: GCC 12 gives a false -Wrestrict on "literal" + std::string
    out += std::to_string(w);
  }
  return out;
}

const std::string& meta(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) throw IoError(f.path + ": metadata has no '" + key + "' entry (not a tapegrad checkpoint?)");
  return it->second;
}

void require_format(const io::SafetensorsFile& f) {
  const std::string& format = meta(f, "format");
  if (format == kFormatBeforeChecksum) return;
  if (format != kFormat)
    throw IoError(f.path + ": unsupported checkpoint format '" + format + "' (expected " + kFormat + " or " +
                  kFormatBeforeChecksum + ")");
  if (!f.checksummed)
    throw IoError(f.path + ": a " + kFormat +
                  " file carries its checksum (metadata 'tapegrad.crc32'), and this one has none: its header "
                  "was edited");
}

// A decimal integer in [0, max], digits only: no sign, space, or leading "0x"; nullopt otherwise.
std::optional<uint64_t> parse_decimal(const std::string& text, uint64_t max) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, uint64_t(10), &v) || __builtin_add_overflow(v, uint64_t(ch - '0'), &v))
      return std::nullopt;
  }
  if (v > max) return std::nullopt;
  return v;
}

int64_t meta_step(const io::SafetensorsFile& f) {
  const std::string& v = meta(f, "step");
  const auto step = parse_decimal(v, uint64_t(INT64_MAX));
  if (!step)
    throw IoError(f.path + ": metadata 'step' is '" + v + "'; expected a non-negative decimal integer");
  return int64_t(*step);
}

// Runs parse(metadata[key]); an Error names the file and the entry.
template <class F>
auto parse_meta(const io::SafetensorsFile& f, const char* key, F&& parse) {
  const std::string& text = meta(f, key);
  try {
    return parse(text);
  } catch (const Error& e) {
    throw IoError(f.path + ": metadata '" + key + "': " + e.what());
  }
}

// Every element finite (floating tensors); IoError naming the tensor and the first bad element.
void require_finite(const io::SafetensorsFile& f, const std::string& name, const Tensor& t,
                    const char* what) {
  if (t.dtype() == DType::i32) return;
  const std::vector<double> v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw IoError(f.path + ": " + what + " " + name + " holds " + std::to_string(v[i]) + " at element " +
                    std::to_string(i) + "; a checkpoint must be finite");
}

// `field` of the config must equal what tensor `name`'s dimension `dim` says (when the file has it).
void require_implied(const io::SafetensorsFile& f, const char* field, int64_t value, const std::string& name,
                     int dim) {
  const Tensor* t = f.find(name);
  if (!t || t->ndim() <= dim) return;
  if (t->size(dim) != value)
    throw IoError(f.path + ": metadata 'config': " + field + " " + std::to_string(value) +
                  " does not match tensor " + name + " " + to_string(t->shape()) + ", which implies " +
                  std::to_string(t->size(dim)));
}

// Layers per side the tensors imply: 1 + the largest N in "PREFIX.N." ("encoder.layers", the gpt's "layers").
int64_t implied_layers(const io::SafetensorsFile& f, const std::string& stack) {
  const std::string prefix = stack + ".";
  int64_t layers = 0;
  for (const auto& [name, t] : f.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    if (const auto n =
            parse_decimal(name.substr(prefix.size(), dot - prefix.size()), uint64_t(INT64_MAX) - 1))
      layers = std::max(layers, int64_t(*n) + 1);
  }
  return layers;
}

}  // namespace

void check_model_file(const io::SafetensorsFile& f, const models::ModelConfig& config) {
  using models::ConfigNames;
  // Sizes the tensors imply, field by field, so a wrong field is named with the tensor that contradicts it.
  const bool gpt = config.kind == models::ModelKind::gpt;
  const std::string embedding = gpt ? "tok_embed.weight" : "src_embed.weight";
  require_implied(f, "vocab_size", config.vocab_size, embedding, 0);
  require_implied(f, "d_model", config.d_model, embedding, 1);
  if (const int64_t layers = implied_layers(f, gpt ? "layers" : "encoder.layers");
      layers > 0 && layers != config.layers)
    throw IoError(f.path + ": metadata 'config': layers " + std::to_string(config.layers) +
                  " does not match the tensors, which hold " + std::to_string(layers) +
                  (gpt ? " blocks" : " encoder layers"));
  if (gpt) {
    require_implied(f, "max_len", config.max_len, "pos_embed.weight", 0);
  } else if (config.kind == models::ModelKind::transformer) {
    require_implied(f, "d_ff", config.d_ff, "encoder.layers.0.ff.linear1.weight", 0);
    if (config.positional == nn::PositionalKind::learned)
      require_implied(f, "max_len", config.max_len, "src_pos.weight", 0);
  } else {
    require_implied(f, "hidden", config.hidden, "out_proj.weight", 1);
  }
  // Then the whole: the config's closed-form parameter count against the file's elements.
  int64_t elements = 0;
  for (const auto& [name, t] : f.tensors)
    elements = checked_add(elements, t.numel(), f.path + ": tensor elements");
  int64_t expected = 0;
  try {
    expected = models::parameter_count(config, ConfigNames::json);
  } catch (const Error& e) {
    throw IoError(f.path + ": metadata 'config': " + e.what());
  }
  if (expected != elements)
    throw IoError(f.path + ": metadata 'config' describes a model of " + std::to_string(expected) +
                  " parameters but the file holds " + std::to_string(elements) + " values");
  const int64_t tables = models::buffer_bytes(config, ConfigNames::json);
  if (tables >
      checked_add(checked_mul(elements, 4, "parameter bytes"), kTableAllowanceBytes, "table allowance"))
    throw IoError(f.path + ": metadata 'config': max_len " + std::to_string(config.max_len) +
                  ": the position tables would need " + format_bytes(double(tables)) +
                  ", far more than the file's " + format_bytes(double(elements) * 4) + " of parameters");
  try {
    models::check_config(config, ConfigNames::json);
  } catch (const Error& e) {
    throw IoError(f.path + ": metadata 'config': " + e.what());
  }
  for (const auto& [name, t] : f.tensors) require_finite(f, name, t, "parameter");
}

namespace {

// The tokenizer the checkpoint was trained with: chars or whitespace by name, SentencePiece rebuilt
// from its stored model(s), which must give exactly the stored vocabulary.
std::shared_ptr<const data::Tokenizer> parse_tokenizer(const io::SafetensorsFile& f, const TrainOptions& options,
                                                       const data::Vocab& vocab) {
  if (options.tokens != data::Tokenization::sentencepiece) return data::make_tokenizer(options.tokens);
  const auto model_bytes = [&](const char* key) {
    const auto bytes = from_base64(meta(f, key));
    if (!bytes) throw IoError(f.path + ": metadata '" + key + "' is not base64");
    return *bytes;
  };
  const bool joint = f.metadata.count(kSentencePieceJoint) > 0;
  const std::string source = model_bytes(joint ? kSentencePieceJoint : kSentencePieceSource);
  const std::string target = joint ? "" : model_bytes(kSentencePieceTarget);
  std::shared_ptr<const data::SentencePieceTokenizer> tokenizer;
  try {
    tokenizer = data::SentencePieceTokenizer::from_models(source, target, f.path + ": metadata 'sentencepiece'");
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(e.what());
  }
  if (tokenizer->vocabulary() != vocab.tokens())
    throw IoError(f.path + ": metadata 'vocab' is not the SentencePiece model's vocabulary (ids would mean other pieces)");
  return tokenizer;
}

// Everything load_model_file reads and checks before it builds the model (which stays null).
LoadedModel parse_model_file(const io::SafetensorsFile& f) {
  require_format(f);
  LoadedModel m;
  m.step = meta_step(f);
  m.options = parse_meta(f, "options", [](const std::string& text) { return TrainOptions::from_json(text); });
  m.vocab = parse_meta(f, "vocab", [](const std::string& text) { return data::Vocab::from_json(text); });
  m.options.model =
      parse_meta(f, "config", [](const std::string& text) { return models::ModelConfig::from_json(text); });
  m.tokenizer = parse_tokenizer(f, m.options, m.vocab);
  if (m.options.model.vocab_size != m.vocab.size())
    throw IoError(f.path + ": the vocabulary has " + std::to_string(m.vocab.size()) +
                  " tokens but metadata 'config' has vocab_size " +
                  std::to_string(m.options.model.vocab_size));
  check_model_file(f, m.options.model);
  return m;
}

}  // namespace

void check_model_loadable(const io::SafetensorsFile& f) {
  (void)parse_model_file(f);
}

LoadedModel load_model_file(const io::SafetensorsFile& f) {
  LoadedModel m = parse_model_file(f);
  m.model = models::make_model(m.options.model, m.options.seed);
  nn::load(*m.model, f);  // every name, dtype and shape against the model, nothing unexpected
  m.model->eval();
  return m;
}

void check_training_state(const io::SafetensorsFile& f) {
  require_format(f);
  (void)meta_step(f);
  (void)generator_state(f);
  for (const auto& [name, t] : f.tensors) {
    require_finite(f, name, t, "optimizer state");
    if (name.rfind("exp_avg_sq.", 0) == 0)
      for (double x : t.to_vector())
        if (x < 0)
          throw IoError(f.path + ": optimizer state " + name + " holds a negative second moment " +
                        std::to_string(x));
  }
}

std::vector<uint64_t> generator_state(const io::SafetensorsFile& f) {
  const std::string& text = meta(f, "generator");
  std::vector<uint64_t> words;
  size_t begin = 0;
  for (;;) {
    const size_t comma = text.find(',', begin);
    const auto w = parse_decimal(text.substr(begin, comma - begin), UINT64_MAX);
    if (!w)
      throw IoError(f.path + ": metadata 'generator' is '" + text +
                    "'; expected 4 comma-separated unsigned 64-bit decimal words");
    words.push_back(*w);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (words.size() != 4)
    throw IoError(f.path + ": metadata 'generator' has " + std::to_string(words.size()) +
                  " words; expected 4");
  if (words == std::vector<uint64_t>(4, 0))
    throw IoError(f.path + ": metadata 'generator' is all zero, a state the generator never reaches");
  return words;
}

void load_optimizer_state(optim::Optimizer& optimizer, const io::SafetensorsFile& f) {
  try {
    optimizer.load_state_tensors(f.tensors);
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(f.path + ": " + e.what());
  }
}

void write_checkpoint_files(const Session& s, const std::string& dir, const std::function<void()>& between) {
  const std::string step = std::to_string(s.step);
  std::map<std::string, std::string> metadata = {{"format", kFormat},
                                                 {"step", step},
                                                 {"config", s.model->config().to_json()},
                                                 {"vocab", s.vocab.to_json()},
                                                 {"tokenization", data::tokenization_name(s.options.tokens)},
                                                 {"options", s.options.to_json()}};
  if (const auto* spm = dynamic_cast<const data::SentencePieceTokenizer*>(s.tokenizer.get())) {
    if (spm->joint()) {
      metadata[kSentencePieceJoint] = to_base64(spm->model(data::Side::source));
    } else {
      metadata[kSentencePieceSource] = to_base64(spm->model(data::Side::source));
      metadata[kSentencePieceTarget] = to_base64(spm->model(data::Side::target));
    }
  }
  nn::save(*s.model, dir + "/model.safetensors", metadata);
  if (between) between();
  io::save_safetensors(dir + "/optimizer.safetensors", s.optimizer->state_tensors(),
                       {{"format", kFormat}, {"step", step}, {"optimizer", s.options.optimizer},
                        {"generator", generator_words(s.model->generator())}});
}

void save_checkpoint(const Session& s, const std::string& dir) { write_checkpoint(s, dir); }

LoadedModel load_checkpoint(const std::string& dir) {
  const CheckpointFiles files = resolve_checkpoint(dir);
  if (!std::filesystem::exists(files.model))
    throw IoError(dir + ": no model.safetensors (not a checkpoint directory?)");
  LoadedModel m = load_model_file(io::load_safetensors(files.model));
  m.optimizer_path = files.optimizer;
  return m;
}

void restore_training_state(Session& s, const io::SafetensorsFile& f) {
  check_training_state(f);
  const int64_t step = meta_step(f);
  if (step != s.step)
    throw IoError(f.path + ": optimizer state is at step " + std::to_string(step) + " but the model at step " +
                  std::to_string(s.step) + " (an interrupted save?)");
  if (meta(f, "optimizer") != s.options.optimizer)
    throw IoError(f.path + ": optimizer is '" + meta(f, "optimizer") + "', the run uses '" + s.options.optimizer + "'");
  load_optimizer_state(*s.optimizer, f);
  s.model->generator().set_state(generator_state(f));
}

}  // namespace tapegrad::train
