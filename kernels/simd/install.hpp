// Installs an ISA's SIMD kernels into the dispatch tables: every kernel-list row with a registered
// SIMD version (TG_SIMD_KERNEL, kernels/simd/common.hpp) and the GEMM family. Called by each
// kernels/simd/isa_*.cpp on tables that arrive filled with the scalar reference, so a row without
// a SIMD version keeps the reference.
//
// Only float32 rows are vectorised; the double path stays on the reference. GEMM lives apart
// (kernels/simd/gemm*.hpp). The kernel headers:
//   common.hpp       batch aliases, tail loads, horizontal reductions, OpenMP policy, registration
//   math.hpp         vector exp with a stated error bound
//   softmax.hpp      softmax (+ scale, mask, causal), log_softmax, backwards, cross-entropy
//   norm.hpp         layer norm forward / backward (deterministic dgamma / dbeta)
//   strided.hpp      index-space coalescing for broadcasting ops
//   elementwise.hpp  unary ops and backwards, affine, binary ops and backwards
//   reduce.hpp       sum_to, sum_axis, sum_all, sum_squares, max_axis
//   indexing.hpp     embedding gather / scatter-add
//   optim.hpp        Adam / AdamW
//   attention.hpp    additive attention scores and their backward
//   gru.hpp          GRU cell gates and their backward
//   sdpa.hpp         scaled-dot-product attention, fused, and its backward
//   random.hpp       counter-based dropout masks in vector lanes, the dropout kernel
//   peak.hpp         the FMA loop behind the measured peak
#pragma once

#include <type_traits>

#include "kernels/simd/attention.hpp"
#include "kernels/simd/elementwise.hpp"
#include "kernels/simd/gemm.hpp"
#include "kernels/simd/gru.hpp"
#include "kernels/simd/indexing.hpp"
#include "kernels/simd/norm.hpp"
#include "kernels/simd/optim.hpp"
#include "kernels/simd/peak.hpp"
#include "kernels/simd/random.hpp"
#include "kernels/simd/reduce.hpp"
#include "kernels/simd/sdpa.hpp"
#include "kernels/simd/softmax.hpp"
#include "kernels/table.hpp"

namespace tapegrad::kernels::simd {

template <class Arch>
void install(KernelTable<float>& f32, KernelTable<double>& f64) {
  install_gemm<Arch>(f32);
  install_gemm<Arch>(f64);
#define TG_KERNEL(R, name, params, args)                                                                \
  if constexpr (!std::is_null_pointer_v<std::remove_cv_t<decltype(simd_kernel<KernelId::name, Arch>)>>) \
    f32.name = simd_kernel<KernelId::name, Arch>;
#include "kernels/kernel_list.hpp"
#undef TG_KERNEL
}

}  // namespace tapegrad::kernels::simd
