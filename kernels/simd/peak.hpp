// The FMA loop the measured peak times (kernel-list row fma_loop): twelve independent vector chains
// of acc = acc * a + b, enough to keep two FMA units of 4-5 cycles' latency busy (AVX2 and AVX-512
// on Zen 3/4/5 and Intel cores since Haswell). On SSE2, which has no FMA, xsimd splits each into a
// multiply and an add: still two operations per lane.
#pragma once

#include "kernels/simd/common.hpp"

namespace tapegrad::kernels::simd {
namespace {

template <class Arch>
double fma_loop_f32(int64_t iterations, float* sink) {
  using B = Batch<Arch>;
  constexpr int kChains = 12;
  B acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = B(1.0f + float(j) * 1e-3f);
  const B a(0.999999f), b(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = xsimd::fma(acc[j], a, b);
  B total(0.0f);
  for (int j = 0; j < kChains; ++j) total += acc[j];
  sink[0] = hsum<Arch>(total);
  return 2.0 * kChains * double(B::size) * double(iterations);
}
TG_SIMD_KERNEL(fma_loop, fma_loop_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd
