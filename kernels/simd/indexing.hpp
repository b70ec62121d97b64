// SIMD embedding gather and scatter-add (float32). Shapes: table / dtable [rows_of_table, dim],
// ids [n], y / dy [n, dim]. Contracts: kernels/kernels.hpp.
//
// The gather is a row copy (memcpy is already the vector loop), split over ids. The scatter-add
// must add repeated ids in index order, like the reference: each thread owns a range of table rows
// and walks every id in order, adding the dy rows of its own. Splitting the columns instead (each
// thread half of every row) made it 5.6x slower at 2 threads than at 1 (2048 ids of dim 128 into
// 30 rows, dy just written by both cores: 31 -> 173 us): each thread read every dy row.
#pragma once

#include <algorithm>
#include <vector>

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

// dtable[r, :] = (accumulate ? dtable[r, :] : 0) + the dy rows of the ids equal to r, in index
// order, for the table rows r in [r0, r1). Sizes and pointers by value (see affine_block).
template <class Arch>
void embedding_backward_rows(int64_t n, int64_t dim, const int32_t* ids, const float* dy, float* dtable,
                             int64_t r0, int64_t r1, bool accumulate) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  if (!accumulate) std::fill(dtable + r0 * dim, dtable + r1 * dim, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = ids[i];
    if (r < r0 || r >= r1) continue;
    const float* src = dy + i * dim;
    float* dst = dtable + r * dim;
    int64_t c = 0;
    for (; c + W <= dim; c += W)
      (B::load_unaligned(dst + c) + B::load_unaligned(src + c)).store_unaligned(dst + c);
    for (; c < dim; ++c) dst[c] += src[c];
  }
}

// Elements (ids x dim) below which the scatter-add runs on one thread: dy's rows are spread over
// both cores' caches either way, and a team gained nothing below about half a million (median us,
// 1 thread / 2, dy just written by both cores, Zen 5: 2048 x 128 into 30 rows 32 / 41, 2048 x 512
// into 1000 rows 221 / 223, 2048 x 384 into 8000 rows 235 / 173).
inline constexpr int64_t kScatterTeamMinWork = int64_t(1) << 19;

// dtable[ids[i], :] += dy[i, :] (dtable zeroed first unless accumulating), over the table's `rows`.
template <class Arch>
void embedding_backward_f32(int64_t n, int64_t dim, int64_t rows, const int32_t* ids, const float* dy,
                            float* dtable, bool accumulate) {
  if (rows <= 0 || dim <= 0) return;
  const int64_t work = std::max(n, rows) * dim;
  const int nt = work < kScatterTeamMinWork ? 1 : team_for(work, rows);
  if (nt <= 1) return embedding_backward_rows<Arch>(n, dim, ids, dy, dtable, 0, rows, accumulate);
  // Thread t owns the table rows [cut[t], cut[t + 1]), cut where the ids' counts balance, and adds
  // the dy rows of its ids in index order: no row has two writers, and every row sums its terms in
  // the reference's order whatever the thread count.
  std::vector<int64_t> cut(size_t(nt) + 1, rows);
  {
    std::vector<int64_t> count(size_t(rows), 0);
    for (int64_t i = 0; i < n; ++i) ++count[size_t(ids[i])];
    // Each row's share: its ids' dy rows, plus one dy row's worth of its own zero fill or read.
    const int64_t total = n + rows;
    int64_t seen = 0, t = 1;
    cut[0] = 0;
    for (int64_t r = 0; r < rows && t < nt; ++r) {
      seen += count[size_t(r)] + 1;
      while (t < nt && seen * nt >= t * total) cut[size_t(t++)] = r + 1;
    }
  }
  parallel_ranges(nt, nt, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      embedding_backward_rows<Arch>(n, dim, ids, dy, dtable, cut[size_t(t)], cut[size_t(t) + 1], accumulate);
  });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(embedding, embedding_f32)
TG_SIMD_KERNEL(embedding_backward, embedding_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
