// The sse2 instance of the SIMD kernels: compiled with this instruction set's flags only (see
// kernels/meson.build) and reached only through the dispatch table when the CPU supports it.
#include "kernels/table.hpp"

namespace tapegrad::kernels {

KernelTable simd_table_sse2() {
  KernelTable t;
  t.isa = Isa::sse2;
  return t;
}

}  // namespace tapegrad::kernels
