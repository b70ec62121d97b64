// The kernels' run-time settings (kernels/runtime.hpp). Their public face, tapegrad::runtime
// (include/tapegrad/runtime.hpp), is src/tensor/runtime.cpp: the kernels include nothing public.
//
// The instruction set: at first use we ask xsimd which ones the CPU has and honour TAPEGRAD_ARCH,
// which may only lower the choice; set_isa rebuilds the dispatch tables (kernels/dispatch.cpp).
// Threads: TAPEGRAD_THREADS or the OpenMP default until set_num_threads. Caches: read from sysfs.
#include "kernels/runtime.hpp"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <xsimd/xsimd.hpp>

#include "kernels/kernels.hpp"
#include "kernels/table.hpp"

namespace tapegrad::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::sse2:
      return "sse2";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "?";
}

std::vector<Isa> available_isas() {
  const auto arch = xsimd::available_architectures();
  std::vector<Isa> out{Isa::scalar};
  if (arch.sse2) out.push_back(Isa::sse2);
  if (arch.avx2 && arch.fma3_avx2) out.push_back(Isa::avx2);
  if (arch.avx512f && arch.avx512bw && arch.avx512dq && arch.avx512cd) out.push_back(Isa::avx512);
  return out;
}

bool parse_isa(const std::string& s, Isa* out) {
  for (Isa isa : {Isa::scalar, Isa::sse2, Isa::avx2, Isa::avx512})
    if (s == isa_name(isa)) return *out = isa, true;
  return false;
}

bool isa_supported(Isa isa) {
  for (Isa a : available_isas())
    if (a == isa) return true;
  return false;
}

Isa startup_isa() {
  if (const char* env = std::getenv("TAPEGRAD_ARCH"); env && *env) {
    Isa want;
    if (!parse_isa(env, &want))
      throw std::runtime_error(std::string("TAPEGRAD_ARCH: unknown instruction set '") + env +
                               "' (expected avx512, avx2, sse2 or scalar)");
    if (!isa_supported(want))
      throw std::runtime_error(std::string("TAPEGRAD_ARCH=") + env + ": this CPU does not support it");
    return want;
  }
  return available_isas().back();
}

Isa active_isa() {
  return active_table<float>().isa;
}

void set_isa(Isa isa) {
  if (!isa_supported(isa))
    throw std::runtime_error(std::string("set_isa: this CPU does not support ") + isa_name(isa));
  build_tables(isa);
}

namespace {
int initial_threads() {
  if (const char* env = std::getenv("TAPEGRAD_THREADS"); env && *env) {
    const int n = std::atoi(env);
    if (n < 1)
      throw std::runtime_error(std::string("TAPEGRAD_THREADS=") + env + ": expected a positive integer");
    omp_set_num_threads(n);
  }
  return omp_get_max_threads();
}
std::atomic<int>& thread_count() {
  static std::atomic<int> n{initial_threads()};
  return n;
}
}  // namespace

int num_threads() {
  return thread_count().load();
}

void set_num_threads(int n) {
  if (n < 1) throw std::runtime_error("set_num_threads: expected a positive count, got " + std::to_string(n));
  omp_set_num_threads(n);
  thread_count() = n;
}

namespace {
int64_t read_cache_size(int index) {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string s;
  if (!(f >> s) || s.empty()) return 0;
  int64_t mult = 1;
  if (s.back() == 'K')
    mult = 1024, s.pop_back();
  else if (s.back() == 'M')
    mult = 1024 * 1024, s.pop_back();
  try {
    return std::stoll(s) * mult;
  } catch (...) {
    return 0;
  }
}
}  // namespace

const CacheInfo& cache_info() {
  static const CacheInfo info = [] {
    CacheInfo c;
    // index0 = L1d, index1 = L1i, index2 = L2, index3 = L3 on Linux x86.
    if (int64_t v = read_cache_size(0)) c.l1d = v;
    if (int64_t v = read_cache_size(2)) c.l2 = v;
    if (int64_t v = read_cache_size(3)) c.l3 = v;
    return c;
  }();
  return info;
}

}  // namespace tapegrad::kernels
