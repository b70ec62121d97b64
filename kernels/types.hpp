// The argument types of the kernel interface (kernels/kernels.hpp): operation selectors and the
// option structs some kernels take. Kept apart so the dispatch table (kernels/table.hpp) can be
// declared without the routing functions.
#pragma once

#include <cstdint>

#include "kernels/runtime.hpp"

namespace tapegrad::kernels {

// The constants of gelu, shared by its kernels and by the ops that differentiate it again.
inline constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
inline constexpr double kGeluCubic = 0.044715;              // the tanh form's cubic coefficient
inline constexpr double kInvSqrt2 = 0.7071067811865476;     // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;   // 1/sqrt(2 pi)

enum class Unary { neg, exp, log, sqrt, abs, tanh, sigmoid, relu, gelu_tanh, gelu_erf, softplus };
enum class Binary { add, sub, mul, div, pow };

// softmax: y = softmax(scale * x + mask) row-wise. mask is null, or an additive (mask_rows x cols)
// matrix applied to row r as mask[r % mask_rows] (so one T x T mask serves every batch and head).
// causal = true masks column c > (r % causal_period) + causal_offset with -inf (decoder self-attention).
struct SoftmaxOptions {
  double scale = 1.0;
  const void* mask = nullptr;  // same type as x
  int64_t mask_rows = 0;
  bool causal = false;
  int64_t causal_period = 0;  // rows per (batch, head) block; 0 = cols
  int64_t causal_offset = 0;
};

// What a GEMM does to each element of C as it stores its tiles, in this order: adds bias[j] (N
// values, a linear layer's bias), then applies `act`: relu, max(x, 0) as Unary::relu computes it
// (NaN gives 0); or relu_gate, x * [gate(i, j) > 0] with gate an M x N matrix at row stride ldg:
// the gradient through a ReLU whose output is gate, times the GEMM's product (the multiplication
// keeps a NaN of the product where the gate is shut, as relu's backward does). So
// C = act(alpha * op(A) op(B) + beta * C + bias). The default does nothing.
enum class GemmAct : uint8_t { none, relu, relu_gate };
template <class T>
struct GemmEpilogue {
  const T* bias = nullptr;
  GemmAct act = GemmAct::none;
  const T* gate = nullptr;  // relu_gate only
  int64_t ldg = 0;
};

// The activation of ep on v, the value stored at (i, j) of C: the scalar rule every GEMM path follows
// (the micro-kernel's vector form computes the same).
template <class T>
T gemm_activate(const GemmEpilogue<T>& ep, int64_t i, int64_t j, T v) {
  if (ep.act == GemmAct::relu) return v > T(0) ? v : T(0);
  if (ep.act == GemmAct::relu_gate) return v * (ep.gate[i * ep.ldg + j] > T(0) ? T(1) : T(0));
  return v;
}

// adam_update's hyper-parameters.
struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;  // weight_decay: decoupled (AdamW) if decoupled
  bool decoupled;
  int64_t step;  // 1-based, for bias correction
};

// One tensor of an adam_update: n elements each of param, grad and the moments m and v; decay
// false leaves it out of the weight decay (biases and norms without AdamOptions::decay_vectors).
template <class T>
struct AdamTensor {
  int64_t n;
  T* param;
  const T* grad;
  T* m;
  T* v;
  bool decay = true;
};

// A gradient output of a backward kernel that can write as well as add: data null means the
// gradient is not wanted; overwrite means the buffer holds no earlier gradient, so the kernel writes
// it instead of adding to it (and need not have it zeroed first).
template <class T>
struct GradOutput {
  T* data = nullptr;
  bool overwrite = false;
};

// The matrices of a batched GEMM (kernels::gemm_batched, gemm_nd_batched): outer x inner of them,
// matrix m = o * inner + i of operand k (0 A, 1 B, 2 C) starting o * outer_stride[k] +
// i * inner_stride[k] elements in (0 broadcasts that operand). Two levels, so that attention's
// heads, which sit apart from the batch ([B, H] strides T*3C and d: the two do not merge), run as
// one batch of B*H matrices, one thread team for all of them.
struct BatchLayout {
  int64_t outer = 1, inner = 0;
  int64_t outer_stride[3] = {0, 0, 0}, inner_stride[3] = {0, 0, 0};
  int64_t count() const { return outer * inner; }
  int64_t offset(int k, int64_t m) const { return m / inner * outer_stride[k] + m % inner * inner_stride[k]; }
};

// op(B) (K x N) packed once for many GEMMs that share it (kernels::pack_b).
template <class T>
struct PackedB {
  bool trans = false;
  int64_t K = 0, N = 0, ld = 0;
  const T* source = nullptr;
  Isa isa = Isa::scalar;
  const T* panels = nullptr;  // null if nothing was packed
};

// Fused scaled-dot-product attention (sdpa_forward / sdpa_backward): sizes, operand layouts and
// options. Every operand is logically [B, H, T, d] and addressed through its strides (in elements)
// along b, h and t; its last dimension is contiguous. So q, k and v can be permuted or narrowed
// views (heads split off a projection's feature axis) read in place, and o can be written in
// whatever order the next op wants.
struct AttentionStrides {
  int64_t b = 0, h = 0, t = 0;
};
struct AttentionLayout {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, dk = 0, dv = 0;
  AttentionStrides q, k, v;       // q [B,H,Tq,dk], k [B,H,Tk,dk], v [B,H,Tk,dv]
  AttentionStrides o;             // o [B,H,Tq,dv], and its gradient do in the same layout
  AttentionStrides dq, dk_, dv_;  // the gradients' own layouts (backward; may differ from the inputs')
  double scale = 1.0;             // scores are scale * q . k + mask
  // Additive mask, same type as the operands, or null: row (b, h, i) of Tk values starts at
  // b * mask_strides.b + h * mask_strides.h + i * mask_strides.t (0 strides broadcast).
  const void* mask = nullptr;
  AttentionStrides mask_strides;
  // causal: key j is masked (-inf) for query i when j > i + (Tk - Tq), queries aligned to the last keys.
  bool causal = false;
  // Dropout on the weights: weight (b, h, i, j) is kept, and scaled by 1 / (1 - dropout), iff
  // uniform_at(dropout_seed, ((b * H + h) * Tq + i) * Tk + j) >= dropout, the mask the dropout
  // kernel draws for the contiguous [B, H, Tq, Tk] weights. 0 = none.
  double dropout = 0.0;
  uint64_t dropout_seed = 0;
};

}  // namespace tapegrad::kernels
