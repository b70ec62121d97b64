// The narrow interface between tapegrad's ops and its compute kernels.
//
// Everything here works on raw, contiguous (or explicitly strided) buffers of float or double: no
// Tensor type, no autograd, no allocation visible to the caller. Each function is defined for
// T = float and T = double. Most kernels are rows of the kernel list (kernels/kernel_list.hpp, where
// their contracts are written); the functions generated from it route float calls through the
// dispatch table, which holds the best SIMD path the machine has (AVX-512, AVX2+FMA, SSE2) or the
// scalar reference (kernels/ref/), and double calls to the reference. The rest take the routes below.
//
//   kernel                               float                        double
//   every kernel-list row                SIMD version, else ref       ref
//     (reference only today: pow_scalar, pow_scalar_backward, where, fill, sum_all)
//   gemm, gemm_batched, packed_b_size,   the ISA's GEMM, else ref     the ISA's GEMM, else ref
//     pack_b, gemm_packed_b,             (gemm_batched: else a loop of gemm; packing: else none;
//     gemm_nd_batched                    gemm_nd_batched: gemm_batched over merged nd batch dims)
//   copy_strided, add_strided, write_strided  kernels/strided.hpp (plain loops merged over dims; also int32)
//   uniform_at                           one function (kernels/dispatch.cpp)
//
// Run-time settings (instruction set, threads, cache sizes): kernels/runtime.hpp.
#pragma once

#include <cstdint>

#include "kernels/runtime.hpp"
#include "kernels/table.hpp"
#include "kernels/types.hpp"

namespace tapegrad::kernels {

// ---------------------------------------------------------------------------------------------
// The kernel list: name<T>(parameters) for every row, routed through the active table.

#define TG_KERNEL(R, name, params, args) \
  template <class T>                     \
  inline R name params {                 \
    return active_table<T>().name args;  \
  }
#include "kernels/kernel_list.hpp"
#undef TG_KERNEL

// ---------------------------------------------------------------------------------------------
// GEMM: C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. op(A) is M x K, op(B) is K x N,
// C is M x N. Leading dimensions are row strides of the stored (untransposed) matrices.
// When beta == 0, C is not read (NaNs in C do not propagate). ep (kernels/types.hpp) is applied as
// the tiles are stored: C = act(alpha * op(A) * op(B) + beta * C + bias), a linear layer's bias and
// ReLU, or the ReLU's gradient gate, without a pass of their own.

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc, GemmEpilogue<T> ep = {});

// op(B) (K x N) packed once for many GEMMs that share it, such as a recurrent weight used at every
// time step: the panels each gemm call would otherwise pack afresh. packed_b_size gives the elements
// the packing needs (0: the active path packs nothing) and pack_b fills a caller's buffer of that
// size (64-byte aligned). The panels belong to the instruction set active at pack_b; on another one
// gemm_packed_b reads `source` instead. B's storage and values, and the buffer, must stay unchanged
// while the PackedB (kernels/types.hpp) is in use.
template <class T>
int64_t packed_b_size(int64_t K, int64_t N);
template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb, T* buffer);
// C = act(alpha * op(A) * op(B) + beta * C + bias) (ep as in gemm) with op(B) from pack_b (M x K
// times B.K x B.N).
template <class T>
void gemm_packed_b(bool trans_a, int64_t M, T alpha, const T* A, int64_t lda, const PackedB<T>& B, T beta,
                   T* C, int64_t ldc, GemmEpilogue<T> ep = {});

// `batch` independent GEMMs; matrix i uses A + i*stride_a, B + i*stride_b, C + i*stride_c.
// A stride of 0 broadcasts that operand over the batch.
template <class T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb, int64_t stride_b,
                  T beta, T* C, int64_t ldc, int64_t stride_c);

// GEMMs over an nd batch: for every index b of `batch_shape` (batch_ndim <= 8; 0 is one GEMM),
// matrix b of each operand starts at the sum over dims d of b[d] * its stride in d (in elements;
// 0 broadcasts A or B over that dim). A C stride of 0 sums that dim into one C matrix, in index
// order; beta must be 1 then, with C initialised. Dims every operand walks alike merge; without a
// summed dim the two longest become one batched GEMM (a BatchLayout, split across the threads as
// one batch), so results do not depend on how the batch dims are written.
template <class T>
void gemm_nd_batched(int batch_ndim, const int64_t* batch_shape, bool trans_a, bool trans_b, int64_t M, int64_t N,
                     int64_t K, T alpha, const T* A, int64_t lda, const int64_t* a_strides, const T* B,
                     int64_t ldb, const int64_t* b_strides, T beta, T* C, int64_t ldc, const int64_t* c_strides);

// ---------------------------------------------------------------------------------------------
// Strided copies (also for int32_t).

// Strided copy of an nd array into a contiguous buffer (contiguous(), permute, slices).
template <class T>
void copy_strided(int ndim, const int64_t* shape, const T* x, const int64_t* x_strides, T* y);
// The adjoint of copy_strided: x_grad (strided) += y_grad (contiguous).
template <class T>
void add_strided(int ndim, const int64_t* shape, const T* dy, T* dx, const int64_t* dx_strides);
// The inverse of copy_strided: y (strided) = x (contiguous), e.g. a slice's gradient written into its
// place in a gradient buffer that nothing else has written.
template <class T>
void write_strided(int ndim, const int64_t* shape, const T* x, T* y, const int64_t* y_strides);

// ---------------------------------------------------------------------------------------------
// Random numbers (a counter-based generator, so results do not depend on thread count).

// splitmix64 of a Weyl sequence keyed by the seed, to a uniform double in [0, 1) with 53 random
// bits (kernels/counter_rng.hpp; the SIMD kernels draw the same numbers in vector lanes).
double uniform_at(uint64_t seed, uint64_t counter);

}  // namespace tapegrad::kernels
