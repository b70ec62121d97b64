// SIMD layer norm over the last axis (float32), forward and backward. Shapes: x, y, dy, dx are
// rows x cols; gamma, beta, dgamma, dbeta are cols; mean, rstd are rows. Contracts: kernels/kernels.hpp.
//
// Forward is row-parallel: one pass for mean and variance (sums shifted by the row's first
// element, falling back to the reference's centred two-pass variance when that shift is a poor
// guess), fused with the output pass of the row two before. Backward computes dx row by row and accumulates
// dgamma / dbeta, which sum over rows: rows are cut into blocks fixed by the size alone, each block
// sums its rows into its own partial vector, and the partials are added in block order. The thread
// count only decides who computes which block, so the result is bitwise the same for any count.
#pragma once

#include <cmath>

#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

struct RowStats {
  float mean, rstd;
};

// Sums of one row shifted by K = x[0]: s1 += x - K, s2 += (x - K)^2. The shift keeps the single
// pass accurate (see row_stats); K = x[0] costs nothing to find.
template <class Arch>
TG_INLINE void shifted_sums(const Batch<Arch>& v, const Batch<Arch>& k, Batch<Arch>& s1, Batch<Arch>& s2) {
  const Batch<Arch> d = v - k;
  s1 += d;
  s2 = xsimd::fma(d, d, s2);
}

// mean and rstd from the shifted sums. var = E[(x-K)^2] - (E[x-K])^2 loses about
// log2(1 + (mean-K)^2 / var) bits to cancellation, so when the first element sits more than 4
// standard deviations from the mean (or anything is NaN) the row falls back to the reference's
// method, the plain mean and then the centred variance, over a row that is still in L1.
template <class Arch>
RowStats row_stats(const float* x, int64_t n, float k, const Batch<Arch>& s1v, const Batch<Arch>& s2v,
                   double eps) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const float inv_n = 1.0f / float(n);
  const float d = hsum<Arch>(s1v) * inv_n;
  float mu = k + d;
  float var = hsum<Arch>(s2v) * inv_n - d * d;
  if (!(d * d <= 16.0f * var)) {
    B a0(0.0f), a1(0.0f);
    int64_t c = 0;
    for (; c + 2 * W <= n; c += 2 * W) {
      a0 += B::load_unaligned(x + c);
      a1 += B::load_unaligned(x + c + W);
    }
    for (; c + W <= n; c += W) a0 += B::load_unaligned(x + c);
    if (c < n) a1 += load_tail<Arch>(x + c, n - c, 0.0f);
    mu = hsum<Arch>(a0 + a1) * inv_n;
    const B m(mu);
    a0 = a1 = B(0.0f);
    c = 0;
    for (; c + 2 * W <= n; c += 2 * W) {
      const B d0 = B::load_unaligned(x + c) - m, d1 = B::load_unaligned(x + c + W) - m;
      a0 = xsimd::fma(d0, d0, a0);
      a1 = xsimd::fma(d1, d1, a1);
    }
    for (; c + W <= n; c += W) {
      const B d0 = B::load_unaligned(x + c) - m;
      a0 = xsimd::fma(d0, d0, a0);
    }
    if (c < n) {
      const B d0 = load_tail<Arch>(x + c, n - c, mu) - m;  // padding with mu adds 0
      a1 = xsimd::fma(d0, d0, a1);
    }
    var = hsum<Arch>(a0 + a1) * inv_n;
  }
  return {mu, 1.0f / std::sqrt(var + float(eps))};
}

template <class Arch>
RowStats row_stats_pass(const float* x, int64_t n, double eps) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B k(x[0]);
  B s1a(0.0f), s2a(0.0f), s1b(0.0f), s2b(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    shifted_sums<Arch>(B::load_unaligned(x + c), k, s1a, s2a);
    shifted_sums<Arch>(B::load_unaligned(x + c + W), k, s1b, s2b);
  }
  for (; c + W <= n; c += W) shifted_sums<Arch>(B::load_unaligned(x + c), k, s1a, s2a);
  if (c < n) shifted_sums<Arch>(load_tail<Arch>(x + c, n - c, x[0]), k, s1b, s2b);
  return row_stats<Arch>(x, n, x[0], s1a + s1b, s2a + s2b, eps);
}

