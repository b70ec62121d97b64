// SIMD row-wise and elementwise kernels (softmax family, layer norm, elementwise, reductions,
// embedding, Adam), templated on the xsimd architecture. Installed by each kernels/simd/isa_*.cpp.
#pragma once

#include "kernels/table.hpp"

namespace tapegrad::kernels::simd {

template <class Arch>
void install_vector_kernels(KernelTable& t) {
  (void)t;  // not vectorised yet: the reference stays in place
}

}  // namespace tapegrad::kernels::simd
