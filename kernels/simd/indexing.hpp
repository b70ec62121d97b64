// SIMD embedding gather and scatter-add (float32). Shapes: table / dtable [rows_of_table, dim],
// ids [n], y / dy [n, dim]. Contracts: kernels/kernels.hpp.
//
// The gather is a row copy (memcpy is already the vector loop), split over ids. The scatter-add
// must add repeated ids in index order, like the reference: columns are split across threads, and
// each thread walks every id in order over its own columns, so the order per element is the
// reference's whatever the thread count. Narrow tables (dim below two batches per thread) have too
// few columns to share and run on one thread.
#pragma once

#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

template <class Arch>
void embedding_f32(int64_t n, int64_t dim, const float* table, const int32_t* ids, float* y) {
  if (n <= 0 || dim <= 0) return;
  parallel_ranges(n, team_for(n * dim, n), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      std::memcpy(y + i * dim, table + int64_t(ids[i]) * dim, sizeof(float) * size_t(dim));
  });
}

// dtable[ids[i], c] += dy[i, c] for columns [c0, c1), ids in order. Sizes and pointers by value
// (see affine_block).
template <class Arch>
void embedding_backward_columns(int64_t n, int64_t dim, const int32_t* ids, const float* dy, float* dtable,
                                int64_t c0, int64_t c1) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  for (int64_t i = 0; i < n; ++i) {
    const float* src = dy + i * dim;
    float* dst = dtable + int64_t(ids[i]) * dim;
    int64_t c = c0;
    for (; c + W <= c1; c += W)
      (B::load_unaligned(dst + c) + B::load_unaligned(src + c)).store_unaligned(dst + c);
    for (; c < c1; ++c) dst[c] += src[c];
  }
}

// dtable[ids[i], :] += dy[i, :]
template <class Arch>
void embedding_backward_f32(int64_t n, int64_t dim, const int32_t* ids, const float* dy, float* dtable) {
  constexpr int64_t W = Batch<Arch>::size;
  if (n <= 0 || dim <= 0) return;
  const int64_t vcols = (dim + W - 1) / W;
  parallel_ranges(vcols, team_for(n * dim, vcols / 2), [&](int64_t v0, int64_t v1) {
    embedding_backward_columns<Arch>(n, dim, ids, dy, dtable, v0 * W, std::min(dim, v1 * W));
  });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(embedding, embedding_f32)
TG_SIMD_KERNEL(embedding_backward, embedding_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
