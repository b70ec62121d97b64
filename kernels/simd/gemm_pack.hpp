// GEMM packing: copies blocks of op(A) and op(B) into the layouts the micro-kernel reads (see
// the contract in gemm_micro.hpp).
//
//   - B (the vector side) is packed into k-major micro-panels of width NR: for each k, NR
//     consecutive elements, 64-byte aligned, zero-filled past the matrix edge. When B is stored
//     row-major (not transposed) this is a copy, done a whole row of the block at a time so the
//     reads stream through memory; when B is transposed it is a transpose.
//   - A (the broadcast side) is read by the kernel row by row, so A that is not transposed needs no
//     packing at all. Transposed A is either transposed into a row-major block or copied into
//     column-major panels of MR rows (BLIS's packed A), MR contiguous elements per k: a copy, not
//     a transpose (which one: a_in_panels in gemm_driver.hpp).
// Transposes go through W x W in-register transposes (unpack/shuffle intrinsics): scalar code
// manages ~2 elements per cycle, one store each, which for N = 256 would cost ~8% of the GEMM.
// xsimd 8.1's zip_lo/zip_hi interleave within 128-bit lanes only, so they cannot express it.
// Not here: which blocks get packed when (gemm_driver.hpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tapegrad::kernels::simd::gemm_detail {

// Elements between consecutive packed B panels of depth kc and width NR: rounded to a cache line so
// every panel starts 64-byte aligned.
template <class T>
constexpr int64_t panel_stride(int64_t kc, int64_t NR) {
  const int64_t line = 64 / int64_t(sizeof(T));
  return (kc * NR + line - 1) / line * line;
}

// Row stride of a packed (transposed) A block of depth kc: a whole number of cache lines plus one,
// so rows 4 KiB apart do not all land in the same L1 set.
template <class T>
constexpr int64_t a_row_stride(int64_t kc) {
  const int64_t line = 64 / int64_t(sizeof(T));
  return (kc + line - 1) / line * line + line;
}

// ---------------------------------------------------------------------------------------------
// In-register W x W transposes: r[i] holds row i on entry, column i on exit.

template <class Arch, class T>
struct Transpose {
  static constexpr bool available = false;
};

#if defined(__AVX512F__)
// GCC 12's plain forms of these intrinsics pass an `_mm512_undefined_*()` source, which trips a false
// -Wmaybe-uninitialized (GCC PR 105593); the zero-masked forms with an all-ones mask compile to the
// same unmasked instructions.
namespace avx512 {
inline __m512 unpacklo(__m512 a, __m512 b) {
  return _mm512_maskz_unpacklo_ps(__mmask16(-1), a, b);
}
inline __m512 unpackhi(__m512 a, __m512 b) {
  return _mm512_maskz_unpackhi_ps(__mmask16(-1), a, b);
}
inline __m512d unpacklo(__m512d a, __m512d b) {
  return _mm512_maskz_unpacklo_pd(__mmask8(-1), a, b);
}
inline __m512d unpackhi(__m512d a, __m512d b) {
  return _mm512_maskz_unpackhi_pd(__mmask8(-1), a, b);
}
template <int Imm>
inline __m512 shuffle128(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(__mmask16(-1), a, b, Imm);
}
template <int Imm>
inline __m512d shuffle128(__m512d a, __m512d b) {
  return _mm512_maskz_shuffle_f64x2(__mmask8(-1), a, b, Imm);
}
}  // namespace avx512

