/// @file
/// Process-wide run-time settings of the compute kernels: the OpenMP thread count, the instruction
/// set the float kernels use, and the cache sizes the GEMM blocks for.
///
/// Only the command line (tools/), tests and benchmarks set these; library code reads them at most.
/// Defaults come from the environment at first use: TAPEGRAD_THREADS (else the OpenMP default) and
/// TAPEGRAD_ARCH (else the best instruction set the CPU has; it may only lower the choice).
/// Implemented in src/tensor/runtime.cpp on top of the kernels' own settings (kernels/runtime.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

/// Process-wide kernel settings (see runtime.hpp).
namespace tapegrad::runtime {

/// Threads every kernel may use.
int num_threads();
/// Sets the threads every kernel may use; throws tapegrad::Error unless n >= 1.
void set_num_threads(int n);

/// The instruction set in use: "avx512", "avx2", "sse2" or "scalar".
std::string active_isa();
/// Every instruction set this CPU can run, lowest first.
std::vector<std::string> available_isas();
/// Switches the whole process to instruction set `name`; throws tapegrad::Error for an unknown name or
/// one this CPU does not support.
void set_isa(const std::string& name);

/// Cache sizes in bytes as read from the OS (defaults if unreadable).
struct CacheSizes {
  /// Level-1 data, level-2 and level-3 cache, in bytes.
  /// @{
  int64_t l1d, l2, l3;
  /// @}
};
/// This machine's cache sizes (see CacheSizes).
CacheSizes cache_sizes();

/// This machine's float32 multiply-add peak on one core with the active instruction set, in GFLOP/s:
/// measured (not assumed) at first use by timing the FMA loop (kernels fma_loop) for about 20 ms on
/// the calling thread, best of several runs; cached per instruction set for the process. What the
/// profile and the training benchmark report efficiency against.
double peak_gflops();

}  // namespace tapegrad::runtime
