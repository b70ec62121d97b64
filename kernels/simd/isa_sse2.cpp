// The sse2 instance of the SIMD kernels: compiled with this instruction set's flags only (see
// kernels/meson.build) and reached only through the dispatch table when the CPU supports it.
#include <xsimd/xsimd.hpp>

#include "kernels/simd/install.hpp"

namespace tapegrad::kernels {

void install_sse2(KernelTable<float>& f32, KernelTable<double>& f64) {
  simd::install<xsimd::sse2>(f32, f64);
}

}  // namespace tapegrad::kernels
