// Fuzz target: a checkpoint directory as `tapegrad train --resume` and `eval` read it. The input holds
// both files' headers and data (see targets.hpp); the target writes model.safetensors and
// optimizer.safetensors and resumes a session from them, which loads the model (config, vocabulary,
// options), its parameters, the optimizer state and the generator.
#include <filesystem>

#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"
#include "targets.hpp"

namespace tapegrad::fuzz {

void checkpoint(const uint8_t* data, size_t size) {
  const CheckpointParts p =
      split_checkpoint_input(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string dir = scratch_dir() + "/checkpoint";
  std::filesystem::create_directories(dir);
  write_file(dir + "/model.safetensors", safetensors_from_parts(p.model_header, p.model_data));
  write_file(dir + "/optimizer.safetensors", safetensors_from_parts(p.optimizer_header, p.optimizer_data));
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
