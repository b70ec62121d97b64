// GEMM micro-kernel: one register tile of C from MR rows of A and one B micro-panel, written once
// with xsimd batches and compiled per instruction set.
//
// Contract (everything the tile loop in gemm_driver.hpp may rely on):
//   - a: `rows` (1..MR) rows of op(A). With AK = false row-major with row stride lda: a[i*lda + k] =
//     op(A)(i0 + i, k0 + k); this is A itself when A is not transposed (no packing), or the team's
//     transposed copy when it is. With AK = true column-major, a[k*lda + i]: transposed A read in
//     place, for problems whose rows (one cache line per k) stay in cache: small ones, or ones at
//     most two B panels wide (Problem::a_in_place, gemm_driver.hpp); or its packed panels (lda =
//     MR, see pack_a_panels).
//     Only rows i < rows are read: a short tile computes copies of its last row in the spare
//     registers and never stores them.
//   - b: B micro-panel, k-major with row stride ldb: b[k*ldb + j] = op(B)(k0 + k, j0 + j). Either
//     packed (ldb = NR, 64-byte aligned, zero-filled past the matrix edge) or, for small problems,
//     B itself when it is stored row-major; the kernel reads vectors j < NVE*W, so a B panel that
//     is cut by the matrix edge must be packed.
//   - c: the rows x n_valid tile of C at row stride ldc, updated as C = alpha * (a . b) + beta * C.
//     When beta == 0, C is never read (NaN or Inf in C do not propagate).
//   - ep: null (C as above), or the tile's epilogue (GemmEpilogue, kernels/types.hpp, its pointers
//     at the tile: bias at its first column, gate at its first element): the bias, the tile's
//     n_valid column values (contiguous) or null, added to every row: C = alpha * (a . b) + (bias +
//     beta * C); then the activation on each stored value, the gate read at the tile's own rows and
//     columns. The driver adds the bias on the first depth block and activates on the last. A
//     linear layer's bias and ReLU this way cost a few loads or instructions a tile instead of
//     passes over all of C (and the product's read of it).
//   - Full tiles (rows == MR, n_valid == NVE*W) are stored straight from registers; a short or
//     ragged tile goes through a small stack tile so nothing outside rows x n_valid is touched.
//   - kc >= 1 (the driver handles K == 0 itself).
//   - Packing on first use (gemm_driver.hpp): with PackB the kernel also stores each k's NVE vectors
//     of B at b_out + k*NVE*W (64-byte aligned), the packed panel later tiles read; with PackA (AK
//     only) each k's MR elements of A at a_out + k*MR (rows past `rows` get copies of the last).
//     It stores what it loads, so the copies are exact whatever the arithmetic.
// Per k the kernel loads NVE vectors of B and broadcasts MR scalars of A into MR*NVE independent
// FMAs: 24 for the AVX-512 6 x 64 tile, enough to keep two 512-bit FMA pipes busy at 4 cycles of
// latency, with 10 loads per 24 FMAs. NVE is a template parameter, so a narrow right edge gets its
// own instance; so does a short bottom edge of up to 4 rows when that is quicker than a full tile
// (bottom_edge_kernels); longer ones compute a full tile (compile time, instruction cache).
// Not instrumented by AddressSanitizer: with it GCC 12 took 67 s to compile one instance (the
// shadow checks on 28 loads per k, with 24 accumulators live, defeat the register allocator), an
// hour for the set. Its accesses are bounded by the contract above, which the driver upholds and
// tests/kernels/test_gemm.cpp checks (including that C past the tile is never written).
// Not here: blocking, packing and threads (gemm_driver.hpp, gemm_pack.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <xsimd/xsimd.hpp>

#include "kernels/types.hpp"

