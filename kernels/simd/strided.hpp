// Index-space plumbing for the broadcasting kernels (binary, binary_backward, sum_to): dimension
// coalescing and a split of the space into runs along the last dimension.
//
// Coalescing drops size-1 dimensions and merges neighbours that every operand walks contiguously,
// so a same-shape op becomes one flat run, a bias add [B, T, C] + [C] becomes [B*T, C] with the bias
// stride 0 then 1, and a scalar operand has stride 0 everywhere. Kernels then vectorise the last
// dimension by the kind of its strides (1, 0, or other) and only the outer dimensions pay for the
// general nd walk.
#pragma once

#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

inline constexpr int kMaxDims = 8;

// Up to three operands' strides over one shape. stride[k][d] is operand k's stride in dimension d.
struct Space {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[3][kMaxDims] = {};
  int64_t total = 0;
};

// Coalesces `ndim` dims of `shape` for `nops` operands (strides[k] == nullptr means contiguous in
// shape, i.e. the output). Result has ndim >= 1 unless total == 0.
inline Space coalesce(int ndim, const int64_t* shape, int nops, const int64_t* const* strides) {
  Space s;
  s.total = 1;
  for (int d = 0; d < ndim; ++d) s.total *= shape[d];
  if (s.total == 0) return s;
  int64_t contig[kMaxDims];
  int64_t acc = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    contig[d] = acc;
    acc *= shape[d];
  }
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (s.ndim > 0) {
      bool merge = true;
      const int p = s.ndim - 1;
      for (int k = 0; k < nops; ++k) {
        const int64_t sd = strides[k] ? strides[k][d] : contig[d];
        if (s.stride[k][p] != sd * shape[d]) merge = false;
      }
      if (merge) {
        s.shape[p] *= shape[d];
        for (int k = 0; k < nops; ++k) s.stride[k][p] = strides[k] ? strides[k][d] : contig[d];
        continue;
      }
    }
    s.shape[s.ndim] = shape[d];
    for (int k = 0; k < nops; ++k) s.stride[k][s.ndim] = strides[k] ? strides[k][d] : contig[d];
    ++s.ndim;
  }
  if (s.ndim == 0) {  // every dim was 1: a single element
    s.ndim = 1;
    s.shape[0] = 1;
    for (int k = 0; k < nops; ++k) s.stride[k][0] = 1;
  }
  return s;
}

// Offsets of each operand at the start of outer index `o` (all dims but the last).
inline void outer_offsets(const Space& s, int nops, int64_t o, int64_t* off) {
  for (int k = 0; k < nops; ++k) off[k] = 0;
  for (int d = s.ndim - 2; d >= 0; --d) {
    const int64_t i = o % s.shape[d];
    o /= s.shape[d];
    for (int k = 0; k < nops; ++k) off[k] += i * s.stride[k][d];
  }
}

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
