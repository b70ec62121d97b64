/// @file
/// Transforms of differentiable functions, built on the tape: they take a function and return
/// something about it (a vector-Jacobian or Jacobian-vector product, its Jacobian or Hessian, its
/// recomputation).
///
/// Each transform runs `f` on copies of the inputs that require grad (sharing their storage), so the
/// inputs' .grad and the caller's tape are untouched; with `create_graph` it runs on the caller's tape
/// with the inputs themselves, so the result is differentiable with respect to them (a meta-gradient,
/// a penalty on a Jacobian). Forward mode (jvp) is the double-vjp construction, not a tangent carried
/// with each op: u -> J^T u is linear in u, so differentiating <J^T u, t> with respect to u gives J t.
/// It costs a forward, a recorded backward and a backward of that (measured in the README), where a
/// native forward mode would cost about two forwards; it needs no op to know about tangents.
#pragma once

#include <functional>
#include <vector>

#include "tapegrad/autograd.hpp"
#include "tapegrad/tensor.hpp"

namespace tapegrad {

// ---- activation checkpointing -------------------------------------------------------------------

/// A function checkpoint() may recompute: called with the tensors passed as `inputs`.
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Runs fn(inputs) without keeping its intermediates: the tape gets one entry for the whole call,
/// holding the inputs (and the parameters fn used), and its backward runs fn again on a fresh tape of
/// its own, with the random state of `generators` (default: default_generator()) as it was at the
/// first call, so dropout draws the same masks, then walks that tape. Gradients are bitwise those
/// of calling fn directly: each input's earlier gradient is handed to the recomputation, so
/// contributions are added in the same order.
///
/// Parameters fn uses without taking them as inputs (captured by its closure) get their gradients
/// too: the first call records fn on a scratch tape, which shows every leaf requiring grad the
/// output depends on, and the recomputation writes their gradients as the plain call would. (Unlike
/// PyTorch's reentrant checkpoint, this works when no input requires grad.) Checkpoints nest.
/// Under NoGrad, fn simply runs.
/// @throws AutogradError when fn returns an undefined tensor or one that depends on none of the
/// floating-point inputs, or (during backward) when the recomputation differs in shape or dtype.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Generator*>& generators = {});

// ---- vector-Jacobian, Jacobian-vector and Hessian-vector products -------------------------------

/// A function of several tensors returning one (the shape every transform takes).
using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// How a transform runs.
struct FunctionalOptions {
  /// The results are on the caller's tape, differentiable with respect to the inputs (see the top of
  /// this header).
  bool create_graph = false;
};

/// f(inputs) and v^T J for each input (J = d f / d input; v has f's shape): reverse mode.
struct VjpResult {
  Tensor output;              ///< f(inputs)
  std::vector<Tensor> grads;  ///< one per input, its shape (zeros where f does not depend on it)
};
/// @throws AutogradError when v's shape differs from f's output, or no floating input is given.
VjpResult vjp(const TensorFn& f, const std::vector<Tensor>& inputs, const Tensor& v,
              const FunctionalOptions& options = {});

/// f(inputs) and J t = sum_i (d f / d input_i) t_i (each t_i in its input's shape): forward mode.
struct JvpResult {
  Tensor output;   ///< f(inputs)
  Tensor tangent;  ///< J t, f's shape
};
/// @throws AutogradError when the tangents do not match the inputs in number or shape.
JvpResult jvp(const TensorFn& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents,
              const FunctionalOptions& options = {});

/// For scalar f: f, its gradient and H v (H = d^2 f / d inputs^2; v in the inputs' shapes), without
/// forming H: one recorded backward and one backward of it.
struct HvpResult {
  Tensor value;               ///< f(inputs), a scalar
  std::vector<Tensor> grads;  ///< d f / d input_i
  std::vector<Tensor> hvp;    ///< (H v)_i = sum_j d^2 f / (d input_i d input_j) v_j
};
/// @throws AutogradError when f is not a scalar or v does not match the inputs.
HvpResult hvp(const TensorFn& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v,
              const FunctionalOptions& options = {});

// ---- whole Jacobians and Hessians (one backward per output element: for small problems) ----------

// The results are plain tensors (not on any tape); an integer input gets an undefined block.

/// d f / d input_i for each input, shaped f.shape ++ input_i.shape (a scalar f gives the gradient).
std::vector<Tensor> jacobian(const TensorFn& f, const std::vector<Tensor>& inputs);
/// The one-input form: d f / d x, shaped f(x).shape ++ x.shape.
Tensor jacobian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x);

/// For scalar f: the blocks H[i][j] = d^2 f / (d input_i d input_j), shaped input_i.shape ++ input_j.shape
/// (one recorded backward, then one backward of it per element of the gradient).
std::vector<std::vector<Tensor>> hessian(const TensorFn& f, const std::vector<Tensor>& inputs);
/// The one-input form: d^2 f / d x^2, shaped x.shape ++ x.shape.
Tensor hessian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x);

}  // namespace tapegrad
