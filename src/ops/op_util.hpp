// Helpers shared by the op implementations: argument checks, contiguous inputs, broadcast strides.
// Internal to src/ops. Backwards write gradients only through the three entry points in autograd.hpp.
#pragma once

#include <string>

#include "kernels/kernels.hpp"
#include "src/internal.hpp"
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
    throw DTypeError(std::string(op) + ": dtypes differ or are not floating: a=" + a.describe() +
                     " b=" + b.describe());
}

// `what` (an op's probability: "dropout: p") in [0, 1), else Error naming it.
inline void check_probability(double p, const std::string& what) {
  if (!(p >= 0 && p < 1)) throw Error(what + " must be in [0, 1), got " + std::to_string(p));
}

inline void check_float(const Tensor& a, const char* op) {
  check_defined(a, op, "input");
  if (!a.is_floating())
    throw DTypeError(std::string(op) + ": expected a floating tensor, got " + a.describe());
}

// `t` itself when contiguous, else a contiguous copy (not recorded: callers accumulate into `t`).
inline Tensor contiguous_data(const Tensor& t) {
  return t.is_contiguous() ? t : t.clone();
}

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

// g, computed in a broadcast index space, summed down to `shape` with recorded ops (sum over the
// dimensions `shape` lacks or has as 1, then a reshape): how a create_graph backward hands a broadcast
// operand its gradient (elementwise ops, matmul's batch dimensions).
inline Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  Tensor r = g;
  const int off = g.ndim() - shape.ndim();
  for (int d = g.ndim() - 1; d >= 0; --d)
    if (const int j = d - off; (j < 0 || shape[j] == 1) && g.shape()[d] != 1) r = sum(r, d, true);
  return r.shape() == shape ? r : reshape(r, shape);
}

// The fused ops written again with primitive recorded ops, each defined beside its op: what its
// create_graph backward differentiates (backward_through), tested against the fused kernels.
Tensor gru_cell_composite(const Tensor& xp, const Tensor& hp, const Tensor& h);
Tensor additive_score_composite(const Tensor& keys, const Tensor& query, const Tensor& v);
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionSpec& spec);
Tensor feed_forward_relu_composite(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                                   const Tensor& b2, double dropout_p, uint64_t dropout_seed);

}  // namespace tapegrad::detail
