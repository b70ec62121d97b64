// Strided copies between an nd view and a contiguous buffer (contiguous(), permute and narrow
// backwards), written for speed without SIMD types: dimensions that are laid out back to back are
// merged first (kernels/nd_index.hpp), then the innermost run is a tight loop (a memcpy when it is
// unit-stride); large copies split across the threads. Same contracts as copy_strided, add_strided
// and write_strided in kernels.hpp; the scalar reference stays the oracle.
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstring>

#include "kernels/nd_index.hpp"
#include "kernels/runtime.hpp"

namespace tapegrad::kernels::fast {

// Elements a strided copy must move before it forks a team (a fork/join costs about what one core
// takes to copy 128 KiB here). A property of the size only: results never depend on it.
inline constexpr int64_t kParallelCopyMin = int64_t(1) << 16;

// Calls row(offset_into_strided, contiguous_offset, length, inner_stride) for every innermost run
// of the coalesced space (kernels/nd_index.hpp). Large spaces are split across the threads by
// outer index (or, for a single run, into pieces of it); every element is in exactly one call.
template <class F>
void for_each_row(int ndim, const int64_t* shape, const int64_t* strides, F&& row) {
  const nd::Space s = nd::coalesce(ndim, shape, 1, &strides);
  if (s.total == 0) return;
  const int64_t len = s.shape[s.ndim - 1], inner = s.stride[0][s.ndim - 1];
  const int64_t outer = s.total / len;
  const int nt = s.total < kParallelCopyMin || omp_in_parallel() ? 1 : num_threads();
  if (nt <= 1) {
    nd::for_each_outer(s, 1, [&](int64_t o, const int64_t* off) { row(off[0], o * len, len, inner); });
    return;
  }
  const bool split_rows = outer >= nt;
  const int64_t items = split_rows ? outer : len;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; ++t) {
    const int64_t begin = items * t / nt, end = items * (t + 1) / nt;
    if (!split_rows) {  // pieces of the one run (outer < nt: here, outer == 1)
      for (int64_t o = 0; o < outer; ++o) {
        int64_t off[1];
        nd::outer_offsets(s, 1, o, off);
        if (end > begin) row(off[0] + begin * inner, o * len + begin, end - begin, inner);
      }
      continue;
    }
    for (int64_t o = begin; o < end; ++o) {
      int64_t off[1];
      nd::outer_offsets(s, 1, o, off);
      row(off[0], o * len, len, inner);
    }
  }
}

template <class T>
void copy_strided(int ndim, const int64_t* shape, const T* x, const int64_t* xs, T* y) {
  for_each_row(ndim, shape, xs, [&](int64_t xo, int64_t yo, int64_t len, int64_t inner) {
    if (inner == 1) {
      std::memcpy(y + yo, x + xo, size_t(len) * sizeof(T));
    } else {
      for (int64_t i = 0; i < len; ++i) y[yo + i] = x[xo + i * inner];
    }
  });
}

template <class T>
void add_strided(int ndim, const int64_t* shape, const T* dy, T* dx, const int64_t* dxs) {
  for_each_row(ndim, shape, dxs, [&](int64_t xo, int64_t yo, int64_t len, int64_t inner) {
    T* d = dx + xo;
    const T* g = dy + yo;
    if (inner == 1) {
      for (int64_t i = 0; i < len; ++i) d[i] += g[i];
    } else {
      for (int64_t i = 0; i < len; ++i) d[i * inner] += g[i];
    }
  });
}

template <class T>
void write_strided(int ndim, const int64_t* shape, const T* x, T* y, const int64_t* ys) {
  for_each_row(ndim, shape, ys, [&](int64_t yo, int64_t xo, int64_t len, int64_t inner) {
    if (inner == 1) {
      std::memcpy(y + yo, x + xo, size_t(len) * sizeof(T));
    } else {
      for (int64_t i = 0; i < len; ++i) y[yo + i * inner] = x[xo + i];
    }
  });
}

}  // namespace tapegrad::kernels::fast
