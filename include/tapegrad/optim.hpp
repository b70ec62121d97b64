/// @file
/// Optimizers (SGD with momentum, Adam, AdamW), gradient clipping by global norm, learning-rate
/// schedules. Updates run under NoGrad through vectorised kernels (kernels::adam_update).
///
/// Every optimizer and clip_grad_norm take one parameter-list type, ParamList (the named parameters
/// nn::Module::named_parameters() returns), and each optimizer's hyper-parameters come in an options
/// struct with designated initialisers:
/// ```
///   optim::AdamW opt(model.named_parameters(), {.lr = 1e-3, .betas = {0.9, 0.98}, .eps = 1e-9, .weight_decay = 0.01});
/// ```
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tapegrad/nn/module.hpp"
#include "tapegrad/tensor.hpp"

/// Optimizers, clipping and schedules (see optim.hpp).
namespace tapegrad::optim {

/// Named parameters, in the module's registration order: what optimizers update and clip_grad_norm
/// scales (the same type as nn::Module::named_parameters()).
using ParamList = nn::ParamList;

/// An optimizer over named parameters. It holds handles to them (shared storage, not copies) and
/// updates them in place; its state tensors are allocated at construction.
class Optimizer {
 public:
  /// Each parameter must be a contiguous floating tensor (Error naming it otherwise); names key the state.
  explicit Optimizer(ParamList named_params);
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
  ParamList params_;                                    ///< the named parameters, as given
  double lr_ = 1e-3;                                    ///< learning rate of the next step
  int64_t steps_ = 0;                                   ///< updates taken
};

/// Sgd's hyper-parameters.
struct SgdOptions {
  double lr = 1e-3;            ///< learning rate (set_lr changes it later, e.g. by a schedule)
  double momentum = 0.0;       ///< 0: plain SGD
  double weight_decay = 0.0;   ///< L2: enters the gradient
};

/// SGD with momentum and L2 weight decay: v = momentum v + (g + weight_decay w); w -= lr v.
/// State: `velocity.NAME` per parameter NAME.
class Sgd : public Optimizer {
 public:
  /// See the class and SgdOptions.
  Sgd(ParamList params, const SgdOptions& options);
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  double momentum_, weight_decay_;
  std::vector<Tensor> velocity_;
};

/// Adam's and AdamW's hyper-parameters (PyTorch's defaults).
struct AdamOptions {
  double lr = 1e-3;  ///< learning rate (set_lr changes it later, e.g. by a schedule)
  /// The decay rates of the first and second moment estimates.
  struct Betas {
    double first = 0.9;     ///< of the mean of the gradients
    double second = 0.999;  ///< of the mean of their squares
  } betas;                  ///< `{.betas = {0.9, 0.98}}`
  double eps = 1e-8;            ///< added to the root of the second moment
  double weight_decay = 0.0;    ///< L2 for Adam (enters the gradient), decoupled for AdamW
  /// false: weight decay only on parameters of 2 or more dimensions (weight matrices, embeddings),
  /// none on biases and norm scales, as nanoGPT's two parameter groups; true: on every parameter.
  bool decay_vectors = true;
};

/// Adam (Kingma & Ba) with bias correction and L2 weight decay (which enters the gradient).
/// State: `exp_avg.NAME` and `exp_avg_sq.NAME` per parameter NAME.
class Adam : public Optimizer {
 public:
  /// See the class and AdamOptions.
  Adam(ParamList params, const AdamOptions& options);
  void step() override;
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decay_vectors_, decoupled_;
  std::vector<Tensor> m_, v_;

 protected:
  /// AdamW's constructor: the same update with `decoupled` weight decay.
  Adam(ParamList params, const AdamOptions& options, bool decoupled);
};

/// AdamW (Loshchilov & Hutter): Adam whose weight decay shrinks the weights directly instead of
/// entering the gradient. Same state as Adam, so either resumes the other's file.
class AdamW : public Adam {
 public:
  /// See Adam and AdamOptions; weight_decay is decoupled.
  AdamW(ParamList params, const AdamOptions& options);
};

/// Scales all gradients so their global L2 norm is at most max_norm (0: no clipping); returns the norm
/// before clipping. Parameters without a gradient are skipped.
double clip_grad_norm(const ParamList& params, double max_norm);

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
