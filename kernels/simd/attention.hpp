// SIMD additive (Bahdanau) attention scores and their backward (float32). Contracts and the scalar
// oracle: kernels/kernels.hpp, kernels/ref/ref.hpp.
//
// An attention RNN decoder scores all S encoder states at every step: v . tanh(k + q) over a
// [B, S, A] block. As a chain of elementwise kernels that is five passes over the block forward and
// eight backward (add, tanh, mul, sum; again add, tanh, mul, fill, tanh', copy, sum); here each
// (b, s) row of A values is one pass that keeps everything in registers, so the block is read once
// and, backward, dkeys written once. tanh (math.hpp) is recomputed backward rather than kept: keeping
// it would cost B*S*A floats per decoder step for the whole backward pass.
// Work splits over b. Backward, each b's share of dv goes to its own row and the rows are added in b
// order afterwards, so no result depends on the thread count.
#pragma once

#include <cstdint>

#include "kernels/simd/common.hpp"
#include "kernels/simd/math.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

// sum_a v[a] tanh(k[a] + q[a]) over one row of n values.
template <class Arch>
TG_INLINE float additive_score_row(int64_t n, const float* k, const float* q, const float* v) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B acc0(0.0f), acc1(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    const B t0 = tanh<Arch>(B::load_unaligned(k + c) + B::load_unaligned(q + c));
    const B t1 = tanh<Arch>(B::load_unaligned(k + c + W) + B::load_unaligned(q + c + W));
    acc0 = xsimd::fma(B::load_unaligned(v + c), t0, acc0);
    acc1 = xsimd::fma(B::load_unaligned(v + c + W), t1, acc1);
  }
  for (; c < n; c += W) {  // the padding of a tail is 0 in k, q and v: tanh(0) * 0 adds nothing
    const int64_t m = std::min<int64_t>(W, n - c);
    const B t = tanh<Arch>(load_tail<Arch>(k + c, m, 0.0f) + load_tail<Arch>(q + c, m, 0.0f));
    acc0 = xsimd::fma(load_tail<Arch>(v + c, m, 0.0f), t, acc0);
  }
  return hsum<Arch>(acc0 + acc1);
}

template <class Arch>
void additive_score_f32(int64_t nb, int64_t ns, int64_t na, const float* keys, const float* query, const float* v,
                        float* scores) {
  if (nb <= 0 || ns <= 0) return;
  const int nt = team_for(nb * ns * na * 8, nb);  // tanh costs ~8 plain elements
  parallel_ranges(nb, nt, [=](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t s = 0; s < ns; ++s)
        scores[b * ns + s] = additive_score_row<Arch>(na, keys + (b * ns + s) * na, query + b * na, v);
  });
}

// One (b, s) row backward: with t = tanh(k + q) and g = ds v (1 - t^2), dk += g, dq += g, dv += ds t.
// Null outputs are skipped (the branches are on loop invariants, hoisted by the compiler).
template <class Arch>
TG_INLINE void additive_score_row_backward(int64_t n, const float* k, const float* q, const float* v, float ds,
                                           float* dk, float* dq, float* dv) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B dsb(ds);
  for (int64_t c = 0; c < n; c += W) {
    const int64_t m = std::min<int64_t>(W, n - c);
    const bool full = m == W;
    auto load = [&](const float* p) { return full ? B::load_unaligned(p + c) : load_tail<Arch>(p + c, m, 0.0f); };
    auto add_to = [&](float* p, const B& x) {
      if (full)
        (B::load_unaligned(p + c) + x).store_unaligned(p + c);
      else
        store_tail<Arch>(p + c, m, load_tail<Arch>(p + c, m, 0.0f) + x);
    };
    const B t = tanh<Arch>(load(k) + load(q));
    if (dv) add_to(dv, dsb * t);
    if (dk || dq) {
      const B gv = dsb * load(v);
      const B g = xsimd::fnma(gv * t, t, gv);  // ds v - ds v t^2
      if (dk) add_to(dk, g);
      if (dq) add_to(dq, g);
    }
  }
}

template <class Arch>
void additive_score_backward_f32(int64_t nb, int64_t ns, int64_t na, const float* keys, const float* query,
                                 const float* v, const float* dscores, float* dkeys, float* dquery, float* dv) {
  if (nb <= 0 || ns <= 0 || na <= 0 || (!dkeys && !dquery && !dv)) return;
  Scratch dv_rows(dv ? nb * na : 1);  // row b: b's share of dv
  const int nt = team_for(nb * ns * na * 8, nb);
  parallel_ranges(nb, nt, [=, &dv_rows](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* dvb = dv ? dv_rows.p + b * na : nullptr;
      if (dvb) std::fill(dvb, dvb + na, 0.0f);
      for (int64_t s = 0; s < ns; ++s) {
        const float ds = dscores[b * ns + s];
        const int64_t row = (b * ns + s) * na;
        additive_score_row_backward<Arch>(na, keys + row, query + b * na, v, ds, dkeys ? dkeys + row : nullptr,
                                          dquery ? dquery + b * na : nullptr, dvb);
      }
    }
  });
  if (!dv) return;
  for (int64_t b = 0; b < nb; ++b)  // in b order, whatever the team was
    for (int64_t a = 0; a < na; ++a) dv[a] += dv_rows.p[b * na + a];
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(additive_score, additive_score_f32)
TG_SIMD_KERNEL(additive_score_backward, additive_score_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
