// SIMD GEMM (float32 and float64), templated on the xsimd architecture: the entry points that
// kernels/simd/isa_*.cpp install into the dispatch table.
//
// Layers, each in its own header: gemm_config.hpp (register tile, block sizes, buffers),
// gemm_pack.hpp (packing), gemm_micro.hpp (micro-kernel and its contract), gemm_driver.hpp (loop
// nest, threads, batched form). This file only binds them to the table with num_threads().
#pragma once

#include "kernels/simd/gemm_driver.hpp"
#include "kernels/table.hpp"

namespace tapegrad::kernels::simd {

// Narrow problems (N no wider than the narrow tile) get the narrow tile (see gemm_config.hpp)
// unless its taller tiles would pad M more: both tiles are FMA-bound, so their cost goes with the
// rows they compute (M = 36: six 6-row tiles beat five 8-row ones, 193 vs 171 GFLOP/s).
template <class Arch, class T>
bool use_narrow(int64_t M, int64_t N) {
  using Narrow = gemm_detail::NarrowTile<Arch, T>;
  using Wide = gemm_detail::MicroTile<Arch, T>;
  return Narrow::enabled && N <= Narrow::NR &&
         gemm_detail::round_up(M, Narrow::MR) <= gemm_detail::round_up(M, Wide::MR);
}

template <class Arch, class T>
void gemm_entry(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                const T* B, int64_t ldb, T beta, T* C, int64_t ldc, GemmEpilogue<T> ep) {
  using namespace gemm_detail;
  if (use_narrow<Arch, T>(M, N))
    GemmDriver<Arch, T, NarrowTile<Arch, T>>::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                                   num_threads(), nullptr, ep);
  else
    GemmDriver<Arch, T>::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, num_threads(), nullptr,
                              ep);
}

template <class Arch, class T>
void gemm_batched_entry(const BatchLayout& layout, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                        const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  using namespace gemm_detail;
  if (use_narrow<Arch, T>(M, N))
    GemmDriver<Arch, T, NarrowTile<Arch, T>>::gemm_batched(layout, ta, tb, M, N, K, alpha, A, lda, B, ldb,
                                                           beta, C, ldc, num_threads());
  else
    GemmDriver<Arch, T>::gemm_batched(layout, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                      num_threads());
}

// Packed B always uses the ordinary tile (gemm_entry's choice of the narrow one depends on M, which
// is not known when packing).
template <class Arch, class T>
int64_t packed_b_size(int64_t K, int64_t N) {
  return gemm_detail::GemmDriver<Arch, T>::packed_size(K, N);
}

template <class Arch, class T>
void pack_b_entry(bool tb, int64_t K, int64_t N, const T* B, int64_t ldb, T* dst) {
  gemm_detail::GemmDriver<Arch, T>::pack_whole_b(tb, K, N, B, ldb, dst);
}

template <class Arch, class T>
void gemm_packed_b_entry(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                         const T* B, int64_t ldb, const T* packed, T beta, T* C, int64_t ldc,
                         GemmEpilogue<T> ep) {
  gemm_detail::GemmDriver<Arch, T>::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, num_threads(),
                                         packed, ep);
}

template <class Arch, class T>
void install_gemm(KernelTable<T>& t) {
  t.gemm = gemm_entry<Arch, T>;
  t.gemm_batched = gemm_batched_entry<Arch, T>;
  t.packed_b_size = packed_b_size<Arch, T>;
  t.pack_b = pack_b_entry<Arch, T>;
  t.gemm_packed_b = gemm_packed_b_entry<Arch, T>;
}

}  // namespace tapegrad::kernels::simd
