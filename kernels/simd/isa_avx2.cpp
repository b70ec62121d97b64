// The avx2 instance of the SIMD kernels: compiled with this instruction set's flags only (see
// kernels/meson.build) and reached only through the dispatch table when the CPU supports it.
#include "kernels/table.hpp"

namespace tapegrad::kernels {

KernelTable simd_table_avx2() {
  KernelTable t;
  t.isa = Isa::avx2;
  return t;
}

}  // namespace tapegrad::kernels
