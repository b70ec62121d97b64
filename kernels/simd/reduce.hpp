// SIMD reductions (float32): sum_to (the adjoint of broadcasting), sum_axis, sum_all, sum_squares,
// max_axis.
// Contracts and the oracle: kernels/kernels.hpp, kernels/ref/ref.hpp.
//
// Determinism: every output element is produced by one thread in an order fixed by the sizes alone.
// A long flat sum is cut into fixed 1024-element blocks, each summed in vector lanes (float), and the
// block sums are added in block order in double, so the result does not depend on the thread count
// and its error does not grow with n the way one float accumulator's would. Column sums (the bias
// gradient) add rows in row order, exactly as the reference does.
#pragma once

#include <cmath>

#include "kernels/simd/common.hpp"
#include "kernels/simd/strided.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

inline constexpr int64_t kSumBlock = 1024;

// Sum (Square = false) or sum of squares of one block of at most kSumBlock floats.
template <class Arch, bool Square>
float block_sum(const float* x, int64_t n) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B a0(0.0f), a1(0.0f);
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const B v0 = B::load_unaligned(x + i), v1 = B::load_unaligned(x + i + W);
    if constexpr (Square) {
      a0 = xsimd::fma(v0, v0, a0);
      a1 = xsimd::fma(v1, v1, a1);
    } else {
      a0 += v0;
      a1 += v1;
    }
  }
  for (; i + W <= n; i += W) {
    const B v = B::load_unaligned(x + i);
    a0 = Square ? xsimd::fma(v, v, a0) : a0 + v;
  }
  if (i < n) {
    const B v = load_tail<Arch>(x + i, n - i, 0.0f);
    a1 = Square ? xsimd::fma(v, v, a1) : a1 + v;
  }
  return hsum<Arch>(a0 + a1);
}

// Fixed-block sum of n floats; `parallel` lets the blocks be shared by the team (same result).
template <class Arch, bool Square>
double flat_sum(const float* x, int64_t n, bool parallel) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  const int nt = parallel ? team_for(n, blocks) : 1;
  if (nt <= 1) {
    double acc = 0;
    for (int64_t b = 0; b < blocks; ++b)
      acc += block_sum<Arch, Square>(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
    return acc;
  }
  Scratch part(blocks);
  parallel_ranges(blocks, nt, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      part.p[b] = block_sum<Arch, Square>(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
  });
  double acc = 0;
  for (int64_t b = 0; b < blocks; ++b) acc += part.p[b];
  return acc;
}

template <class Arch>
float sum_squares_f32(int64_t n, const float* x) {
  if (n <= 0) return 0.0f;
  return float(flat_sum<Arch, true>(x, n, true));
}

// (the reference's one double accumulator took 0.2 ms for 256 Ki floats, bench_attention's sum(o))
template <class Arch>
float sum_all_f32(int64_t n, const float* x) {
  if (n <= 0) return 0.0f;
  return float(flat_sum<Arch, false>(x, n, true));
}

// Rows per partial of a long column sum (sum_axis with outer == 1).
inline constexpr int64_t kAxisBlockRows = 256;

// out[c] += sum_r x[r * ld + c] for c in [c0, c1), rows in order (the reference's order).
template <class Arch>
void add_rows(const float* x, int64_t rows, int64_t ld, int64_t c0, int64_t c1, float* out) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    int64_t c = c0;
    for (; c + W <= c1; c += W)
      (B::load_unaligned(out + c) + B::load_unaligned(xr + c)).store_unaligned(out + c);
    for (; c < c1; ++c) out[c] += xr[c];
  }
}

// out[c] += sum over rows, columns shared across the team in whole batches.
template <class Arch>
void column_sums(const float* x, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t W = Batch<Arch>::size;
  const int64_t vcols = (cols + W - 1) / W;
  const int nt = team_for(rows * cols, vcols);
  parallel_ranges(vcols, nt, [&](int64_t v0, int64_t v1) {
    add_rows<Arch>(x, rows, cols, v0 * W, std::min(cols, v1 * W), out);
  });
}

