// Strided copies between an nd view and a contiguous buffer (contiguous(), permute and narrow
// backwards), written for speed without SIMD types: dimensions that are laid out back to back are
// merged first, then the innermost run is a tight loop (a memcpy when it is unit-stride).
// Same contracts as copy_strided / add_strided in kernels.hpp; the scalar reference stays the oracle.
#pragma once

#include <cstdint>
#include <cstring>

namespace tapegrad::kernels::fast {

// Merges dims of `shape` whose `strides` are back to back (the contiguous side is implied); returns
// the new ndim. Size-1 dims are dropped.
inline int merge_dims(int ndim, const int64_t* shape, const int64_t* strides, int64_t* out_shape,
                      int64_t* out_strides) {
  int n = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (n > 0 && out_strides[n - 1] == strides[d] * shape[d]) {
      out_shape[n - 1] *= shape[d];
      out_strides[n - 1] = strides[d];
    } else {
      out_shape[n] = shape[d];
      out_strides[n] = strides[d];
      ++n;
    }
  }
  return n;
}

// Calls row(offset_into_strided, contiguous_offset, length, inner_stride) for every innermost run.
template <class F>
void for_each_row(int ndim, const int64_t* shape, const int64_t* strides, F&& row) {
  int64_t s[8], st[8];
  const int n = merge_dims(ndim, shape, strides, s, st);
  int64_t total = 1;
  for (int d = 0; d < ndim; ++d) total *= shape[d];
  if (total == 0) return;
  if (n == 0) {
    row(0, 0, 1, 1);
    return;
  }
  const int64_t len = s[n - 1], inner = st[n - 1];
  int64_t idx[8] = {0}, off = 0;
  for (int64_t base = 0; base < total; base += len) {
    row(off, base, len, inner);
    for (int d = n - 2; d >= 0; --d) {
      if (++idx[d] < s[d]) {
        off += st[d];
        break;
      }
      off -= st[d] * (s[d] - 1);
      idx[d] = 0;
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

}  // namespace tapegrad::kernels::fast
