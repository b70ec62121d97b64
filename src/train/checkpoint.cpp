// Checkpoint directories: model.safetensors + optimizer.safetensors (see train.hpp).
#include <filesystem>
#include <functional>
#include <sstream>

#include "src/train/run_directory.hpp"
#include "src/train/train_internal.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"

namespace tapegrad::train {

namespace {

constexpr const char* kFormat = "tapegrad-checkpoint-1";

std::string generator_words(const Generator& g) {
  std::string out;
  for (uint64_t w : g.state()) out += (out.empty() ? "" : ",") + std::to_string(w);
  return out;
}

const std::string& meta(const io::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) throw IoError(f.path + ": metadata has no '" + key + "' entry (not a tapegrad checkpoint?)");
  return it->second;
}

int64_t meta_int(const io::SafetensorsFile& f, const std::string& key) {
  const std::string& v = meta(f, key);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw IoError(f.path + ": metadata '" + key + "' is not an integer: '" + v + "'");
  }
}

}  // namespace

void write_checkpoint_files(const Session& s, const std::string& dir, const std::function<void()>& between) {
  const std::string step = std::to_string(s.step);
  io::save_safetensors(dir + "/model.safetensors", s.model->named_parameters(),
                       {{"format", kFormat}, {"step", step}, {"config", s.model->config().to_json()},
                        {"vocab", s.vocab.to_json()}, {"tokenization", data::tokenization_name(s.options.tokenization)},
                        {"options", s.options.to_json()}});
  if (between) between();
  io::save_safetensors(dir + "/optimizer.safetensors", s.optimizer->state_tensors(),
                       {{"format", kFormat}, {"step", step}, {"optimizer", s.options.optimizer},
                        {"generator", generator_words(s.model->generator())}});
}

void save_checkpoint(const Session& s, const std::string& dir) { write_checkpoint(s, dir); }

LoadedModel load_checkpoint(const std::string& dir) {
  const CheckpointFiles files = resolve_checkpoint(dir);
  const std::string& path = files.model;
  if (!std::filesystem::exists(path)) throw IoError(dir + ": no model.safetensors (not a checkpoint directory?)");
  const io::SafetensorsFile f = io::load_safetensors(path);
  if (meta(f, "format") != kFormat)
    throw IoError(path + ": unsupported checkpoint format '" + meta(f, "format") + "' (expected " + kFormat + ")");
  LoadedModel m;
  m.optimizer_path = files.optimizer;
  m.step = meta_int(f, "step");
  try {
    m.options = TrainOptions::from_json(meta(f, "options"));
    m.vocab = data::Vocab::from_json(meta(f, "vocab"));
    const models::ModelConfig config = models::ModelConfig::from_json(meta(f, "config"));
    if (config.vocab_size != m.vocab.size())
      throw Error("vocabulary has " + std::to_string(m.vocab.size()) + " tokens but the model expects " +
                  std::to_string(config.vocab_size));
    m.options.model = config;
    m.model = models::make_model(config, m.options.seed);
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(path + ": " + e.what());
  }
  // Names against the model: every parameter present with its shape, nothing unexpected.
  const auto params = m.model->named_parameters();
  for (const auto& [name, p] : params) {
    const Tensor& t = f.get(name);
    if (t.shape() != p.shape() || t.dtype() != p.dtype())
      throw IoError(path + ": tensor " + name + " is " + t.describe() + ", the model expects " + p.describe());
    Tensor dst = p;
    dst.copy_from(t);
  }
  if (f.tensors.size() != params.size()) {
    for (const auto& [name, t] : f.tensors) {
      bool known = false;
      for (const auto& [pn, p] : params) known |= pn == name;
      if (!known) throw IoError(path + ": tensor " + name + " is not a parameter of this model");
    }
  }
  m.model->eval();
  return m;
}

void restore_training_state(Session& s, const io::SafetensorsFile& f) {
  const int64_t step = meta_int(f, "step");
  if (step != s.step)
    throw IoError(f.path + ": optimizer state is at step " + std::to_string(step) + " but the model at step " +
                  std::to_string(s.step) + " (an interrupted save?)");
  if (meta(f, "optimizer") != s.options.optimizer)
    throw IoError(f.path + ": optimizer is '" + meta(f, "optimizer") + "', the run uses '" + s.options.optimizer + "'");
  try {
    s.optimizer->load_state_tensors(f.tensors);
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(f.path + ": " + e.what());
  }
  std::vector<uint64_t> words;
  std::stringstream ss(meta(f, "generator"));
  for (std::string w; std::getline(ss, w, ',');) {
    try {
      words.push_back(std::stoull(w));
    } catch (const std::exception&) {
      throw IoError(f.path + ": generator state is malformed: '" + meta(f, "generator") + "'");
    }
  }
  if (words.size() != 4) throw IoError(f.path + ": generator state must have 4 words");
  s.model->generator().set_state(words);
}

}  // namespace tapegrad::train