// out[map(i)] += x[i] (x contiguous in shape; out_strides 0 on the reduced dimensions).
template <class Arch>
void sum_to_f32(int ndim, const int64_t* shape, const float* x, const int64_t* out_strides, float* out) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const int64_t* strides[2] = {nullptr, out_strides};
  const Space s = coalesce(ndim, shape, 2, strides);
  if (s.total == 0) return;
  const int last = s.ndim - 1;
  const int64_t inner = s.shape[last], so = s.stride[1][last];
  if (s.ndim == 1 && so == 0) {  // everything into one element
    out[0] += float(flat_sum<Arch, false>(x, inner, true));
    return;
  }
  if (s.ndim == 1 && so == 1) {  // no reduction at all: out += x
    const int64_t blocks = (inner + kSumBlock - 1) / kSumBlock;
    parallel_ranges(blocks, team_for(inner, blocks), [&](int64_t b0, int64_t b1) {
      add_rows<Arch>(x, 1, 0, b0 * kSumBlock, std::min(inner, b1 * kSumBlock), out);
    });
    return;
  }
  if (s.ndim == 2 && s.stride[1][0] == 0 && so == 1) {  // [R, C] -> [C]: the bias gradient
    column_sums<Arch>(x, s.shape[0], inner, out);
    return;
  }
  if (s.ndim == 2 && so == 0) {  // [R, C] -> [R] (strided out): row sums, rows independent
    const int64_t rows = s.shape[0], os = s.stride[1][0];
    parallel_ranges(rows, team_for(rows * inner, rows), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        out[r * os] += float(flat_sum<Arch, false>(x + r * inner, inner, false));
    });
    return;
  }
  // General pattern: serial, outer dims walked by index arithmetic, the last dim by its kind.
  const int64_t outer = s.total / inner;
  int64_t off[2];
  for (int64_t o = 0; o < outer; ++o) {
    outer_offsets(s, 2, o, off);
    const float* xr = x + off[0];
    float* orow = out + off[1];
    if (so == 1) {
      int64_t c = 0;
      for (; c + W <= inner; c += W)
        (B::load_unaligned(orow + c) + B::load_unaligned(xr + c)).store_unaligned(orow + c);
      for (; c < inner; ++c) orow[c] += xr[c];
    } else if (so == 0) {
      orow[0] += float(flat_sum<Arch, false>(xr, inner, false));
    } else {
      for (int64_t c = 0; c < inner; ++c) orow[c * so] += xr[c];
    }
  }
}

// y[o, i] = sum_k x[o, k, i] over an (outer x n x inner) view.
template <class Arch>
void sum_axis_f32(int64_t outer, int64_t n, int64_t inner, const float* x, float* y) {
  constexpr int64_t W = Batch<Arch>::size;
  if (outer <= 0 || inner <= 0) return;
  if (inner == 1) {  // row sums
    if (outer == 1) {
      y[0] = float(flat_sum<Arch, false>(x, n, true));
      return;
    }
    parallel_ranges(outer, team_for(outer * n, outer), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) y[o] = float(flat_sum<Arch, false>(x + o * n, n, false));
    });
    return;
  }
  if (outer == 1 && n >= 2 * kAxisBlockRows && n * inner >= kParallelMinWork) {  // sizes only, never nt
    // One long column sum (a bias gradient: sum over a batch's rows of dy): blocks of kAxisBlockRows
    // rows, each summed in order into a partial, the partials then added in block order. The blocks
    // do not depend on the thread count, so neither does the result; thread t takes the t-th run of
    // blocks, the rows the ops before it left in its core's cache. Columns split across the threads
    // instead made each read every row, half of them from the other core: 2048 x 512 took 143 us on
    // two threads against 71 on one (Zen 5, in the small Transformer's step).
    const int64_t blocks = (n + kAxisBlockRows - 1) / kAxisBlockRows;
    Scratch part(blocks * inner);
    parallel_ranges(blocks, team_for(n * inner, blocks), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        float* pb = part.p + b * inner;
        std::fill(pb, pb + inner, 0.0f);
        const int64_t r0 = b * kAxisBlockRows;
        add_rows<Arch>(x + r0 * inner, std::min(kAxisBlockRows, n - r0), inner, 0, inner, pb);
      }
    });
    std::copy(part.p, part.p + inner, y);
    for (int64_t b = 1; b < blocks; ++b) add_rows<Arch>(part.p + b * inner, 1, inner, 0, inner, y);
    return;
  }
  // k in order into y[o, :], the reference's order; items are (o, batch-aligned column chunk).
  const int64_t chunk = std::max<int64_t>(W, (kSumBlock / W) * W);
  const int64_t chunks = (inner + chunk - 1) / chunk;
  parallel_ranges(outer * chunks, team_for(outer * n * inner, outer * chunks), [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t o = w / chunks, c0 = (w % chunks) * chunk, c1 = std::min(inner, c0 + chunk);
      float* yo = y + o * inner;
      for (int64_t c = c0; c < c1; ++c) yo[c] = 0.0f;
      add_rows<Arch>(x + o * n * inner, n, inner, c0, c1, yo);
    }
  });
}

