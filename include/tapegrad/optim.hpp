/// @file
/// Optimizers (SGD with momentum, Adam, AdamW), gradient clipping by global norm, learning-rate
/// schedules. Updates run under NoGrad through vectorised kernels (kernels::adam_update).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tapegrad/tensor.hpp"

/// Optimizers, clipping and schedules (see optim.hpp).
namespace tapegrad::optim {

/// An optimizer over named parameters. It holds handles to them (shared storage, not copies) and
/// updates them in place; its state tensors are allocated at construction.
class Optimizer {
 public:
  /// Each parameter must be a contiguous floating tensor (Error naming it otherwise); names key the state.
  explicit Optimizer(std::vector<std::pair<std::string, Tensor>> named_params);
  virtual ~Optimizer() = default;
  /// Applies one update with the current learning rate; parameters without a gradient are skipped.
  virtual void step() = 0;
  /// Drops every parameter's gradient (Tensor::zero_grad).
  void zero_grad();
  void set_lr(double lr) { lr_ = lr; }      ///< The learning rate of the next step().
  double lr() const { return lr_; }         ///< The current learning rate.
  int64_t steps() const { return steps_; }  ///< Updates taken (Adam's bias correction uses it).
  /// Everything needed to resume exactly: named state tensors (`exp_avg.NAME`, ...) and scalars.
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const = 0;
  /// Restores from tensors produced by state_tensors(); throws Error naming a missing or mis-shaped one.
  virtual void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) = 0;
  void set_steps(int64_t s) { steps_ = s; }  ///< Sets the update count (when resuming).

 protected:
  std::vector<std::pair<std::string, Tensor>> params_;  ///< the named parameters, as given
  double lr_ = 1e-3;                                    ///< learning rate of the next step
  int64_t steps_ = 0;                                   ///< updates taken
};

/// SGD with momentum and L2 weight decay: v = momentum v + (g + weight_decay w); w -= lr v.
/// State: `velocity.NAME` per parameter NAME.
class Sgd : public Optimizer {
 public:
  /// See the class; momentum 0 is plain SGD.
  Sgd(std::vector<std::pair<std::string, Tensor>> params, double lr, double momentum = 0.0, double weight_decay = 0.0);
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  double momentum_, weight_decay_;
  std::vector<Tensor> velocity_;
};

/// Adam (Kingma & Ba) with bias correction; with decoupled = true it is AdamW (Loshchilov & Hutter):
/// weight decay shrinks the weights directly instead of entering the gradient.
class Adam : public Optimizer {
 public:
  /// The usual hyper-parameters; `decoupled` selects AdamW's weight decay.
  Adam(std::vector<std::pair<std::string, Tensor>> params, double lr, double beta1 = 0.9, double beta2 = 0.999,
       double eps = 1e-8, double weight_decay = 0.0, bool decoupled = false);
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::vector<Tensor> m_, v_;
};

/// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

/// Learning-rate schedules: see learning_rate.
enum class Schedule { constant, inverse_sqrt, cosine };
/// "constant", "inverse_sqrt" or "cosine".
const char* schedule_name(Schedule s);
/// constant | inverse_sqrt (noam) | cosine; throws Error naming the choices for anything else.
Schedule parse_schedule(const std::string& name);

/// The learning rate at 1-based `step`:
/// ```
///   constant:     base (after linear warm-up if warmup > 0)
///   inverse_sqrt: base * min(step / warmup, sqrt(warmup / step))   (the Transformer paper's, peak = base)
///   cosine:       linear warm-up, then base * (min_ratio + (1 - min_ratio) * (1 + cos(pi * progress)) / 2)
/// ```
double learning_rate(Schedule s, double base, int64_t step, int64_t warmup, int64_t total_steps,
                     double min_ratio = 0.0);

}  // namespace tapegrad::optim
