// The training step, written once: learning rate, forward + loss, backward, the non-finite check,
// clipping, the optimizer update and zeroing the gradients. Its core takes the parameters and a loss
// closure (any module); the seq2seq overload supplies the model's loss on a batch. The trainer, the
// experiments, the training benchmark, the examples and the tests all call it, so a change to any
// part of a step is made here.
#include <chrono>
#include <cmath>
#include <optional>

#include "src/train/train_internal.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/instruments.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

// Off the hot path: only after a non-finite norm, and before a checkpoint is written.
std::string first_nonfinite(const optim::ParamList& named, bool of_grads) {
  for (const auto& [name, p] : named)
    if (!all_finite(of_grads ? p.grad() : p)) return name;
  return "";
}

namespace {

std::string show(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  return std::to_string(v);
}

}  // namespace

StepRecipe StepRecipe::from(const TrainOptions& o) {
  return {o.lr, o.schedule, o.warmup, o.steps, o.clip, o.label_smoothing, o.min_lr / o.lr};
}

StepResult train_step(const optim::ParamList& params, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const LossFn& loss_fn, int64_t step, GradientExchange* exchange) {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step;
  if (exchange) r.tokens = exchange->global_tokens();
  r.lr = optim::learning_rate(recipe.schedule, recipe.lr, step, recipe.warmup, recipe.total_steps,
                              recipe.min_lr_ratio);
  optimizer.set_lr(r.lr);
  std::optional<ObserveScope> watch;  // a data-parallel step follows the tape from the forward on
  if (exchange) watch.emplace(*exchange);
  Tensor loss = loss_fn();
  r.loss = exchange ? exchange->sum_loss(loss.item()) : loss.item();  // the same on every rank
  const auto t_forward = std::chrono::steady_clock::now();
  if (!std::isfinite(r.loss)) {
    optimizer.zero_grad();
    throw NonFiniteError("step " + std::to_string(step) + ": the loss is " + show(r.loss) +
                         "; training stopped before this step's update");
  }
  // A shard's mean loss, weighted by its share of the global batch: the ranks' gradients sum to the
  // global batch's.
  if (exchange) loss = loss * exchange->loss_weight();
  backward(loss);
  if (exchange) r.allreduce_wait_seconds = exchange->finish_backward(), watch.reset();
  const auto t_backward = std::chrono::steady_clock::now();
  r.grad_norm = optim::clip_grad_norm(params, recipe.clip_norm);
  if (!std::isfinite(r.grad_norm)) {
    const std::string where = first_nonfinite(params, /*of_grads=*/true);
    optimizer.zero_grad();
    throw NonFiniteError("step " + std::to_string(step) + ": the gradient norm is " + show(r.grad_norm) +
                         (where.empty() ? std::string() : " (first non-finite gradient: " + where + ")") +
                         "; training stopped before this step's update");
  }
  optimizer.step();
  optimizer.zero_grad();
  const auto t_end = std::chrono::steady_clock::now();
  r.seconds = std::chrono::duration<double>(t_end - t0).count();
  r.forward_seconds = std::chrono::duration<double>(t_forward - t0).count();
  r.backward_seconds = std::chrono::duration<double>(t_backward - t_forward).count();
  r.update_seconds = std::chrono::duration<double>(t_end - t_backward).count();
  return r;
}

StepResult train_step(const optim::ParamList& params, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const LossFn& loss, int64_t step) {
  return train_step(params, optimizer, recipe, loss, step, nullptr);
}

StepResult train_step(const nn::Module& module, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const LossFn& loss, int64_t step) {
  return train_step(module.named_parameters(), optimizer, recipe, loss, step, nullptr);
}

// The seq2seq step: the model's loss on the batch, with the recipe's label smoothing.
StepResult train_step(models::Seq2Seq& model, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const data::Batch& batch, int64_t step, GradientExchange* exchange) {
  StepResult r = train_step(
      model.named_parameters(), optimizer, recipe, [&] { return model.loss(batch, recipe.label_smoothing); },
      step, exchange);
  if (!exchange) r.tokens = batch.target_tokens();
  return r;
}

StepResult train_step(models::Seq2Seq& model, optim::Optimizer& optimizer, const StepRecipe& recipe,
                      const data::Batch& batch, int64_t step) {
  return train_step(model, optimizer, recipe, batch, step, nullptr);
}

StepResult train_step(Session& s, const data::Batch& batch) {
  const StepResult r = train_step(*s.model, *s.optimizer, StepRecipe::from(s.options), batch, s.step + 1);
  s.step = r.step;
  return r;
}

}  // namespace tapegrad::train