namespace tapegrad::kernels::simd::gemm_detail {

// Rows of B (and columns of A) ahead of the current k that a packing tile prefetches. Packing on first
// use reads its operand where it lies, often from memory (a weight gradient's saved input, written
// long before the backward), with a stride the hardware prefetcher does not follow far enough ahead:
// software prefetch 16 rows ahead made 128x512x2048 tn with cold operands 15% faster at one thread
// and 14% at two (eight alternating rounds, Zen 5); 32 rows ahead gained 8%. (The separate packing
// passes, gemm_pack.hpp, prefetch kPackAhead = 32 rows into L2; a tile that computes as it packs
// reads its rows more slowly and does better nearer.)
inline constexpr int kPackPrefetchRows = 16;

template <class Arch, class T, int MRE, int NVE, bool AK = false, bool PackB = false, bool PackA = false>
__attribute__((noinline, no_sanitize_address)) void micro_kernel(
    int64_t kc, const T* __restrict a, int64_t lda, const T* __restrict b, int64_t ldb, T* __restrict c,
    int64_t ldc, T alpha, T beta, int rows, int n_valid, T* __restrict b_out = nullptr,
    T* __restrict a_out = nullptr, const GemmEpilogue<T>* ep = nullptr) {
  static_assert(!PackA || AK, "A is packed into column-major panels");
  using V = xsimd::batch<T, Arch>;
  constexpr int W = int(V::size);

  const T* ar[MRE];
#pragma GCC unroll 16
  for (int i = 0; i < MRE; ++i) ar[i] = a + std::min(i, rows - 1) * (AK ? 1 : lda);

  V acc[MRE][NVE];
#pragma GCC unroll 16
  for (int i = 0; i < MRE; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) acc[i][j] = V(T(0));
  }

  // Prefetch the C tile for writing while the FMAs run, so the stores at the end do not wait on
  // memory (C rows are ldc apart and rarely in cache).
#pragma GCC unroll 16
  for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) __builtin_prefetch(c + std::min(i, rows - 1) * ldc + j * W, 1, 3);
  // Likewise the gate of a gated epilogue (feed_forward_relu's backward reads the hidden activations
  // there, 4 MiB at the small Transformer's shape and seldom in cache): loaded only at the end, each
  // tile waited for it from memory, and the gated 2048x512x128 product ran at 0.6x the plain one;
  // prefetched, 1.2-1.4x faster (eight alternating rounds, cold operands, Zen 5).
  if (ep && ep->gate)
#pragma GCC unroll 16
    for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NVE; ++j)
        __builtin_prefetch(ep->gate + std::min(i, rows - 1) * ep->ldg + j * W, 0, 3);

#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NVE];
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) bv[j] = V::load_unaligned(b + j * W);
    if constexpr (PackB) {
#pragma GCC unroll 8
      for (int j = 0; j < NVE; ++j) bv[j].store_aligned(b_out + k * (NVE * W) + j * W);
#pragma GCC unroll 8
      for (int e = 0; e < NVE * W; e += 64 / int(sizeof(T)))
        __builtin_prefetch(b + kPackPrefetchRows * ldb + e, 0, 3);
    }
    if constexpr (PackA) __builtin_prefetch(ar[0] + (k + kPackPrefetchRows) * lda, 0, 3);
#pragma GCC unroll 16
    for (int i = 0; i < MRE; ++i) {
      const T as = AK ? ar[i][k * lda] : ar[i][k];
      if constexpr (PackA) a_out[k * MRE + i] = as;
      const V ai(as);
#pragma GCC unroll 8
      for (int j = 0; j < NVE; ++j) acc[i][j] = xsimd::fma(ai, bv[j], acc[i][j]);
    }
    b += ldb;
  }

  const V va(alpha);
  const bool act = ep && ep->act != GemmAct::none;
  const T* bias = ep ? ep->bias : nullptr;
  // gemm_activate (kernels/types.hpp) on the vector stored at row i, vector j of a full tile.
  auto activate = [&](V v, int i, int j) {
    if (ep->act == GemmAct::relu) return xsimd::select(v > V(T(0)), v, V(T(0)));
    const V g = V::load_unaligned(ep->gate + i * ep->ldg + j * W);
    return v * xsimd::select(g > V(T(0)), V(T(1)), V(T(0)));
  };
  if (rows == MRE && n_valid == NVE * W) {
    const V vb(beta);
    if (ep) {
      V vbias[NVE];
#pragma GCC unroll 8
      for (int j = 0; j < NVE; ++j) vbias[j] = bias ? V::load_unaligned(bias + j * W) : V(T(0));
#pragma GCC unroll 16
      for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NVE; ++j) {
          T* p = c + i * ldc + j * W;
          V v;  // the three cases round as the plain stores below do
          if (bias)
            v = xsimd::fma(va, acc[i][j],
                           beta == T(0) ? vbias[j] : xsimd::fma(vb, V::load_unaligned(p), vbias[j]));
          else if (beta == T(0))
            v = va * acc[i][j];
          else
            v = xsimd::fma(va, acc[i][j], vb * V::load_unaligned(p));
          (act ? activate(v, i, j) : v).store_unaligned(p);
        }
    } else if (beta == T(0)) {
#pragma GCC unroll 16
      for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NVE; ++j) (va * acc[i][j]).store_unaligned(c + i * ldc + j * W);
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NVE; ++j) {
          T* p = c + i * ldc + j * W;
          xsimd::fma(va, acc[i][j], vb * V::load_unaligned(p)).store_unaligned(p);
        }
    }
    return;
  }
  // Short or ragged tile: spill alpha * acc to an aligned stack tile, then merge the valid part:
  // whole vectors of a row as vectors (a 64 x 64 product's last tile of 4 rows merged element by
  // element cost 8% of the product), the columns past the last whole vector one by one.
  alignas(64) T tile[MRE][NVE * W];
