// Run-time settings of the kernels: which instruction set the dispatch table uses, the OpenMP
// thread count every kernel forks with, and the cache sizes the GEMM blocks for.
//
// Internal to the library (kernels, the kernel tests and benchmarks). Code above the kernels reaches
// the same settings through the public include/tapegrad/runtime.hpp, which knows nothing of Isa
// (src/tensor/runtime.cpp translates). Implemented in kernels/runtime.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tapegrad::kernels {

enum class Isa { scalar, sse2, avx2, avx512 };

const char* isa_name(Isa isa);
// Sets *out to the instruction set called `name` (as isa_name spells it); false if there is none.
bool parse_isa(const std::string& name, Isa* out);
// Whether this machine can run `isa`.
bool isa_supported(Isa isa);
// The instruction set in use: the best the machine has, or TAPEGRAD_ARCH if set (never above what
// the machine supports; an unknown or unsupported name throws std::runtime_error at first use).
Isa active_isa();
// Every instruction set this machine can run, lowest first (always includes scalar).
std::vector<Isa> available_isas();
// Switches the path for the whole process (tests iterate the available ones). Throws if unsupported.
void set_isa(Isa isa);

// OpenMP thread count used by every kernel: TAPEGRAD_THREADS, else the OpenMP default.
int num_threads();
void set_num_threads(int n);

// Cache sizes in bytes as read from the OS at start-up (sensible defaults if unreadable).
struct CacheInfo {
  int64_t l1d = 48 * 1024, l2 = 1024 * 1024, l3 = 32 * 1024 * 1024;
};
const CacheInfo& cache_info();

}  // namespace tapegrad::kernels
