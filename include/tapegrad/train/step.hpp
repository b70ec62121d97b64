/// @file
/// One training step for any module: the learning rate of the step, the loss (a closure the caller
/// writes), backward, the non-finite check, clipping by global norm, the optimizer update and
/// zeroing the gradients. It needs only the parameters, an optimizer and the loss, so a user's own
/// nn::Module trains with it as the seq2seq models do (train.hpp adds the Seq2Seq overload on top):
/// ```
///   optim::Adam optimizer(model.named_parameters(), {.lr = 1e-3});
///   const train::StepRecipe recipe{.lr = 1e-3, .schedule = optim::Schedule::cosine, .warmup = 10,
///                                  .total_steps = 500, .clip_norm = 1.0};
///   for (int64_t step = 1; step <= 500; ++step)
///     train::train_step(model, optimizer, recipe, [&] { return cross_entropy(model.forward(x), y); }, step);
/// ```
/// This header depends on tensors, nn and optim only (not on the seq2seq models, data or files),
/// so a program training its own module includes just this.
#pragma once

#include <cstdint>
#include <functional>

#include "tapegrad/nn/module.hpp"
#include "tapegrad/optim.hpp"

/// Training, evaluation and checkpoints (see train.hpp and train/step.hpp).
namespace tapegrad::train {

struct TrainOptions;

/// What a step needs besides the parameters, the optimizer and the loss.
struct StepRecipe {
  double lr = 1e-3;                                      ///< peak learning rate
  optim::Schedule schedule = optim::Schedule::constant;  ///< see optim::learning_rate
  /// The schedule's shape.
  /// @{
  int64_t warmup = 0, total_steps = 0;
  /// @}
  double clip_norm = 0;        ///< 0: no clipping
  double label_smoothing = 0;  ///< of the cross-entropy (read by the Seq2Seq overload, train.hpp)
  double min_lr_ratio = 0;     ///< cosine: the final rate as a fraction of lr (optim::learning_rate)
  /// The recipe TrainOptions describe (train.hpp).
  static StepRecipe from(const TrainOptions& options);
};

/// What train_step measured.
struct StepResult {
  int64_t step = 0;  ///< the 1-based step just taken
  /// The batch's loss and the step's learning rate.
  /// @{
  double loss = 0, lr = 0;
  /// @}
  double grad_norm = 0;  ///< global L2 norm before clipping
  int64_t tokens = 0;    ///< target tokens in the batch (the Seq2Seq overload; 0 for a bare loss)
  double seconds = 0;    ///< wall time of the step, split into:
  /// Computing the loss; backward.
  /// @{
  double forward_seconds = 0, backward_seconds = 0;
  /// @}
  double update_seconds = 0;  ///< clipping, the optimizer update and zeroing the gradients
  /// Data-parallel runs: the part of the step spent after backward waiting for the gradient sums
  /// (the communication backward did not hide); 0 for one process.
  double allreduce_wait_seconds = 0;
};

/// The forward pass of a step: computes and returns the scalar loss to minimise (its ops record on
/// the tape, so backward reaches every parameter it used).
using LossFn = std::function<Tensor()>;

/// One training step, the only place a step is written: sets the learning rate of 1-based `step`
/// (recipe.schedule), calls `loss`, runs backward, clips the gradients of `params` to
/// recipe.clip_norm, updates and zeroes the gradients. A non-finite loss or gradient norm throws
/// NonFiniteError (naming the step, the quantity and the first parameter whose gradient is not
/// finite) before the update, so the parameters stay as they were. `params` are the parameters
/// `optimizer` updates (the ones clipped and searched for a non-finite gradient).
StepResult train_step(const optim::ParamList& params, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const LossFn& loss, int64_t step);
/// The same over every parameter of `module` (module.named_parameters()).
StepResult train_step(const nn::Module& module, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const LossFn& loss, int64_t step);

}  // namespace tapegrad::train
