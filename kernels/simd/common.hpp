// Shared plumbing for the SIMD row-wise and elementwise kernels: batch aliases, tail loads/stores,
// the horizontal reductions xsimd 8.1 lacks, and the OpenMP policy (when to fork, how to split).
//
// Everything here and in the kernel headers beside it sits in an unnamed namespace on purpose: each
// kernels/simd/isa_*.cpp includes these headers and is compiled with its own -m flags, so any helper
// with external linkage (even an inline one) could be merged by the linker with the AVX-512 copy and
// then run on the SSE2 path. Internal linkage keeps each ISA's code to itself. No kernels live here.
#pragma once

#include <immintrin.h>  // the AVX-512 masks and reductions below, whatever the TU's flags
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#include "kernels/balanced_split.hpp"  // thread ranges: contiguous, static, balanced to one item
#include "kernels/kernels.hpp"

// g++ 12.2 reports its own AVX-512 intrinsics (the `__Y = __Y` idiom of _mm512_undefined_*) as
// "used uninitialized" once they are inlined into our code (GCC PR105593, fixed in 12.3). Each
// kernel header switches exactly those two warnings off between these markers.
// clang-format off
#define TG_SIMD_SILENCE_GCC_PR105593_BEGIN                   \
  _Pragma("GCC diagnostic push")                             \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")     \
  _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define TG_SIMD_SILENCE_GCC_PR105593_END _Pragma("GCC diagnostic pop")
// clang-format on

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

// Small vector helpers (exp, tail loads, horizontal reductions) must be inlined into their loops:
// an out-of-line call spills every live zmm register to the stack, and g++ declines to inline exp
// on its own once a kernel calls it twice. Measured: the softmax exp pass ran 3.4 ns per 16 floats
// as calls, 2.2 ns inlined (AVX-512).
#define TG_INLINE inline __attribute__((always_inline))
// For a loop driver that takes its per-element work as a lambda: inlines everything it calls. g++
// keeps a lambda called from both the body and the tail out of line, which costs a call and the
// reload of every constant per batch (measured: gelu_tanh 16M, AVX2, see elementwise.hpp).
#define TG_FLATTEN __attribute__((flatten))

namespace tapegrad::kernels::simd {
namespace {

template <class Arch>
using Batch = xsimd::batch<float, Arch>;
template <class Arch>
using IBatch = xsimd::batch<int32_t, Arch>;

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// The SIMD version of kernel-list row `id` (kernels/kernel_list.hpp) on Arch: none unless the
// kernel's header registers one with TG_SIMD_KERNEL(row name, function template) after defining it.
// kernels/simd/install.hpp puts every registered version into the float table; an unregistered row
// keeps the scalar reference. The function's type must be the row's, or the install does not compile.
template <KernelId id, class Arch>
inline constexpr std::nullptr_t simd_kernel = nullptr;
#define TG_SIMD_KERNEL(name, function) \
  template <class Arch>                \
  inline constexpr auto simd_kernel<KernelId::name, Arch> = &function<Arch>;

// Elements a kernel must touch before it forks the OpenMP team. A fork/join of two threads costs
// 2.9 us on this VM (best case, measured), about the time one core takes to stream 128 KiB, so below
// this the calling thread does the whole job. A property of the size only: results never depend on it.
inline constexpr int64_t kParallelMinWork = 1 << 15;

// Team size for a job of `work` elements: 1 below the threshold, else the configured count (never
// more threads than independent items).
inline int team_for(int64_t work, int64_t items) {
  if (work < kParallelMinWork || items < 2) return 1;
  return int(std::min<int64_t>(num_threads(), items));
}

// Runs body(begin, end) over [0, n) on `nt` threads (inline when nt == 1): thread t takes the t-th
// of nt balanced contiguous ranges, the same split in every kernel, so that consecutive ops over the
// same rows (a layer norm after a linear, their backward passes) find their rows in the core's own
// cache. Handing out four chunks per thread dynamically instead (so that a thread that loses its
// core leaves its chunks to the others) sent half of every op's rows to the other core: on a 2-core
// Zen 5 VM whose vCPUs are 400 ns apart the small Transformer's 2-thread step took 71.0 ms that way
// and 54.5 ms with fixed ranges and the GEMM's matching row split (tapegrad profile, the same
// build). Every index is handled by exactly one call, so per-item results cannot depend on nt.
template <class F>
void parallel_ranges(int64_t n, int nt, F&& body) {
  if (nt <= 1) {
    if (n > 0) body(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const Range r = balanced_split(n, omp_get_thread_num(), omp_get_num_threads());
    if (r.end > r.begin) body(r.begin, r.end);
  }
}

// Loads the first n (< batch size) floats at p, padding the rest with `fill` (the reduction's
// identity), so a row's tail goes through the same vector code as its body. AVX-512 has masked
// loads and stores for this; elsewhere the tail goes through a small stack buffer.
template <class Arch>
TG_INLINE Batch<Arch> load_tail(const float* p, int64_t n, float fill) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return Batch<Arch>(_mm512_mask_loadu_ps(Batch<Arch>(fill), __mmask16((1u << n) - 1), p));
  } else {
    alignas(64) float buf[Batch<Arch>::size];
    for (std::size_t i = 0; i < Batch<Arch>::size; ++i) buf[i] = i < std::size_t(n) ? p[i] : fill;
    return Batch<Arch>::load_aligned(buf);
  }
}

template <class Arch>
TG_INLINE void store_tail(float* p, int64_t n, const Batch<Arch>& v) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v);
  } else {
    alignas(64) float buf[Batch<Arch>::size];
    v.store_aligned(buf);
    for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
  }
}

