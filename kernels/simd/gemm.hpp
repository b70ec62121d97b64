// SIMD GEMM (float32 and float64), templated on the xsimd architecture.
// Installed into the dispatch table by each kernels/simd/isa_*.cpp.
#pragma once

#include "kernels/table.hpp"

namespace tapegrad::kernels::simd {

template <class Arch>
void install_gemm(KernelTable& t) {
  (void)t;  // not vectorised yet: the reference stays in place
}

}  // namespace tapegrad::kernels::simd
