// SIMD layer norm over the last axis (float32), forward and backward. Shapes: x, y, dy, dx are
// rows x cols; gamma, beta, dgamma, dbeta are cols; mean, rstd are rows. Contracts: kernels/kernels.hpp.
//
// Forward is row-parallel with the reference's two-pass (centred) variance, so rows with a large
// mean do not lose their variance to cancellation. Backward computes dx row by row and accumulates
// dgamma / dbeta, which sum over rows: rows are cut into blocks fixed by the size alone, each block
// sums its rows into its own partial vector, and the partials are added in block order. The thread
// count only decides who computes which block, so the result is bitwise the same for any count.
#pragma once

#include <cmath>

#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

template <class Arch>
void layer_norm_f32(int64_t rows, int64_t cols, const float* x, const float* gamma, const float* beta, double eps,
                    float* y, float* mean, float* rstd) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  if (rows <= 0 || cols <= 0) return;
  const float inv_n = 1.0f / float(cols);
  const int nt = team_for(rows * cols * 3, rows);
  parallel_ranges(rows, nt, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      B a0(0.0f), a1(0.0f);
      int64_t c = 0;
      for (; c + 2 * W <= cols; c += 2 * W) {
        a0 += B::load_unaligned(xr + c);
        a1 += B::load_unaligned(xr + c + W);
      }
      for (; c + W <= cols; c += W) a0 += B::load_unaligned(xr + c);
      if (c < cols) a1 += load_tail<Arch>(xr + c, cols - c, 0.0f);
      const float mu = hsum<Arch>(a0 + a1) * inv_n;
      const B m(mu);
      a0 = B(0.0f);
      a1 = B(0.0f);
      c = 0;
      for (; c + 2 * W <= cols; c += 2 * W) {
        const B d0 = B::load_unaligned(xr + c) - m, d1 = B::load_unaligned(xr + c + W) - m;
        a0 = xsimd::fma(d0, d0, a0);
        a1 = xsimd::fma(d1, d1, a1);
      }
      for (; c + W <= cols; c += W) {
        const B d = B::load_unaligned(xr + c) - m;
        a0 = xsimd::fma(d, d, a0);
      }
      if (c < cols) {
        const B d = load_tail<Arch>(xr + c, cols - c, mu) - m;  // padding with mu adds 0
        a1 = xsimd::fma(d, d, a1);
      }
      const float var = hsum<Arch>(a0 + a1) * inv_n;
      const float rs = 1.0f / std::sqrt(var + float(eps));
      const B s(rs);
      c = 0;
      if (gamma && beta) {
        for (; c + W <= cols; c += W)
          xsimd::fma((B::load_unaligned(xr + c) - m) * s, B::load_unaligned(gamma + c), B::load_unaligned(beta + c))
              .store_unaligned(yr + c);
      } else if (gamma) {
        for (; c + W <= cols; c += W)
          ((B::load_unaligned(xr + c) - m) * s * B::load_unaligned(gamma + c)).store_unaligned(yr + c);
      } else if (beta) {
        for (; c + W <= cols; c += W)
          ((B::load_unaligned(xr + c) - m) * s + B::load_unaligned(beta + c)).store_unaligned(yr + c);
      } else {
        for (; c + W <= cols; c += W) ((B::load_unaligned(xr + c) - m) * s).store_unaligned(yr + c);
      }
      for (; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * (gamma ? gamma[c] : 1.0f) + (beta ? beta[c] : 0.0f);
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

// One row of the backward. With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx += rstd * (g - mean(g) - xhat * mean(g * xhat))      (layer_norm: y = xhat * gamma + beta)
//   dgamma_acc += dy * xhat,  dbeta_acc += dy
template <class Arch>
void layer_norm_backward_row(int64_t cols, const float* xr, const float* gamma, float mu, float rs, const float* dyr,
                             float* dxr, float* dg, float* db) {
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
    (B::load_unaligned(dxr + c) + v).store_unaligned(dxr + c);
  }
  for (; c < cols; ++c) {
    const float xhat = (xr[c] - mu) * rs;
    const float g = dyr[c] * (gamma ? gamma[c] : 1.0f);
    dxr[c] += rs * (g - mg - xhat * mgx);
  }
}

// Rows per dgamma/dbeta block and the block cap: at most 64 partial vectors of 2 * cols floats.
inline constexpr int64_t kNormBlockMinRows = 16;
inline constexpr int64_t kNormMaxBlocks = 64;

template <class Arch>
void layer_norm_backward_f32(int64_t rows, int64_t cols, const float* x, const float* gamma, const float* mean,
                             const float* rstd, const float* dy, float* dx, float* dgamma, float* dbeta) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  if (rows <= 0 || cols <= 0) return;
  const bool param_grads = dgamma || dbeta;
  const int64_t work = rows * cols * 4;
  // Small jobs, or no dgamma/dbeta: accumulate straight into the outputs, rows in order (row-parallel
  // is then safe because only dx is written, one row per thread).
  if (!param_grads || work < kParallelMinWork) {
    const int nt = param_grads ? 1 : team_for(work, rows);
    parallel_ranges(rows, nt, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        layer_norm_backward_row<Arch>(cols, x + r * cols, gamma, mean[r], rstd[r], dy + r * cols,
                                      dx ? dx + r * cols : nullptr, dgamma, dbeta);
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
      const Range rr = split(rows, int(b), int(nblocks));
      for (int64_t r = rr.begin; r < rr.end; ++r)
        layer_norm_backward_row<Arch>(cols, x + r * cols, gamma, mean[r], rstd[r], dy + r * cols,
                                      dx ? dx + r * cols : nullptr, dgamma ? dg : nullptr, dbeta ? db : nullptr);
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

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
