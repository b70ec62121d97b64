// Index-space plumbing for the broadcasting kernels (binary, binary_backward, sum_to): the shared
// coalescing of kernels/nd_index.hpp and a split of the space into runs along the last dimension,
// handed to threads. Kernels vectorise the last dimension by the kind of its strides (1, 0, or
// other) and only the outer dimensions pay for the general nd walk.
#pragma once

#include "kernels/nd_index.hpp"
#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

using nd::coalesce;
using nd::outer_offsets;
using nd::Space;

// Elements per run: long enough to amortise the outer index arithmetic, short enough that a flat
// same-shape op still splits across threads.
inline constexpr int64_t kRunChunk = 8192;

// Calls body(off, j0, j1) for runs [j0, j1) of the last dimension, where off[k] is operand k's
// offset at j = 0 of that run's outer index. Runs are split across `nt` threads; each output element
// belongs to exactly one run, so this is safe whenever the output operand is not broadcast.
template <class Body>
void for_each_run(const Space& s, int nops, int nt, Body&& body) {
  const int64_t inner = s.shape[s.ndim - 1];
  const int64_t chunks = (inner + kRunChunk - 1) / kRunChunk;
  const int64_t outer = s.total / inner;
  parallel_ranges(outer * chunks, nt, [&](int64_t w0, int64_t w1) {
    int64_t off[3];
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t o = w / chunks, j = w % chunks;
      outer_offsets(s, nops, o, off);
      body(off, j * kRunChunk, std::min(inner, (j + 1) * kRunChunk));
    }
  });
}

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