// y[o, i] = max_k x[o, k, i] and the index of its first occurrence. The reference's rule is a
// strict > scan from k = 0: NaN never replaces the running best, ties keep the first index, and a
// NaN at k = 0 stays the answer.
template <class Arch>
void max_axis_f32(int64_t outer, int64_t n, int64_t inner, const float* x, float* y, int64_t* argmax) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  constexpr int64_t W = B::size;
  if (outer <= 0 || inner <= 0 || n <= 0) return;
  if (inner == 1) {
    // Along a contiguous row: the vector max of the non-NaN values (max(v, m) returns m when v is
    // NaN), then the first index holding it.
    parallel_ranges(outer, team_for(outer * n, outer), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const float* xr = x + o * n;
        int64_t bi = 0;
        if (xr[0] == xr[0]) {
          B m(-kInf);
          int64_t k = 0;
          for (; k + W <= n; k += W) m = xsimd::max(B::load_unaligned(xr + k), m);
          float best = hmax<Arch>(m);
          for (; k < n; ++k) best = xr[k] > best ? xr[k] : best;
          while (!(xr[bi] == best)) ++bi;
        }
        y[o] = xr[bi];
        if (argmax) argmax[o] = bi;
      }
    });
    return;
  }
  // inner > 1: lanes run along i; per lane, k ascends, and a strict > keeps the first maximum.
  const int64_t chunks = (inner + W - 1) / W;
  parallel_ranges(outer * chunks, team_for(outer * n * inner, outer * chunks), [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t o = w / chunks, c0 = (w % chunks) * W;
      const float* xo = x + o * n * inner;
      if (c0 + W <= inner) {
        B best = B::load_unaligned(xo + c0);
        I bi(0);
        for (int64_t k = 1; k < n; ++k) {
          const B v = B::load_unaligned(xo + k * inner + c0);
          const auto gt = v > best;
          best = xsimd::select(gt, v, best);
          bi = xsimd::select(xsimd::bool_cast(gt), I(int32_t(k)), bi);
        }
        alignas(64) int32_t idx[W];
        bi.store_aligned(idx);
        best.store_unaligned(y + o * inner + c0);
        if (argmax)
          for (int64_t l = 0; l < W; ++l) argmax[o * inner + c0 + l] = idx[l];
      } else {
        for (int64_t c = c0; c < inner; ++c) {
          int64_t bk = 0;
          for (int64_t k = 1; k < n; ++k)
            if (xo[k * inner + c] > xo[bk * inner + c]) bk = k;
          y[o * inner + c] = xo[bk * inner + c];
          if (argmax) argmax[o * inner + c] = bk;
        }
      }
    }
  });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(sum_to, sum_to_f32)
TG_SIMD_KERNEL(sum_axis, sum_axis_f32)
TG_SIMD_KERNEL(max_axis, max_axis_f32)
TG_SIMD_KERNEL(sum_squares, sum_squares_f32)
TG_SIMD_KERNEL(sum_all, sum_all_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
