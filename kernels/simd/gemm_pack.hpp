// GEMM packing: copies a block of op(A) or op(B) into the k-major micro-panels the micro-kernel
// reads (see the contract in gemm_micro.hpp).
//
// A panel of width P (MR for A, NR for B) holds, for each k, P consecutive elements. Depending on
// the operand's storage this is either
//   - a copy (the P elements are contiguous in memory: A transposed, B not transposed), or
//   - a transpose (the P elements are ld apart: A not transposed, B transposed). Scalar code does a
//     transpose at ~2 elements per cycle (one store each), which for N = 256 would cost ~8% of the
//     whole GEMM, so full W x W blocks go through an in-register transpose (unpack/shuffle
//     intrinsics; xsimd 8.1's zip_lo/zip_hi interleave within 128-bit lanes only, so they cannot
//     express it).
// Panels are zero-padded past the matrix edge, and each panel is followed by W elements of slack:
// the transpose stores whole vectors, and the last one of a panel whose width is not a multiple of
// W spills up to W-1 elements past it. Not here: which blocks get packed when (gemm_driver.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tapegrad::kernels::simd::gemm_detail {

// Elements between consecutive packed panels of depth kc and width P: the panel, the transpose's
// slack, rounded to a cache line so every panel starts 64-byte aligned.
template <class T>
constexpr int64_t panel_stride(int64_t kc, int64_t P, int64_t W) {
  const int64_t line = 64 / int64_t(sizeof(T));
  return (kc * P + W + line - 1) / line * line;
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
inline __m512 unpacklo(__m512 a, __m512 b) { return _mm512_maskz_unpacklo_ps(__mmask16(-1), a, b); }
inline __m512 unpackhi(__m512 a, __m512 b) { return _mm512_maskz_unpackhi_ps(__mmask16(-1), a, b); }
inline __m512d unpacklo(__m512d a, __m512d b) { return _mm512_maskz_unpacklo_pd(__mmask8(-1), a, b); }
inline __m512d unpackhi(__m512d a, __m512d b) { return _mm512_maskz_unpackhi_pd(__mmask8(-1), a, b); }
template <int Imm>
inline __m512 shuffle128(__m512 a, __m512 b) { return _mm512_maskz_shuffle_f32x4(__mmask16(-1), a, b, Imm); }
template <int Imm>
inline __m512d shuffle128(__m512d a, __m512d b) { return _mm512_maskz_shuffle_f64x2(__mmask8(-1), a, b, Imm); }
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
      const __m512 v0 = avx512::shuffle128<0x88>(u[c], u[4 + c]);    // c r0-3, 8+c r0-3, c r4-7, 8+c r4-7
      const __m512 v1 = avx512::shuffle128<0xdd>(u[c], u[4 + c]);    // 4+c, 12+c likewise
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
  requires(std::is_base_of_v<xsimd::avx, Arch> && !std::is_base_of_v<xsimd::avx512f, Arch>)
struct Transpose<Arch, float> {
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
  requires(std::is_base_of_v<xsimd::avx, Arch> && !std::is_base_of_v<xsimd::avx512f, Arch>)
struct Transpose<Arch, double> {
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

// ---------------------------------------------------------------------------------------------
// Panel packers. Each writes one panel of depth kc and width P (w <= P valid rows/columns).

// dst[k*P + i] = src[k*ld + i] for i < w, 0 for w <= i < P: the P elements are contiguous.
template <class Arch, class T, int P>
inline void pack_copy(int64_t kc, int w, const T* src, int64_t ld, T* dst) {
  using V = xsimd::batch<T, Arch>;
  constexpr int W = int(V::size);
  if (w == P) {
    for (int64_t k = 0; k < kc; ++k) {
      if constexpr (P % W == 0) {
#pragma GCC unroll 8
        for (int j = 0; j < P; j += W) V::load_unaligned(src + k * ld + j).store_aligned(dst + k * P + j);
      } else {
        std::memcpy(dst + k * P, src + k * ld, P * sizeof(T));  // constant size: a few vector moves
      }
    }
    return;
  }
  for (int64_t k = 0; k < kc; ++k) {
    int i = 0;
    for (; i < w; ++i) dst[k * P + i] = src[k * ld + i];
    for (; i < P; ++i) dst[k * P + i] = T(0);
  }
}

// dst[k*P + i] = src[i*ld + k] for i < w, 0 for w <= i < P: a transpose of a w x kc block.
template <class Arch, class T, int P>
inline void pack_transpose(int64_t kc, int w, const T* src, int64_t ld, T* dst) {
  using V = xsimd::batch<T, Arch>;
  constexpr int W = int(V::size);
  int64_t k0 = 0;
  if constexpr (Transpose<Arch, T>::available) {
    using R = typename V::register_type;
    constexpr int G = (P + W - 1) / W;  // groups of W rows
    for (; k0 + W <= kc; k0 += W) {
      R r[G][W];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 16
        for (int i = 0; i < W; ++i) {
          const int row = g * W + i;
          r[g][i] = row < w ? R(V::load_unaligned(src + row * ld + k0)) : R(V(T(0)));
        }
        Transpose<Arch, T>::run(r[g]);
      }
      // Column k of the block goes to dst[(k0+k)*P ...]: store groups in increasing address order so
      // a partial last group's spill into the next k is overwritten by that k's first store.
#pragma GCC unroll 16
      for (int k = 0; k < W; ++k)
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) V(r[g][k]).store_unaligned(dst + (k0 + k) * P + g * W);
    }
  }
  for (int64_t k = k0; k < kc; ++k) {
    int i = 0;
    for (; i < w; ++i) dst[k * P + i] = src[i * ld + k];
    for (; i < P; ++i) dst[k * P + i] = T(0);
  }
}

// Packs rows [0, m) x depth [0, kc) of an operand whose element (i, k) is at src[i*rs + k*cs]
// (one of rs, cs is 1) into ceil(m/P) panels of width P, `stride` elements apart. Panels
// [p_begin, p_end) only, so a team can split the work.
template <class Arch, class T, int P>
void pack_panels(int64_t m, int64_t kc, const T* src, int64_t rs, int64_t cs, T* dst, int64_t stride,
                 int64_t p_begin, int64_t p_end) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int w = int(std::min<int64_t>(P, m - p * P));
    if (cs == 1)
      pack_transpose<Arch, T, P>(kc, w, src + p * P * rs, rs, dst + p * stride);
    else
      pack_copy<Arch, T, P>(kc, w, src + p * P, cs, dst + p * stride);
  }
}

}  // namespace tapegrad::kernels::simd::gemm_detail
