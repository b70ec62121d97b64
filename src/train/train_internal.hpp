// Shared between the training loop and checkpoints (internal to src/train).
#pragma once

#include "tapegrad/io.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

// Restores optimizer state, the model generator and the step from optimizer.safetensors.
void restore_training_state(Session& session, const io::SafetensorsFile& state);

}  // namespace tapegrad::train
