// The argument types of the kernel interface (kernels/kernels.hpp): operation selectors and the
// option structs some kernels take. Kept apart so the dispatch table (kernels/table.hpp) can be
// declared without the routing functions.
#pragma once

#include <cstdint>

#include "kernels/runtime.hpp"

namespace tapegrad::kernels {

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

// adam_update's hyper-parameters.
struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;  // weight_decay: decoupled (AdamW) if decoupled
  bool decoupled;
  int64_t step;  // 1-based, for bias correction
};

// A gradient output of a backward kernel that can write as well as add: data null means the
// gradient is not wanted; overwrite means the buffer holds no earlier gradient, so the kernel writes
// it instead of adding to it (and need not have it zeroed first).
template <class T>
struct GradOutput {
  T* data = nullptr;
  bool overwrite = false;
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

}  // namespace tapegrad::kernels