// y = (x - mean) * rstd * gamma + beta for one row, fused with the statistics pass of the next
// row xn (independent work, so the out-of-order core overlaps the two and a row's reductions no
// longer stall the pipeline). xn is loaded before y is stored (4K aliasing). Returns xn's stats.
template <class Arch, bool G, bool Bt, bool Stream>
RowStats layer_norm_step(int64_t n, const float* x, RowStats st, const float* gamma, const float* beta,
                         float* y, const float* xn, double eps) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B m(st.mean), s(st.rstd), k(xn[0]);
  B s1a(0.0f), s2a(0.0f), s1b(0.0f), s2b(0.0f);
  auto out = [&](int64_t c) {
    B v = (B::load_unaligned(x + c) - m) * s;
    if constexpr (G && Bt)
      v = xsimd::fma(v, B::load_unaligned(gamma + c), B::load_unaligned(beta + c));
    else if constexpr (G)
      v = v * B::load_unaligned(gamma + c);
    else if constexpr (Bt)
      v = v + B::load_unaligned(beta + c);
    return v;
  };
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    const B v0 = B::load_unaligned(xn + c), v1 = B::load_unaligned(xn + c + W);
    const B o0 = out(c), o1 = out(c + W);
    if constexpr (Stream) {
      store_stream<Arch>(y + c, o0);
      store_stream<Arch>(y + c + W, o1);
    } else {
      o0.store_unaligned(y + c);
      o1.store_unaligned(y + c + W);
    }
    shifted_sums<Arch>(v0, k, s1a, s2a);
    shifted_sums<Arch>(v1, k, s1b, s2b);
  }
  for (; c + W <= n; c += W) {
    const B v0 = B::load_unaligned(xn + c);
    if constexpr (Stream)
      store_stream<Arch>(y + c, out(c));
    else
      out(c).store_unaligned(y + c);
    shifted_sums<Arch>(v0, k, s1a, s2a);
  }
  if (c < n) shifted_sums<Arch>(load_tail<Arch>(xn + c, n - c, xn[0]), k, s1b, s2b);
  for (; c < n; ++c) y[c] = (x[c] - st.mean) * st.rstd * (G ? gamma[c] : 1.0f) + (Bt ? beta[c] : 0.0f);
  return row_stats<Arch>(xn, n, xn[0], s1a + s1b, s2a + s2b, eps);
}

// Rows [r0, r1); the first two rows' statistics take their own passes, every later row's come with
// the output pass of the row two before it. Two rows ahead, the statistics' horizontal sums,
// division and square root have a whole row's output pass to finish in before they are needed; one
// row ahead, that latency stalled every row (measured on 8192x256, AVX2).
template <class Arch, bool G, bool Bt, bool Stream>
void layer_norm_rows(int64_t r0, int64_t r1, int64_t cols, const float* x, const float* gamma,
                     const float* beta, double eps, float* y, float* mean, float* rstd) {
  RowStats st[3];  // rows r, r + 1, r + 2, by r % 3
  st[r0 % 3] = row_stats_pass<Arch>(x + r0 * cols, cols, eps);
  if (r0 + 1 < r1) st[(r0 + 1) % 3] = row_stats_pass<Arch>(x + (r0 + 1) * cols, cols, eps);
  for (int64_t r = r0; r < r1; ++r) {
    // near the end the "next" row is the last one again, its statistics unused: harmless
    const float* xn = x + std::min(r + 2, r1 - 1) * cols;
    const RowStats cur = st[r % 3];
    mean[r] = cur.mean;
    rstd[r] = cur.rstd;
    const RowStats next =
        layer_norm_step<Arch, G, Bt, Stream>(cols, x + r * cols, cur, gamma, beta, y + r * cols, xn, eps);
    if (r + 2 < r1) st[(r + 2) % 3] = next;
  }
  if constexpr (Stream) _mm_sfence();  // streamed lines visible before the team's barrier
}

template <class Arch>
void layer_norm_f32(int64_t rows, int64_t cols, const float* x, const float* gamma, const float* beta,
                    double eps, float* y, float* mean, float* rstd) {
  if (rows <= 0 || cols <= 0) return;
  const int nt = team_for(rows * cols * 3, rows);
  const bool stream = stream_output<Arch>(rows, cols, y);
  parallel_ranges(rows, nt, [&](int64_t r0, int64_t r1) {
#define TG_ROWS(G, Bt)                                                                           \
  (stream ? layer_norm_rows<Arch, G, Bt, true>(r0, r1, cols, x, gamma, beta, eps, y, mean, rstd) \
          : layer_norm_rows<Arch, G, Bt, false>(r0, r1, cols, x, gamma, beta, eps, y, mean, rstd))
    if (gamma && beta)
      TG_ROWS(true, true);
    else if (gamma)
      TG_ROWS(true, false);
    else if (beta)
      TG_ROWS(false, true);
    else
      TG_ROWS(false, false);
#undef TG_ROWS
  });
}

