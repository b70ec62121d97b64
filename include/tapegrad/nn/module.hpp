/// @file
/// Module: a tree of named parameters and sub-modules, with train/eval mode.
///
/// Parameters are leaf tensors that require grad; their full names are the dotted path from the root
/// (`encoder.layers.0.self_attn.q_proj.weight`), which is also what checkpoints store and what tape
/// dumps show. Registration order is kept, so iteration is deterministic.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/tensor.hpp"

/// Layers built from ops: Module and its subclasses (see nn/module.hpp).
namespace tapegrad::nn {

/// Named parameters (dotted full names, registration order): what named_parameters() returns and
/// what optimizers and clipping take (optim::ParamList is this type).
using ParamList = std::vector<std::pair<std::string, Tensor>>;

/// The base of every layer and model: owns its parameters and buffers, and its sub-modules through
/// shared pointers (the subclass usually keeps a typed copy of each). Not copyable. A subclass
/// registers everything in its constructor and adds its own forward().
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Every parameter below this module, depth first in registration order, with its dotted name.
  ParamList named_parameters() const;
  /// The same tensors without names (for gradient checks and gradient buckets).
  std::vector<Tensor> parameters() const;
  /// Total elements over parameters().
  int64_t parameter_count() const;
  /// Every buffer of this module and its children (constants such as sin/cos tables).
  std::vector<Tensor> buffers() const;
  /// Drops every parameter's gradient.
  void zero_grad();

  /// Converts every parameter and buffer in place (float32 for training, float64 for gradcheck).
  void to(DType dtype);

  /// Sets training mode (dropout active) on this module and every child.
  void train(bool on = true);
  void eval() { train(false); }                ///< train(false): dropout off.
  bool training() const { return training_; }  ///< True in training mode (the default).

 protected:
  /// Marks `t` as a parameter (requires grad) called `name` within this module.
  /// Returns `t` (the same handle).
  Tensor register_parameter(const std::string& name, Tensor t);
  /// A constant tensor that follows to(dtype) but is neither trained nor saved (such as sin/cos tables).
  /// Returns `t`.
  Tensor register_buffer(Tensor t);
  /// Adds `m` as the child called `name` (a path segment of its parameters' names); returns `m`.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, ParamList& out) const;
  ParamList params_;
  std::vector<Tensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tapegrad::nn
