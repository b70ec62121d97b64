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

// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
// with g = grad + wd * p (Adam, L2 in the moments) or p -= lr * wd * p first (AdamW, decoupled).
template <class Arch>
void adam_update_f32(int64_t n, float* param, const float* grad, float* m, float* v, const AdamParams& p) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  const float b1 = float(p.beta1), c1 = float(1 - p.beta1), b2 = float(p.beta2), c2 = float(1 - p.beta2);
  const float fbc1 = float(bc1), fbc2 = float(bc2), lr = float(p.lr), eps = float(p.eps);
  const float wd = float(p.weight_decay), lr_wd = float(p.lr * p.weight_decay);
  const bool decoupled = p.decoupled;
  parallel_flat(n, 6, [&](int64_t i0, int64_t i1) {
    auto step = [&](auto g, auto w, auto mi, auto vi, auto& w_out, auto& m_out, auto& v_out) {
      using V = decltype(g);
      if (decoupled)
        w = w - V(lr_wd) * w;  // AdamW: decay the weight, not the gradient
      else
        g = g + V(wd) * w;  // Adam with L2: decay enters the moments
      mi = V(b1) * mi + V(c1) * g;
      vi = V(b2) * vi + V(c2) * g * g;
      const V mhat = mi / V(fbc1), vhat = vi / V(fbc2);
      using std::sqrt;
      using xsimd::sqrt;
      w_out = w - V(lr) * mhat / (sqrt(vhat) + V(eps));
      m_out = mi;
      v_out = vi;
    };
    int64_t i = i0;
    for (; i + W <= i1; i += W) {
      B w_out, m_out, v_out;
      step(B::load_unaligned(grad + i), B::load_unaligned(param + i), B::load_unaligned(m + i),
           B::load_unaligned(v + i), w_out, m_out, v_out);
      w_out.store_unaligned(param + i);
      m_out.store_unaligned(m + i);
      v_out.store_unaligned(v + i);
    }
    for (; i < i1; ++i) step(grad[i], param[i], m[i], v[i], param[i], m[i], v[i]);
  });
}

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
