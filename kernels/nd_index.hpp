// The nd index space every strided kernel walks (broadcasting elementwise ops and their adjoints,
// strided copies, where) and batched matmul's broadcasting: coalescing, then a row-major walk.
//
// Coalescing drops size-1 dimensions and merges neighbours that every operand walks contiguously,
// so a same-shape op becomes one flat run, a bias add [B, T, C] + [C] becomes [B*T, C] with the bias
// stride 0 then 1, and a scalar operand has stride 0 everywhere. Callers then treat the last
// dimension as a run (a tight or vector loop) and only the outer dimensions pay for the nd walk:
// an odometer (for_each_outer) where the walk is sequential, or a division (outer_offsets) where
// threads start at arbitrary outer indices. Coalescing never reorders: element i of the coalesced
// walk is element i of the row-major walk of the original shape.
#pragma once

#include <cstdint>

namespace tapegrad::kernels::nd {
// Internal linkage on purpose: the SIMD units (kernels/simd/isa_*.cpp, each with its own -m flags)
// include this too, and the linker must not hand one unit's copy to another (kernels/simd/common.hpp).
namespace {

inline constexpr int kMaxDims = 8;
inline constexpr int kMaxOperands = 3;

// Up to kMaxOperands operands' strides over one shape. stride[k][d] is operand k's stride in dim d.
struct Space {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxOperands][kMaxDims] = {};
  int64_t total = 0;
};

// Coalesces `ndim` dims of `shape` for `nops` operands (strides[k] == nullptr means contiguous in
// shape, i.e. an output). The result has ndim >= 1 unless total == 0; a single element is [1].
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

// Number of outer indices (all dims but the last) of a non-empty space.
inline int64_t outer_count(const Space& s) {
  return s.total / s.shape[s.ndim - 1];
}

// Offsets of each operand at the start of outer index `o`.
inline void outer_offsets(const Space& s, int nops, int64_t o, int64_t* off) {
  for (int k = 0; k < nops; ++k) off[k] = 0;
  for (int d = s.ndim - 2; d >= 0; --d) {
    const int64_t i = o % s.shape[d];
    o /= s.shape[d];
    for (int k = 0; k < nops; ++k) off[k] += i * s.stride[k][d];
  }
}

// Calls f(o, off) for every outer index o of a non-empty space in order, off[k] being operand k's
// offset at the start of that row (an odometer: no division per row).
template <class F>
void for_each_outer(const Space& s, int nops, F&& f) {
  int64_t idx[kMaxDims] = {0}, off[kMaxOperands] = {0};
  const int64_t outer = outer_count(s);
  for (int64_t o = 0; o < outer; ++o) {
    f(o, static_cast<const int64_t*>(off));
    for (int d = s.ndim - 2; d >= 0; --d) {
      if (++idx[d] < s.shape[d]) {
        for (int k = 0; k < nops; ++k) off[k] += s.stride[k][d];
        break;
      }
      for (int k = 0; k < nops; ++k) off[k] -= s.stride[k][d] * (s.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// Calls f(i, off) for every element i of the row-major walk of `shape`, off[k] being operand k's
// offset there.
template <class F>
void for_each_index(int ndim, const int64_t* shape, int nops, const int64_t* const* strides, F&& f) {
  const Space s = coalesce(ndim, shape, nops, strides);
  if (s.total == 0) return;
  const int last = s.ndim - 1;
  const int64_t len = s.shape[last];
  for_each_outer(s, nops, [&](int64_t o, const int64_t* row) {
    int64_t off[kMaxOperands];
    for (int k = 0; k < nops; ++k) off[k] = row[k];
    for (int64_t j = 0; j < len; ++j) {
      f(o * len + j, static_cast<const int64_t*>(off));
      for (int k = 0; k < nops; ++k) off[k] += s.stride[k][last];
    }
  });
}

}  // namespace
}  // namespace tapegrad::kernels::nd
