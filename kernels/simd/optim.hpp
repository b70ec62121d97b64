// SIMD Adam / AdamW update (float32) over a list of tensors, in place on each one's param, m, v.
// Contract: kernels/kernel_list.hpp. Purely elementwise, so blocks split across threads freely.
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

// The update's constants for weight decay wd, as the reference rounds them.
inline AdamConsts adam_consts(const AdamParams& p, double wd) {
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  return {float(p.beta1), float(1 - p.beta1), float(p.beta2), float(1 - p.beta2), float(bc1), float(bc2),
          float(p.lr),    float(p.eps),       float(wd),      float(p.lr * wd),   p.decoupled};
}

// All tensors in one team: each tensor is cut into blocks of kFlatBlock from its own start (so an
// element takes the vector body or the scalar tail whatever the thread count), and thread t takes
// the blocks that start in its t-th share of the tensors' elements laid end to end. One team for a
// model's 68 tensors instead of one per tensor (those under kParallelMinWork ran on one thread
// while the other waited): the small Transformer's update, memory evicted as after a backward, at
// 2 threads 636 -> 463 us (1 thread 764 -> 744).
template <class Arch>
void adam_update_f32(int64_t count, const AdamTensor<float>* tensors, const AdamParams& p) {
  const AdamConsts decayed = adam_consts(p, p.weight_decay), plain = adam_consts(p, 0.0);
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) total += tensors[t].n;
  const int nt = team_for(total * 6, total / kFlatBlock + count);
  parallel_ranges(total, nt, [&](int64_t e0, int64_t e1) {
    int64_t offset = 0;  // of tensor t's first element in the end-to-end order
    for (int64_t t = 0; t < count && offset < e1; offset += tensors[t].n, ++t) {
      const AdamTensor<float>& x = tensors[t];
      const AdamConsts& k = x.decay ? decayed : plain;
      const int64_t first = e0 <= offset ? 0 : (e0 - offset + kFlatBlock - 1) / kFlatBlock * kFlatBlock;
      for (int64_t j = first; j < x.n && offset + j < e1; j += kFlatBlock)
        adam_block<Arch>(j, std::min(x.n, j + kFlatBlock), x.param, x.grad, x.m, x.v, k);
    }
  });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(adam_update, adam_update_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