// Horizontal reductions. On AVX-512 the compiler's shuffle trees (_mm512_reduce_*); elsewhere a
// pairwise tree over the stored lanes: log2(W) dependent steps instead of W - 1. Either way they sit
// on a row's critical path, which on short rows is as long as the row's arithmetic.
template <class Arch>
TG_INLINE float hmax(const Batch<Arch>& v) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return _mm512_reduce_max_ps(v);
  } else {
    alignas(64) float buf[Batch<Arch>::size];
    v.store_aligned(buf);
    for (std::size_t w = Batch<Arch>::size / 2; w >= 1; w /= 2)
      for (std::size_t i = 0; i < w; ++i) buf[i] = buf[i + w] > buf[i] ? buf[i + w] : buf[i];
    return buf[0];
  }
}

template <class Arch>
TG_INLINE float hmin(const Batch<Arch>& v) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return _mm512_reduce_min_ps(v);
  } else {
    alignas(64) float buf[Batch<Arch>::size];
    v.store_aligned(buf);
    for (std::size_t w = Batch<Arch>::size / 2; w >= 1; w /= 2)
      for (std::size_t i = 0; i < w; ++i) buf[i] = buf[i + w] < buf[i] ? buf[i + w] : buf[i];
    return buf[0];
  }
}

template <class Arch>
TG_INLINE float hsum(const Batch<Arch>& v) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
    return _mm512_reduce_add_ps(v);
  else
    return xsimd::hadd(v);
}

// Full-batch store that bypasses the caches (no read-for-ownership of the destination line).
// p must be aligned to the batch size.
template <class Arch>
TG_INLINE void store_stream(float* p, const Batch<Arch>& v) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
    _mm512_stream_ps(p, v);
  else if constexpr (Batch<Arch>::size == 8)
    _mm256_stream_ps(p, v);
  else
    _mm_stream_ps(p, v);
}

// Streaming stores pay off when y is too big to still be in cache when it is next read, every row
// starts on a batch boundary, and rows are short enough that the rows a pipelined step touches stay
// in L1 (measured on softmax: 4096x1024 0.94 ms streamed vs 1.02 ms not; 1024x8192 4.7 vs 2.9 ms).
template <class Arch>
bool stream_output(int64_t rows, int64_t cols, const float* y) {
  constexpr int64_t W = Batch<Arch>::size;
  return rows * cols * int64_t(sizeof(float)) >= cache_info().l3 / 2 && cols % W == 0 && cols <= 2048 &&
         reinterpret_cast<uintptr_t>(y) % (W * sizeof(float)) == 0;
}

// The same for a flat array of n floats processed in kFlatBlock-sized pieces (elementwise.hpp): the
// pieces start on batch boundaries when y does, so only y's alignment and size matter.
template <class Arch>
bool stream_flat_output(int64_t n, const float* y) {
  constexpr int64_t W = Batch<Arch>::size;
  return n * int64_t(sizeof(float)) >= cache_info().l3 / 2 &&
         reinterpret_cast<uintptr_t>(y) % (W * sizeof(float)) == 0;
}

// A 64-byte aligned scratch array owned by one kernel call (partial sums). Plain new[] rather than
// std::vector so that no library template is instantiated under this TU's instruction set.
struct Scratch {
  float* p = nullptr;
  explicit Scratch(int64_t n)
      : p(static_cast<float*>(
            ::operator new[](sizeof(float) * size_t(std::max<int64_t>(n, 1)), std::align_val_t{64}))) {}
  ~Scratch() { ::operator delete[](p, std::align_val_t{64}); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