// One row of the backward. With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = (AccumulateDx ? dx : 0) + rstd * (g - mean(g) - xhat * mean(g * xhat))
//                                                            (layer_norm: y = xhat * gamma + beta)
//   dgamma_acc += dy * xhat,  dbeta_acc += dy
template <class Arch, bool AccumulateDx>
void layer_norm_backward_row(int64_t cols, const float* xr, const float* gamma, float mu, float rs,
                             const float* dyr, float* dxr, float* dg, float* db) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B m(mu), s(rs);
  B sg(0.0f), sgx(0.0f);
  int64_t c = 0;
  for (; c + W <= cols; c += W) {
    const B xhat = (B::load_unaligned(xr + c) - m) * s;
    const B d = B::load_unaligned(dyr + c);
    const B g = gamma ? d * B::load_unaligned(gamma + c) : d;
    sg += g;
    sgx = xsimd::fma(g, xhat, sgx);
    if (dg) xsimd::fma(d, xhat, B::load_unaligned(dg + c)).store_unaligned(dg + c);
    if (db) (B::load_unaligned(db + c) + d).store_unaligned(db + c);
  }
  float sum_g = hsum<Arch>(sg), sum_gx = hsum<Arch>(sgx);
  for (; c < cols; ++c) {
    const float xhat = (xr[c] - mu) * rs;
    const float g = dyr[c] * (gamma ? gamma[c] : 1.0f);
    sum_g += g;
    sum_gx += g * xhat;
    if (dg) dg[c] += dyr[c] * xhat;
    if (db) db[c] += dyr[c];
  }
  if (!dxr) return;
  const float inv_n = 1.0f / float(cols);
  const float mg = sum_g * inv_n, mgx = sum_gx * inv_n;
  const B bmg(mg), bmgx(mgx);
  c = 0;
  for (; c + W <= cols; c += W) {
    const B xhat = (B::load_unaligned(xr + c) - m) * s;
    const B d = B::load_unaligned(dyr + c);
    const B g = gamma ? d * B::load_unaligned(gamma + c) : d;
    const B v = s * xsimd::fnma(xhat, bmgx, g - bmg);
    (AccumulateDx ? B::load_unaligned(dxr + c) + v : v).store_unaligned(dxr + c);
  }
  for (; c < cols; ++c) {
    const float xhat = (xr[c] - mu) * rs;
    const float g = dyr[c] * (gamma ? gamma[c] : 1.0f);
    dxr[c] = (AccumulateDx ? dxr[c] : 0.0f) + rs * (g - mg - xhat * mgx);
  }
}

// Rows per dgamma/dbeta block and the block cap: at most 64 partial vectors of 2 * cols floats.
inline constexpr int64_t kNormBlockMinRows = 16;
inline constexpr int64_t kNormMaxBlocks = 64;

template <class Arch>
void layer_norm_backward_f32(int64_t rows, int64_t cols, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, float* dx, float* dgamma,
                             float* dbeta, bool accumulate) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  if (rows <= 0 || cols <= 0) return;
  auto row = [&](int64_t r, float* dg, float* db) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx ? dx + r * cols : nullptr;
    if (accumulate)
      layer_norm_backward_row<Arch, true>(cols, xr, gamma, mean[r], rstd[r], dyr, dxr, dg, db);
    else
      layer_norm_backward_row<Arch, false>(cols, xr, gamma, mean[r], rstd[r], dyr, dxr, dg, db);
  };
  const bool param_grads = dgamma || dbeta;
  const int64_t work = rows * cols * 4;
  // Small jobs, or no dgamma/dbeta: accumulate straight into the outputs, rows in order (row-parallel
  // is then safe because only dx is written, one row per thread).
  if (!param_grads || work < kParallelMinWork) {
    const int nt = param_grads ? 1 : team_for(work, rows);
    parallel_ranges(rows, nt, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) row(r, dgamma, dbeta);
    });
    return;
  }
  const int64_t nblocks = std::min(kNormMaxBlocks, std::max<int64_t>(1, rows / kNormBlockMinRows));
  Scratch part(nblocks * 2 * cols);  // block b: dgamma partial at 2b*cols, dbeta partial after it
  const int nt = team_for(work, nblocks);
  parallel_ranges(nblocks, nt, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float* dg = part.p + 2 * b * cols;
      float* db = dg + cols;
      std::memset(dg, 0, sizeof(float) * size_t(2 * cols));
      const Range rr = balanced_split(rows, b, nblocks);
      for (int64_t r = rr.begin; r < rr.end; ++r) row(r, dgamma ? dg : nullptr, dbeta ? db : nullptr);
    }
  });
  // Fixed-order reduction of the partials; columns split across threads, which changes nothing.
  const int nt2 = team_for(nblocks * cols * 2, cols / W);
  parallel_ranges((cols + W - 1) / W, nt2, [&](int64_t v0, int64_t v1) {
    const int64_t c0 = v0 * W, c1 = std::min(cols, v1 * W);
    for (int which = 0; which < 2; ++which) {
      float* out = which == 0 ? dgamma : dbeta;
      if (!out) continue;
      int64_t c = c0;
      for (; c + W <= c1; c += W) {
        B acc(0.0f);
        for (int64_t b = 0; b < nblocks; ++b) acc += B::load_unaligned(part.p + (2 * b + which) * cols + c);
        (B::load_unaligned(out + c) + acc).store_unaligned(out + c);
      }
      for (; c < c1; ++c) {
        float acc = 0.0f;
        for (int64_t b = 0; b < nblocks; ++b) acc += part.p[(2 * b + which) * cols + c];
        out[c] += acc;
      }
    }
  });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(layer_norm, layer_norm_f32)
TG_SIMD_KERNEL(layer_norm_backward, layer_norm_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
