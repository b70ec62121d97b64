// Shared between the training loop and checkpoints (internal to src/train).
#pragma once

#include <functional>

#include "tapegrad/io.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

// Restores optimizer state, the model generator and the step from optimizer.safetensors.
void restore_training_state(Session& session, const io::SafetensorsFile& state);

// The first of `named` (or of their gradients) holding a NaN or an infinity; "" if none does.
std::string first_nonfinite(const std::vector<std::pair<std::string, Tensor>>& named, bool of_grads);

// A data file's path made absolute against the working directory (and normalised); "" stays "".
// Checkpoints store --train/--valid this way, so a run resumes from any working directory.
std::string absolute_path(const std::string& path);

// Writes model.safetensors, calls `between`, then writes optimizer.safetensors, into `dir`.
void write_checkpoint_files(const Session& session, const std::string& dir, const std::function<void()>& between);

}  // namespace tapegrad::train
