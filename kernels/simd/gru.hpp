// SIMD GRU cell gates and their backward (float32). Contracts and the scalar oracle:
// kernels/kernel_list.hpp, kernels/ref/ref.hpp.
//
// A GRU runs this at every time step on [B, 3H] projections. Work splits over rows b; within a
// thread's rows the sigmoid and tanh passes are the vector versions unary uses (elementwise.hpp),
// run over the whole contiguous block of those rows, and the products and sums around them are
// plain loops the compiler vectorises. Those loops are compiled without fused multiply-adds
// (fp-contract=off) so that each product and sum is rounded on its own as it always has been:
// results are the same on every instruction set and thread count as the unfused composition
// (additions, kernels::unary for sigmoid and tanh, additions) they replace.
#pragma once

#include <cstdint>

#include "kernels/simd/common.hpp"
#include "kernels/simd/elementwise.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

#define TG_UNFUSED __attribute__((optimize("fp-contract=off")))

// rz[b] = xp[b, :2H] + hp[b, :2H] for rows [b0, b1) (the sigmoid follows).
TG_UNFUSED void gru_gate_inputs(int64_t b0, int64_t b1, int64_t H, const float* xp, int64_t xs,
                                const float* hp, int64_t hs, float* rz) {
  for (int64_t b = b0; b < b1; ++b) {
    const float *x = xp + b * xs, *p = hp + b * hs;
    float* g = rz + b * 2 * H;
    for (int64_t i = 0; i < 2 * H; ++i) g[i] = x[i] + p[i];
  }
}

// n[b] = xp_n + r * hp_n (the tanh follows).
TG_UNFUSED void gru_candidate_inputs(int64_t b0, int64_t b1, int64_t H, const float* xp, int64_t xs,
                                     const float* hp, int64_t hs, const float* rz, float* n) {
  for (int64_t b = b0; b < b1; ++b) {
    const float *x = xp + b * xs + 2 * H, *p = hp + b * hs + 2 * H, *r = rz + b * 2 * H;
    float* nb = n + b * H;
    for (int64_t i = 0; i < H; ++i) nb[i] = x[i] + r[i] * p[i];
  }
}

// y = n + z (h - n) = (1 - z) n + z h.
TG_UNFUSED void gru_blend(int64_t b0, int64_t b1, int64_t H, const float* rz, const float* n, const float* h,
                          float* y) {
  for (int64_t b = b0; b < b1; ++b) {
    const float *z = rz + b * 2 * H + H, *nb = n + b * H, *hb = h + b * H;
    float* yb = y + b * H;
    for (int64_t i = 0; i < H; ++i) yb[i] = nb[i] + z[i] * (hb[i] - nb[i]);
  }
}

template <class Arch>
void gru_cell_f32(int64_t B, int64_t H, const float* xp, int64_t xs, const float* hp, int64_t hs,
                  const float* h, float* rz, float* n, float* y) {
  using V = Batch<Arch>;
  if (B <= 0 || H <= 0) return;
  const int nt = team_for(B * H * 16, B);  // two transcendentals (~8 plain elements each) per hidden unit
  parallel_ranges(B, nt, [=](int64_t b0, int64_t b1) {
    gru_gate_inputs(b0, b1, H, xp, xs, hp, hs, rz);
    map1<Arch>(b0 * 2 * H, b1 * 2 * H, rz, rz, [](V v) { return sigmoid<Arch>(v); });
    gru_candidate_inputs(b0, b1, H, xp, xs, hp, hs, rz, n);
    map1<Arch>(b0 * H, b1 * H, n, n, [](V v) { return tanh<Arch>(v); });
    gru_blend(b0, b1, H, rz, n, h, y);
  });
}

// dst (+)= src over H values as the gradient output says.
TG_UNFUSED void gru_put(float* __restrict dst, const float* __restrict src, int64_t H, bool overwrite) {
  if (overwrite)
    for (int64_t i = 0; i < H; ++i) dst[i] = src[i];
  else
    for (int64_t i = 0; i < H; ++i) dst[i] += src[i];
}

// One row's gate gradients into the scratch rows ar, az, an, ah. The pointers are parameters of a
// function that is not inlined so that their __restrict holds (GCC drops it on local pointers): as
// locals, the alias checks between nine pointers were given up and the loop ran scalar, and the
// backward of B 64, H 256 took 37 us on Zen 5 instead of 12.
TG_UNFUSED __attribute__((noinline)) void gru_backward_row(
    int64_t H, const float* __restrict r_, const float* __restrict z_, const float* __restrict d,
    const float* __restrict nb, const float* __restrict hb, const float* __restrict pn, float* __restrict ar,
    float* __restrict az, float* __restrict an, float* __restrict ah) {
  for (int64_t i = 0; i < H; ++i) {
    const float dv = d[i], r = r_[i], z = z_[i], nv = nb[i];
    const float da_n = dv * (1.0f - z) * (1.0f - nv * nv);
    an[i] = da_n;
    ar[i] = da_n * pn[i] * r * (1.0f - r);
    az[i] = dv * (hb[i] - nv) * z * (1.0f - z);
    ah[i] = dv * z;
  }
}

// Rows [b0, b1) of the backward. Per row the gate gradients go into a scratch row (one branch-free
// loop) and are then written or added to each wanted output.
TG_UNFUSED void gru_backward_rows(int64_t b0, int64_t b1, int64_t H, const float* rz, const float* n,
                                  const float* hp, int64_t hs, const float* h, const float* dy,
                                  const GradOutput<float>& dxp, const GradOutput<float>& dhp,
                                  const GradOutput<float>& dh, float* scratch) {
  float *ar = scratch, *az = ar + H, *an = az + H, *ah = an + H;
  for (int64_t b = b0; b < b1; ++b) {
    const float* g = rz + b * 2 * H;
    gru_backward_row(H, g, g + H, dy + b * H, n + b * H, h + b * H, hp + b * hs + 2 * H, ar, az, an, ah);
    const int64_t row = b * 3 * H;
    if (dxp.data) {
      gru_put(dxp.data + row, ar, H, dxp.overwrite);
      gru_put(dxp.data + row + H, az, H, dxp.overwrite);
      gru_put(dxp.data + row + 2 * H, an, H, dxp.overwrite);
    }
    if (dhp.data) {
      gru_put(dhp.data + row, ar, H, dhp.overwrite);
      gru_put(dhp.data + row + H, az, H, dhp.overwrite);
      for (int64_t i = 0; i < H; ++i) an[i] *= g[i];  // dhp_n = dxp_n r
      gru_put(dhp.data + row + 2 * H, an, H, dhp.overwrite);
    }
    if (dh.data) gru_put(dh.data + b * H, ah, H, dh.overwrite);
  }
}

template <class Arch>
void gru_cell_backward_f32(int64_t B, int64_t H, const float* rz, const float* n, const float* hp, int64_t hs,
                           const float* h, const float* dy, GradOutput<float> dxp, GradOutput<float> dhp,
                           GradOutput<float> dh) {
  if (B <= 0 || H <= 0 || (!dxp.data && !dhp.data && !dh.data)) return;
  const int nt = team_for(B * H * 8, B);
  parallel_ranges(B, nt, [=](int64_t b0, int64_t b1) {
    Scratch scratch(4 * H);
    gru_backward_rows(b0, b1, H, rz, n, hp, hs, h, dy, dxp, dhp, dh, scratch.p);
  });
}

#undef TG_UNFUSED

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(gru_cell, gru_cell_f32)
TG_SIMD_KERNEL(gru_cell_backward, gru_cell_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
