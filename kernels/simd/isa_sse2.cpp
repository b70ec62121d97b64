// The sse2 instance of the SIMD kernels: compiled with this instruction set's flags only (see
// kernels/meson.build) and reached only through the dispatch table when the CPU supports it.
#include <xsimd/xsimd.hpp>

#include "kernels/simd/gemm.hpp"
#include "kernels/simd/vector.hpp"

namespace tapegrad::kernels {

KernelTable simd_table_sse2() {
  using Arch = xsimd::sse2;
  KernelTable t;
  t.isa = Isa::sse2;
  simd::install_gemm<Arch>(t);
  simd::install_vector_kernels<Arch>(t);
  return t;
}

}  // namespace tapegrad::kernels