template <class Arch>
requires std::is_base_of_v<xsimd::avx512f, Arch>
struct Transpose<Arch, float> {
  static constexpr bool available = true;
  static inline void run(__m512* r) {
    __m512 t[16], u[16];
    for (int p = 0; p < 8; ++p) {
      // t[2p] = a0 b0 a1 b1 | a4 b4 a5 b5 | ...;  t[2p+1] = a2 b2 a3 b3 | ...
      t[2 * p] = avx512::unpacklo(r[2 * p], r[2 * p + 1]);
      t[2 * p + 1] = avx512::unpackhi(r[2 * p], r[2 * p + 1]);
    }
    for (int q = 0; q < 4; ++q) {
      // u[4q + c], 128-bit lane l: rows 4q..4q+3 of column 4l + c.
      const __m512d t0 = _mm512_castps_pd(t[4 * q]), t1 = _mm512_castps_pd(t[4 * q + 1]);
      const __m512d t2 = _mm512_castps_pd(t[4 * q + 2]), t3 = _mm512_castps_pd(t[4 * q + 3]);
      u[4 * q + 0] = _mm512_castpd_ps(avx512::unpacklo(t0, t2));
      u[4 * q + 1] = _mm512_castpd_ps(avx512::unpackhi(t0, t2));
      u[4 * q + 2] = _mm512_castpd_ps(avx512::unpacklo(t1, t3));
      u[4 * q + 3] = _mm512_castpd_ps(avx512::unpackhi(t1, t3));
    }
    for (int c = 0; c < 4; ++c) {
      // Gather the four 4-row quarters of columns c, 4+c, 8+c, 12+c.
      const __m512 v0 = avx512::shuffle128<0x88>(u[c], u[4 + c]);  // c r0-3, 8+c r0-3, c r4-7, 8+c r4-7
      const __m512 v1 = avx512::shuffle128<0xdd>(u[c], u[4 + c]);  // 4+c, 12+c likewise
      const __m512 v2 = avx512::shuffle128<0x88>(u[8 + c], u[12 + c]);
      const __m512 v3 = avx512::shuffle128<0xdd>(u[8 + c], u[12 + c]);
      r[c] = avx512::shuffle128<0x88>(v0, v2);
      r[8 + c] = avx512::shuffle128<0xdd>(v0, v2);
      r[4 + c] = avx512::shuffle128<0x88>(v1, v3);
      r[12 + c] = avx512::shuffle128<0xdd>(v1, v3);
    }
  }
};

template <class Arch>
requires std::is_base_of_v<xsimd::avx512f, Arch>
struct Transpose<Arch, double> {
  static constexpr bool available = true;
  static inline void run(__m512d* r) {
    __m512d lo[4], hi[4], u[8];
    for (int p = 0; p < 4; ++p) {
      lo[p] = avx512::unpacklo(r[2 * p], r[2 * p + 1]);  // [a0 b0][a2 b2][a4 b4][a6 b6]
      hi[p] = avx512::unpackhi(r[2 * p], r[2 * p + 1]);  // [a1 b1][a3 b3][a5 b5][a7 b7]
    }
    for (int h = 0; h < 2; ++h) {
      u[4 * h + 0] = avx512::shuffle128<0x88>(lo[2 * h], lo[2 * h + 1]);  // cols 0, 4
      u[4 * h + 1] = avx512::shuffle128<0xdd>(lo[2 * h], lo[2 * h + 1]);  // cols 2, 6
      u[4 * h + 2] = avx512::shuffle128<0x88>(hi[2 * h], hi[2 * h + 1]);  // cols 1, 5
      u[4 * h + 3] = avx512::shuffle128<0xdd>(hi[2 * h], hi[2 * h + 1]);  // cols 3, 7
    }
    r[0] = avx512::shuffle128<0x88>(u[0], u[4]);
    r[4] = avx512::shuffle128<0xdd>(u[0], u[4]);
    r[2] = avx512::shuffle128<0x88>(u[1], u[5]);
    r[6] = avx512::shuffle128<0xdd>(u[1], u[5]);
    r[1] = avx512::shuffle128<0x88>(u[2], u[6]);
    r[5] = avx512::shuffle128<0xdd>(u[2], u[6]);
    r[3] = avx512::shuffle128<0x88>(u[3], u[7]);
    r[7] = avx512::shuffle128<0xdd>(u[3], u[7]);
  }
};
#endif

#if defined(__AVX__)
template <class Arch>
requires(std::is_base_of_v<xsimd::avx, Arch> &&
         !std::is_base_of_v<xsimd::avx512f, Arch>) struct Transpose<Arch, float> {
  static constexpr bool available = true;
  static inline void run(__m256* r) {
    __m256 t[8], u[8];
    for (int p = 0; p < 4; ++p) {
      t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
      t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
    }
    for (int h = 0; h < 2; ++h) {
      u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
      u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
      u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
      u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
    }
    for (int c = 0; c < 4; ++c) {
      r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
  }
};

template <class Arch>
requires(std::is_base_of_v<xsimd::avx, Arch> &&
         !std::is_base_of_v<xsimd::avx512f, Arch>) struct Transpose<Arch, double> {
  static constexpr bool available = true;
  static inline void run(__m256d* r) {
    const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
    const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
    r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
  }
};
#endif

// Prefetches the cache lines of `n` consecutive elements.
template <int Locality = 3, class T>
inline void prefetch_span(const T* p, int64_t n) {
  const char* first = reinterpret_cast<const char*>(p);
  const char* last = reinterpret_cast<const char*>(p + n) - 1;
  for (const char* q = first; q < last + 64; q += 64) __builtin_prefetch(std::min(q, last), 0, Locality);
}

// Prefetches `rows` rows of `cols` elements, `stride` apart: one prefetch per 64-byte line from each
// row's start (a plain loop; the short rows it serves, a GEMM's rows of A at depth 128 and attention
// heads' rows, ran 0.85x with prefetch_span per row, see GemmDriver::kShortRowBytes).
template <class T>
inline void prefetch_rows(int64_t rows, int64_t cols, const T* src, int64_t stride) {
  constexpr int64_t line = 64 / int64_t(sizeof(T));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += line) __builtin_prefetch(src + r * stride + c, 0, 3);
}

