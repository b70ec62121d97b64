// Shared between the training loop and checkpoints (internal to src/train).
#pragma once

#include <functional>

#include "tapegrad/autograd.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

// Restores optimizer state, the model generator and the step from optimizer.safetensors.
void restore_training_state(Session& session, const io::SafetensorsFile& state);

// The first of `named` (or of their gradients) holding a NaN or an infinity; "" if none does.
std::string first_nonfinite(const optim::ParamList& named, bool of_grads);

// A data file's path made absolute against the working directory (and normalised); "" stays "".
// Checkpoints store --train/--valid this way, so a run resumes from any working directory.
std::string absolute_path(const std::string& path);

// The shortest decimal that reads back as the same double (metrics.csv, the option table's values):
// every bit of a figure is kept and equal values print alike. Defined in metrics.cpp.
std::string exact_decimal(double v);

// Writes model.safetensors, calls `between`, then writes optimizer.safetensors, into `dir`.
void write_checkpoint_files(const Session& session, const std::string& dir, const std::function<void()>& between);

// What a data-parallel step adds to train_step (src/train/distributed.cpp): it watches the tape
// from the forward pass on (to know when each parameter's gradient is complete), sums the loss and
// the gradients across ranks, and weights this rank's shard so that the sums are the global batch's.
class GradientExchange : public TapeObserver {
 public:
  // Target tokens in the global batch (this rank's batch is a shard of it).
  virtual int64_t global_tokens() const = 0;
  // The factor on this shard's mean loss before backward: its share of the global batch's tokens.
  virtual double loss_weight() const = 0;
  // After forward: the global batch's loss from every rank's weighted shard loss (the same on all).
  virtual double sum_loss(double shard_loss) = 0;
  // After backward: every parameter's .grad holds the sum over ranks; returns the seconds spent
  // waiting for sums still in flight when backward ended.
  virtual double finish_backward() = 0;
};

// train_step, with `exchange` (when not null) making it one rank's part of a data-parallel step: the
// core on any loss, and the seq2seq overload on it.
StepResult train_step(const optim::ParamList& params, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const LossFn& loss, int64_t step, GradientExchange* exchange);
StepResult train_step(models::Seq2Seq& model, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const data::Batch& batch, int64_t step, GradientExchange* exchange);

}  // namespace tapegrad::train
