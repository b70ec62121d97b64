// Helpers shared by the op implementations: argument checks, contiguous inputs, broadcast strides,
// gradient buffers. Internal to src/ops.
#pragma once

#include <string>

#include "internal.hpp"
#include "kernels/kernels.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/ops.hpp"

namespace tapegrad::detail {

inline void check_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw Error(std::string(op) + ": " + what + " is undefined");
}

// Both floating and of one dtype; the message names the op and both tensors.
inline void check_same_float(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first input");
  check_defined(b, op, "second input");
  if (!a.is_floating() || a.dtype() != b.dtype())
    throw DTypeError(std::string(op) + ": dtypes differ or are not floating: a=" + a.describe() + " b=" + b.describe());
}

inline void check_float(const Tensor& a, const char* op) {
  check_defined(a, op, "input");
  if (!a.is_floating()) throw DTypeError(std::string(op) + ": expected a floating tensor, got " + a.describe());
}

// `t` itself when contiguous, else a contiguous copy (not recorded: callers accumulate into `t`).
inline Tensor contiguous_data(const Tensor& t) { return t.is_contiguous() ? t : t.clone(); }

// Strides of `t` read in the index space `out` (numpy alignment from the right), 0 where broadcast.
inline Shape broadcast_strides(const Tensor& t, const Shape& out) {
  Shape s = out;
  const int off = out.ndim() - t.ndim();
  for (int i = 0; i < out.ndim(); ++i) {
    const int j = i - off;
    s[i] = (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
  }
  return s;
}

// Contiguous strides of shape `in` read in the index space `out`, 0 where broadcast: where each
// element of `out` lands when summed back down to `in`.
inline Shape reduction_strides(const Shape& in, const Shape& out) {
  const Shape cs = contiguous_strides(in);
  Shape s = out;
  const int off = out.ndim() - in.ndim();
  for (int i = 0; i < out.ndim(); ++i) {
    const int j = i - off;
    s[i] = (j < 0 || in[j] == 1) ? 0 : cs[j];
  }
  return s;
}

// t.grad += dy, where dy is the gradient an entry's backward received. When t has no gradient yet
// and nothing but the backward loop holds dy (not retained, not shared), t takes over dy's storage
// instead of copying it. Call it last among the readers of dy in that backward, and at most once.
inline void accumulate_grad_take(const Tensor& t, const Tensor& dy) {
  TensorImpl& ti = *t.impl();
  if (!ti.grad.defined() && dy.shape() == ti.shape && dy.is_contiguous() && dy.impl_ptr().use_count() == 1 &&
      dy.impl()->storage.use_count() == 1 && !dy.requires_grad()) {
    ti.grad = make_view(dy, dy.shape(), dy.strides(), dy.impl()->offset);
    return;
  }
  accumulate_grad(t, dy);
}

// The gradient of `t`, zero-filled if it did not exist yet, ready for kernels that accumulate.
inline Tensor accumulation_buffer(const Tensor& t) {
  bool fresh = false;
  Tensor g = grad_buffer(t, &fresh);
  if (fresh)
    visit_float(t.dtype(), "backward", [&](auto z) {
      using T = decltype(z);
      kernels::fill<T>(g.numel(), T(0), g.template data<T>());
    });
  return g;
}

// Adds a gradient `g` computed in the broadcast index space `g.shape()` into t.grad, summing over
// the dimensions along which t was broadcast.
inline void accumulate_broadcast_grad(const Tensor& t, Tensor g) {
  if (g.shape() == t.shape()) {
    accumulate_grad(t, std::move(g));
    return;
  }
  Tensor dt = accumulation_buffer(t);
  const Shape rs = reduction_strides(t.shape(), g.shape());
  visit_float(t.dtype(), "backward", [&](auto z) {
    using T = decltype(z);
    kernels::sum_to<T>(g.ndim(), g.shape().data(), g.template data<T>(), rs.data(), dt.template data<T>());
  });
}

}  // namespace tapegrad::detail