// ---------------------------------------------------------------------------------------------
// Packers.

// How many stored rows ahead a packer prefetches its source into L2. Each stored row of a block is
// a short run (a few cache lines) on a page of its own when the matrix is wide, and the hardware
// prefetchers do not follow such runs across pages: without it, packing the 2048 x 512 B of a
// 128 x 2048 x 512 product took 11% of the product on Zen 4 (7% with it).
inline constexpr int64_t kPackAhead = 32;

// B block of depth kc and width nb, element (k, j) at src[k*ks + j*js] with js == 1 or ks == 1,
// into ceil(nb / NR) k-major panels `stride` elements apart.
template <class Arch, class T, int NR>
void pack_b(int64_t kc, int64_t nb, const T* src, int64_t ks, int64_t js, T* dst, int64_t stride) {
  using V = xsimd::batch<T, Arch>;
  constexpr int W = int(V::size);
  static_assert(NR % W == 0);
  const int64_t full = nb / NR, tail = nb % NR;
  if (js == 1) {
    // Row by row: each row segment of the block is contiguous, each panel gets NR of it.
    for (int64_t k = 0; k < kc; ++k) {
      const T* row = src + k * ks;
      if (k + kPackAhead < kc) prefetch_span<2>(row + kPackAhead * ks, nb);
      for (int64_t p = 0; p < full; ++p)
#pragma GCC unroll 8
        for (int j = 0; j < NR; j += W)
          V::load_unaligned(row + p * NR + j).store_aligned(dst + p * stride + k * NR + j);
      if (tail) {
        T* d = dst + full * stride + k * NR;
        for (int64_t j = 0; j < tail; ++j) d[j] = row[full * NR + j];
        for (int64_t j = tail; j < NR; ++j) d[j] = T(0);
      }
    }
    return;
  }
  // Transposed: column j of the block is row j of the stored matrix (contiguous in k). W rows at a
  // time, W k at a time, through the in-register transpose.
  const int64_t panels = full + (tail ? 1 : 0);
  for (int64_t p = 0; p < panels; ++p) {
    T* d = dst + p * stride;
    const int64_t w = std::min<int64_t>(NR, nb - p * NR);
    for (int g = 0; g < NR / W; ++g) {
      const int64_t rows = std::clamp<int64_t>(w - g * W, 0, W);  // valid rows of this group
      const T* s0 = src + (p * NR + g * W) * js;
      int64_t k0 = 0;
      if constexpr (Transpose<Arch, T>::available) {
        using R = typename V::register_type;
        for (; k0 + W <= kc; k0 += W) {
          R r[W];
#pragma GCC unroll 16
          for (int i = 0; i < W; ++i) r[i] = i < rows ? R(V::load_unaligned(s0 + i * js + k0)) : R(V(T(0)));
          Transpose<Arch, T>::run(r);
#pragma GCC unroll 16
          for (int k = 0; k < W; ++k) V(r[k]).store_aligned(d + (k0 + k) * NR + g * W);
        }
      }
      for (int64_t k = k0; k < kc; ++k)
        for (int i = 0; i < W; ++i) d[k * NR + g * W + i] = i < rows ? s0[i * js + k] : T(0);
    }
  }
}

