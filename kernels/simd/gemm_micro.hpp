// GEMM micro-kernel: one register tile of C from one packed A micro-panel and one packed B
// micro-panel, written once with xsimd batches and compiled per instruction set.
//
// Contract (everything the tile loop in gemm_driver.hpp may rely on):
//   - a: packed A micro-panel, k-major: a[k*PA + i] = op(A)(i0 + i, k0 + k), i < PA (= MR). Rows past
//     the matrix edge are zero-filled by the packer, but the kernel reads only rows i < MRE.
//   - b: packed B micro-panel, k-major: b[k*PB + j] = op(B)(k0 + k, j0 + j), j < PB (= NR), 64-byte
//     aligned, zero-filled past the matrix edge; the kernel reads vectors j < NVE*W.
//   - c: the MRE x n_valid tile of C at row stride ldc, updated as C = alpha * (a . b) + beta * C.
//     When beta == 0, C is never read (NaN or Inf in C do not propagate).
//   - Full tiles (n_valid == NVE*W) are stored straight from registers; a ragged right edge goes
//     through a small stack tile so that nothing outside the MRE x n_valid window is touched.
//   - kc >= 1 (the driver handles K == 0 itself).
// MRE and NVE are template parameters so that edge tiles (fewer rows, fewer vectors) get their own
// fully unrolled instance instead of computing a padded tile: at MR = 14, a 256-row matrix would
// otherwise waste 4% of its FMAs on its last tile.
// Not here: blocking, packing and threads (gemm_driver.hpp, gemm_pack.hpp).
#pragma once

#include <cstdint>
#include <utility>
#include <xsimd/xsimd.hpp>

namespace tapegrad::kernels::simd::gemm_detail {

template <class Arch, class T, int PA, int PB, int MRE, int NVE>
__attribute__((noinline)) void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b,
                                            T* __restrict c, int64_t ldc, T alpha, T beta, int n_valid) {
  using V = xsimd::batch<T, Arch>;
  constexpr int W = int(V::size);

  V acc[MRE][NVE];
#pragma GCC unroll 32
  for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) acc[i][j] = V(T(0));

  // Prefetch the C tile for writing while the FMAs run, so the store at the end does not wait on
  // memory (C rows are ldc apart and rarely in cache).
#pragma GCC unroll 32
  for (int i = 0; i < MRE; ++i) {
    __builtin_prefetch(c + i * ldc, 1, 3);
    __builtin_prefetch(c + i * ldc + NVE * W - 1, 1, 3);
  }

  // The main loop: NVE vector loads of B and MRE broadcasts of A feed MRE*NVE independent FMAs per k.
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NVE];
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) bv[j] = V::load_aligned(b + j * W);
#pragma GCC unroll 32
    for (int i = 0; i < MRE; ++i) {
      const V ai(a[i]);
#pragma GCC unroll 8
      for (int j = 0; j < NVE; ++j) acc[i][j] = xsimd::fma(ai, bv[j], acc[i][j]);
    }
    a += PA;
    b += PB;
  }

  const V va(alpha);
  if (n_valid == NVE * W) {
    if (beta == T(0)) {
#pragma GCC unroll 32
      for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NVE; ++j) (va * acc[i][j]).store_unaligned(c + i * ldc + j * W);
    } else {
      const V vb(beta);
#pragma GCC unroll 32
      for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NVE; ++j) {
          T* p = c + i * ldc + j * W;
          xsimd::fma(va, acc[i][j], vb * V::load_unaligned(p)).store_unaligned(p);
        }
    }
    return;
  }
  // Ragged right edge: spill alpha * acc to an aligned stack tile, then merge the valid columns.
  alignas(64) T tile[MRE][NVE * W];
#pragma GCC unroll 32
  for (int i = 0; i < MRE; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NVE; ++j) (va * acc[i][j]).store_aligned(&tile[i][j * W]);
  for (int i = 0; i < MRE; ++i) {
    T* p = c + i * ldc;
    if (beta == T(0))
      for (int j = 0; j < n_valid; ++j) p[j] = tile[i][j];
    else
      for (int j = 0; j < n_valid; ++j) p[j] = tile[i][j] + beta * p[j];
  }
}

template <class T>
using MicroKernelFn = void (*)(int64_t, const T*, const T*, T*, int64_t, T, T, int);

// Every edge instance: kernels[m - 1][v - 1] computes m rows and v vectors.
template <class Arch, class T, int PA, int PB, int NV>
struct MicroKernelTable {
  MicroKernelFn<T> fn[PA][NV];
  constexpr MicroKernelTable() : fn{} { fill(std::make_integer_sequence<int, PA * NV>{}); }

 private:
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / NV][I % NV] = &micro_kernel<Arch, T, PA, PB, I / NV + 1, I % NV + 1>), ...);
  }
};

}  // namespace tapegrad::kernels::simd::gemm_detail
