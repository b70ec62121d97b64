// Fuzz target: a checkpoint directory as `tapegrad train --resume` and `eval` read it. The input holds
// both files' headers and data (see targets.hpp). The loader's own checks run first on the bytes in
// memory (the reader and checks load_checkpoint and the resume run); an input they refuse, the full
// path refuses with the same check, so only the inputs that pass take it: both files written to
// scratch and a session resumed from them (load_checkpoint: config, vocabulary, options, the model
// built and its parameters copied in; then the optimizer state and the generator).
#include <filesystem>

#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/train.hpp"
#include "targets.hpp"

namespace tapegrad::fuzz {

void checkpoint(const uint8_t* data, size_t size) {
  const CheckpointParts p =
      split_checkpoint_input(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string model_bytes = safetensors_from_parts(p.model_header, p.model_data);
  const std::string optimizer_bytes = safetensors_from_parts(p.optimizer_header, p.optimizer_data);
  try {
    train::check_model_loadable(io::load_safetensors_bytes(model_bytes, "model.safetensors"));
    train::check_training_state(io::load_safetensors_bytes(optimizer_bytes, "optimizer.safetensors"));
  } catch (const Error&) {
    return;  // refused cleanly, before the loader would build anything
  }

  const std::string dir = scratch_dir() + "/checkpoint";
  std::filesystem::create_directories(dir);
  write_file(dir + "/model.safetensors", model_bytes);
  write_file(dir + "/optimizer.safetensors", optimizer_bytes);
  train::TrainOptions resume;
  resume.resume_dir = dir;
  resume.out_dir = dir;  // never written: the target does not train
  try {
    const train::Session s = train::make_session(resume);
    require(s.model != nullptr && s.optimizer != nullptr, "a resumed session without a model or optimizer");
    require(s.vocab.size() == s.model->config().vocab_size, "a resumed model whose vocabulary size differs");
  } catch (const Error&) {
    return;  // refused cleanly
  }
}

}  // namespace tapegrad::fuzz