#pragma GCC unroll 16
  for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) (va * acc[i][j]).store_aligned(&tile[i][j * W]);
  const int whole = n_valid / W;
  const V vb(beta);
  for (int i = 0; i < rows; ++i) {
    T* p = c + i * ldc;
    for (int j = 0; j < whole; ++j) {
      const V t = V::load_aligned(&tile[i][j * W]);
      const V vbias = bias ? V::load_unaligned(bias + j * W) : V(T(0));
      const V v = beta == T(0) ? t + vbias : t + (vbias + vb * V::load_unaligned(p + j * W));
      (act ? activate(v, i, j) : v).store_unaligned(p + j * W);
    }
    for (int j = whole * W; j < n_valid; ++j) {
      T v;
      if (bias)
        v = tile[i][j] + (beta == T(0) ? bias[j] : bias[j] + beta * p[j]);
      else
        v = beta == T(0) ? tile[i][j] : tile[i][j] + beta * p[j];
      p[j] = act ? gemm_activate(*ep, i, j, v) : v;
    }
  }
}

template <class T>
using MicroKernelFn = void (*)(int64_t, const T*, int64_t, const T*, int64_t, T*, int64_t, T, T, int, int, T*,
                               T*, const GemmEpilogue<T>*);

// The instances by width: fn[v - 1] computes v vectors (and any number of rows up to MR).
template <class Arch, class T, int MR, int NV, bool AK>
struct MicroKernelTable {
  MicroKernelFn<T> fn[NV];
  constexpr MicroKernelTable() : fn{} { fill(std::make_integer_sequence<int, NV>{}); }

 private:
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I] = &micro_kernel<Arch, T, MR, I + 1, AK>), ...);
  }
};

// Cycles of one k step of a rows x nv tile: rows * nv FMAs over two pipes, and each accumulator's
// FMAs at least the FMA latency (4 cycles) apart, however few the rows.
constexpr int tile_step_cycles(int rows, int nv) {
  return std::max(rows * nv / 2, 4);
}

// The rows of a matrix left below its last whole MR-row tile (M % MR): a tile computes all MR of
// its rows whatever `rows` says. The instances for the shortest tile of 1, 2 or 4 rows that holds
// them, fn[v - 1] for v vectors as in MicroKernelTable, when its k step is quicker than the whole
// tile's (tile_step_cycles); else null, for the whole tile (and when no rows are left). On AVX-512
// the GEMM's 6 x 64 tile then computes a 64-row matrix's last 4 rows in 8 cycles a k step instead
// of 12 (64^3 at 1 thread 1.01-1.06x, 128^3 1.02-1.04x, paired runs on Zen 5), and the attention
// kernels' 8 x 32 tile the one row past 32 of a 33-row block in 4 instead of 8 (the small
// Transformer's decoder: the kernels alone 1.08x in cache). Each element is the same k-ordered sum
// in any tile; only its store can round differently, where alpha != 1 and C or a bias is added: a
// whole tile stores alpha * sum + (beta * C + bias) with one fused multiply-add, and a tile
// computing fewer rows than its own went through the stack tile's separate multiply and add. With
// alpha == 1, or nothing added, the bits are the same (the models' linear layers: alpha 1).
template <class Arch, class T, int MR, int NV, bool AK>
const MicroKernelFn<T>* bottom_edge_kernels(int left) {
  static constexpr MicroKernelTable<Arch, T, 1, NV, AK> one;
  static constexpr MicroKernelTable<Arch, T, 2, NV, AK> two;
  static constexpr MicroKernelTable<Arch, T, 4, NV, AK> four;
  const int rows = left <= 1 ? 1 : left <= 2 ? 2 : 4;
  if (left < 1 || left > 4 || rows >= MR || tile_step_cycles(rows, NV) >= tile_step_cycles(MR, NV))
    return nullptr;
  return rows == 1 ? one.fn : rows == 2 ? two.fn : four.fn;
}

}  // namespace tapegrad::kernels::simd::gemm_detail