// Rows [r0, r1) of a transposed A block of depth kc, element (i, k) at src[k*lda + i], into a
// row-major block: dst[i*ps + k]. W stored rows (k) at a time across the whole row range, so the
// reads are W sequential streams; i outer would read one cache line from each of kc rows, each on
// its own page when lda is large.
template <class Arch, class T>
void pack_a_transposed(int64_t r0, int64_t r1, int64_t kc, const T* src, int64_t lda, T* dst, int64_t ps) {
  using V = xsimd::batch<T, Arch>;
  constexpr int W = int(V::size);
  int64_t i_end = r0;  // rows [r0, i_end) go through the vector transpose
  int64_t k_end = 0;   // and depths [0, k_end)
  if constexpr (Transpose<Arch, T>::available) {
    using R = typename V::register_type;
    i_end = r0 + (r1 - r0) / W * W;
    k_end = kc / W * W;
    for (int64_t k0 = 0; k0 < k_end; k0 += W) {
      // Prefetch the rows two steps ahead. Not further: with a large power-of-two lda the rows of a
      // chunk all fall into a few cache sets, and prefetching a whole chunk ahead (as the driver
      // once did) evicted each other before use; the transpose then stalled on memory for 15% of
      // a 2048x1024x256 tn GEMM.
      for (int64_t k = k0 + 2 * W; k < std::min(kc, k0 + 3 * W); ++k)
        prefetch_span(src + k * lda + r0, r1 - r0);
      for (int64_t i0 = r0; i0 < i_end; i0 += W) {
        R r[W];
#pragma GCC unroll 16
        for (int k = 0; k < W; ++k) r[k] = R(V::load_unaligned(src + (k0 + k) * lda + i0));
        Transpose<Arch, T>::run(r);
#pragma GCC unroll 16
        for (int i = 0; i < W; ++i) V(r[i]).store_unaligned(dst + (i0 + i) * ps + k0);
      }
    }
  }
  // What is left (a depth tail, fewer than W rows, or no transpose for this ISA), k outer so the
  // reads stay contiguous.
  for (int64_t k = 0; k < kc; ++k) {
    const int64_t i_from = k < k_end ? i_end : r0;
    for (int64_t i = i_from; i < r1; ++i) dst[i * ps + k] = src[k * lda + i];
  }
}

// Elements one move of pack_a_panels copies per k: MR rounded up to a power of two.
template <int MR>
inline constexpr int a_panel_copy = std::bit_ceil(unsigned(MR));

// Elements between consecutive packed A panels of depth kc: room for the last move's spill,
// rounded to a cache line.
template <class T, int MR>
constexpr int64_t a_panel_stride(int64_t kc) {
  const int64_t line = 64 / int64_t(sizeof(T));
  return (kc * MR + (a_panel_copy<MR> - MR) + line - 1) / line * line;
}

// Transposed A, packed for the column-major kernel (gemm_micro.hpp, AK = true, lda = MR): `rows`
// rows of a depth-kc block, element (i, k) at src[k*lda + i], go into panels of MR rows, panel p at
// dst + p*ps with element (i, k) at [k*MR + i]. Not a transpose: each k contributes MR contiguous
// elements, copied with one vector-sized move (a_panel_copy elements) that spills into the next k's
// slot and is overwritten by it (ps leaves room for the last spill). k outer, so the reads stream
// along the stored rows; panel by panel would read one cache line from each of kc rows, each on
// its own page when lda is large. last_row_cols: how many elements the block's last stored row
// has from src on (the moves read up to a_panel_copy - MR past a panel; a row that is not A's
// last may run on into the next).
template <class T, int MR>
void pack_a_panels(int64_t rows, int64_t kc, const T* src, int64_t lda, int64_t last_row_cols, T* dst,
                   int64_t ps) {
  constexpr int CW = a_panel_copy<MR>;
  const int64_t full = rows / MR, tail = rows % MR;
  for (int64_t k = 0; k < kc; ++k) {
    const T* row = src + k * lda;
    T* d = dst + k * MR;
    // Into L2 (into L1, rows a power of two apart would evict each other before use).
    if (k + kPackAhead < kc) prefetch_span<2>(row + kPackAhead * lda, rows);
    // Panels whose move stays inside what this row may be read for.
    const int64_t moved =
        k + 1 < kc ? full : last_row_cols < CW ? 0 : std::min(full, (last_row_cols - CW) / MR + 1);
    for (int64_t p = 0; p < moved; ++p) std::memcpy(d + p * ps, row + p * MR, CW * sizeof(T));
    for (int64_t p = moved; p < full; ++p) std::memcpy(d + p * ps, row + p * MR, MR * sizeof(T));
    if (tail) std::memcpy(d + full * ps, row + full * MR, size_t(tail) * sizeof(T));
  }
}

}  // namespace tapegrad::kernels::simd::gemm_detail
