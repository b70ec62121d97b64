// Optimizers, clipping and schedules.
#include "tapegrad/optim.hpp"

#include <cmath>

#include "kernels/kernels.hpp"
#include "src/internal.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::optim {

using detail::visit_float;

Optimizer::Optimizer(ParamList named_params) : params_(std::move(named_params)) {
  for (const auto& [name, p] : params_)
    if (!p.is_contiguous() || !p.is_floating())
      throw Error("optimizer: parameter " + name + " must be a contiguous floating tensor, got " + p.describe());
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) {
    Tensor t = p;
    t.zero_grad();
  }
}

namespace {
std::vector<Tensor> zeros_like_all(const ParamList& params) {
  std::vector<Tensor> out;
  for (const auto& [name, p] : params) out.push_back(Tensor::zeros(p.shape(), p.dtype()));
  return out;
}

void load_matching(const std::vector<std::pair<std::string, Tensor>>& state, const std::string& prefix,
                   const ParamList& params, std::vector<Tensor>& dst) {
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = prefix + params[i].first;
    const Tensor* found = nullptr;
    for (const auto& [n, t] : state)
      if (n == key) found = &t;
    if (!found) throw Error("optimizer state: missing tensor " + key);
    if (found->shape() != dst[i].shape() || found->dtype() != dst[i].dtype())
      throw Error("optimizer state: " + key + " is " + found->describe() + ", expected " + dst[i].describe());
    dst[i].copy_from(*found);
  }
}

Tensor step_tensor(int64_t steps) { return Tensor::from_vector({double(steps)}, {1}, DType::f64); }

int64_t read_steps(const std::vector<std::pair<std::string, Tensor>>& state) {
  for (const auto& [n, t] : state)
    if (n == "step") return int64_t(t.item());
  throw Error("optimizer state: missing tensor step");
}
}  // namespace

Sgd::Sgd(ParamList params, const SgdOptions& o)
    : Optimizer(std::move(params)), momentum_(o.momentum), weight_decay_(o.weight_decay) {
  lr_ = o.lr;
  velocity_ = zeros_like_all(params_);
}

void Sgd::step() {
  NoGrad no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    visit_float(p.dtype(), "sgd", [&]<class T>() {
      T* w = p.data<T>();
      T* v = velocity_[i].data<T>();
      const T* gr = g.data<T>();
      // v = momentum v + (g + wd w);  w -= lr v
      for (int64_t k = 0, n = p.numel(); k < n; ++k) {
        v[k] = T(momentum_) * v[k] + gr[k] + T(weight_decay_) * w[k];
        w[k] -= T(lr_) * v[k];
      }
    });
  }
}

std::vector<std::pair<std::string, Tensor>> Sgd::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out{{"step", step_tensor(steps_)}};
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back("velocity." + params_[i].first, velocity_[i]);
  return out;
}

void Sgd::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) {
  load_matching(state, "velocity.", params_, velocity_);
  steps_ = read_steps(state);
}

Adam::Adam(ParamList params, const AdamOptions& o) : Adam(std::move(params), o, /*decoupled=*/false) {}

Adam::Adam(ParamList params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params)),
      beta1_(o.betas.first), beta2_(o.betas.second), eps_(o.eps), weight_decay_(o.weight_decay),
      decay_vectors_(o.decay_vectors), decoupled_(decoupled) {
  lr_ = o.lr;
  m_ = zeros_like_all(params_);
  v_ = zeros_like_all(params_);
}

AdamW::AdamW(ParamList params, const AdamOptions& o) : Adam(std::move(params), o, /*decoupled=*/true) {}

void Adam::step() {
  NoGrad no_grad;
  ++steps_;
  const kernels::AdamParams ap{lr_, beta1_, beta2_, eps_, weight_decay_, decoupled_, steps_};
  // One kernel call per dtype over all parameters with a gradient (one thread team for them all).
  auto update = [&]<class T>() {
    std::vector<kernels::AdamTensor<T>> list;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].second;
      const Tensor g = p.grad();
      if (!g.defined() || p.dtype() != dtype_of<T>()) continue;
      list.push_back({p.numel(), p.data<T>(), g.data<T>(), m_[i].data<T>(), v_[i].data<T>(),
                      decay_vectors_ || p.ndim() >= 2});
    }
    if (!list.empty()) kernels::adam_update<T>(int64_t(list.size()), list.data(), ap);
  };
  update.operator()<float>();
  update.operator()<double>();
}

std::vector<std::pair<std::string, Tensor>> Adam::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out{{"step", step_tensor(steps_)}};
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, m_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, v_[i]);
  }
  return out;
}

void Adam::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& state) {
  load_matching(state, "exp_avg.", params_, m_);
  load_matching(state, "exp_avg_sq.", params_, v_);
  steps_ = read_steps(state);
}

double clip_grad_norm(const ParamList& params, double max_norm) {
  NoGrad no_grad;
  double sq = 0;
  for (const auto& [name, p] : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    sq += visit_float(g.dtype(), "clip_grad_norm",
                      [&]<class T>() { return double(kernels::sum_squares<T>(g.numel(), g.data<T>())); });
  }
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& [name, p] : params) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      visit_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
        kernels::affine<T>(g.numel(), g.data<T>(), T(scale), T(0), g.data<T>(), false);
      });
    }
  }
  return norm;
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::constant: return "constant";
    case Schedule::inverse_sqrt: return "inverse_sqrt";
    case Schedule::cosine: return "cosine";
  }
  return "?";
}

Schedule parse_schedule(const std::string& name) {
  if (name == "constant") return Schedule::constant;
  if (name == "inverse_sqrt" || name == "noam" || name == "rsqrt") return Schedule::inverse_sqrt;
  if (name == "cosine") return Schedule::cosine;
  throw Error("schedule: unknown '" + name + "' (expected constant, inverse_sqrt or cosine)");
}

double learning_rate(Schedule s, double base, int64_t step, int64_t warmup, int64_t total, double min_ratio) {
  const double t = double(std::max<int64_t>(step, 1));
  const double w = double(std::max<int64_t>(warmup, 0));
  const double ramp = w > 0 ? std::min(1.0, t / w) : 1.0;
  switch (s) {
    case Schedule::constant: return base * ramp;
    case Schedule::inverse_sqrt: return w > 0 ? base * std::min(t / w, std::sqrt(w / t)) : base / std::sqrt(t);
    case Schedule::cosine: {
      if (w > 0 && t < w) return base * ramp;
      const double span = std::max(1.0, double(total) - w);
      const double progress = std::clamp((t - w) / span, 0.0, 1.0);
      return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
    }
  }
  return base;
}

}  // namespace tapegrad::optim
