// SIMD Adam / AdamW update (float32), in place on param, m, v; all four arrays have n elements.
// Contract: kernels/kernels.hpp. Purely elementwise, so blocks split across threads freely.
//
// The arithmetic follows the reference step by step (float moments, bias corrections computed in
// double and applied by division), so the two agree to an ulp or two per step.
#pragma once

#include <cmath>

#include "kernels/simd/common.hpp"
#include "kernels/simd/elementwise.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

// The update's constants, in float, as the reference rounds them.
struct AdamConsts {
  float b1, c1, b2, c2, bc1, bc2, lr, eps, wd, lr_wd;
  bool decoupled;
};

// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
// with g = grad + wd * p (Adam, L2 in the moments) or p -= lr * wd * p first (AdamW, decoupled).
// V is a batch or float: the same expression serves the vector body and the scalar tail.
template <class V>
TG_INLINE void adam_step(const AdamConsts& k, V g, V w, V mi, V vi, V& w_out, V& m_out, V& v_out) {
  using std::sqrt;
  using xsimd::sqrt;
  if (k.decoupled)
    w = w - V(k.lr_wd) * w;  // AdamW: decay the weight, not the gradient
  else
    g = g + V(k.wd) * w;  // Adam with L2: decay enters the moments
  mi = V(k.b1) * mi + V(k.c1) * g;
  vi = V(k.b2) * vi + V(k.c2) * g * g;
  const V mhat = mi / V(k.bc1), vhat = vi / V(k.bc2);
  w_out = w - V(k.lr) * mhat / (sqrt(vhat) + V(k.eps));
  m_out = mi;
  v_out = vi;
}

// One block [i0, i1); sizes and pointers by value (see affine_block).
template <class Arch>
void adam_block(int64_t i0, int64_t i1, float* param, const float* grad, float* m, float* v, AdamConsts k) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  int64_t i = i0;
  for (; i + W <= i1; i += W) {
    B w_out, m_out, v_out;
    adam_step(k, B::load_unaligned(grad + i), B::load_unaligned(param + i), B::load_unaligned(m + i),
              B::load_unaligned(v + i), w_out, m_out, v_out);
    w_out.store_unaligned(param + i);
    m_out.store_unaligned(m + i);
    v_out.store_unaligned(v + i);
  }
  for (; i < i1; ++i) adam_step(k, grad[i], param[i], m[i], v[i], param[i], m[i], v[i]);
}

template <class Arch>
void adam_update_f32(int64_t n, float* param, const float* grad, float* m, float* v, const AdamParams& p) {
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  const AdamConsts k{
      float(p.beta1), float(1 - p.beta1), float(p.beta2), float(1 - p.beta2),    float(bc1),
      float(bc2),     float(p.lr),        float(p.eps),   float(p.weight_decay), float(p.lr * p.weight_decay),
      p.decoupled};
  parallel_flat(n, 6, [&](int64_t i0, int64_t i1) { adam_block<Arch>(i0, i1, param, grad, m, v, k); });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(adam_update, adam_update_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
