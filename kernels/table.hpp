// The run-time dispatch table: the entry points of one element type on one instruction set.
//
// dispatch.cpp fills a table with the scalar reference for every entry, then hands it to the active
// ISA's translation unit (kernels/simd/isa_*.cpp, compiled with its own -m flags), which overrides
// the entries it vectorises. An entry therefore always points somewhere: a kernel without a SIMD
// version runs the reference. Internal to kernels/.
#pragma once

#include "kernels/types.hpp"

namespace tapegrad::kernels {

// One declaration per kernel-list row, never defined: its type is what a table entry holds
// (a declaration may carry the row's default arguments, a function pointer type may not).
namespace signature {
#define TG_KERNEL(R, name, params, args) \
  template <class T>                     \
  R name params;
#include "kernels/kernel_list.hpp"
#undef TG_KERNEL
}  // namespace signature

// Names the rows, for the SIMD registrations (kernels/simd/install.hpp).
enum class KernelId {
#define TG_KERNEL(R, name, params, args) name,
#include "kernels/kernel_list.hpp"
#undef TG_KERNEL
};

template <class T>
struct KernelTable {
  Isa isa = Isa::scalar;
  // GEMM family (kernels.hpp's route table): the reference for float and double alike unless the ISA
  // has its own. gemm_batched null = a loop of gemm; packed B null = this path packs nothing.
  void (*gemm)(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, T*, int64_t,
               GemmEpilogue<T>) = nullptr;
  void (*gemm_batched)(const BatchLayout&, bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t,
                       const T*, int64_t, T, T*, int64_t) = nullptr;
  int64_t (*packed_b_size)(int64_t, int64_t) = nullptr;
  void (*pack_b)(bool, int64_t, int64_t, const T*, int64_t, T*) = nullptr;
  void (*gemm_packed_b)(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t,
                        const T*, T, T*, int64_t, GemmEpilogue<T>) = nullptr;
  // The kernel list: one entry per row.
#define TG_KERNEL(R, name, params, args) decltype(&signature::name<T>) name = nullptr;
#include "kernels/kernel_list.hpp"
#undef TG_KERNEL
};

// Each ISA's translation unit: overrides the entries it has in tables that arrive complete.
void install_sse2(KernelTable<float>& f32, KernelTable<double>& f64);
void install_avx2(KernelTable<float>& f32, KernelTable<double>& f64);
void install_avx512(KernelTable<float>& f32, KernelTable<double>& f64);

// The tables in use (set by set_isa / TAPEGRAD_ARCH); every entry but the optional GEMM ones is set.
template <class T>
const KernelTable<T>& active_table();
// Rebuilds the tables for `isa` (kernels/runtime.cpp calls it when the choice changes).
void build_tables(Isa isa);
// The instruction set the tables start on: TAPEGRAD_ARCH, else the best one (kernels/runtime.cpp).
Isa startup_isa();

}  // namespace tapegrad::kernels
