// The kernels' run-time settings (kernels/runtime.hpp) and their public face, tapegrad::runtime
// (include/tapegrad/runtime.hpp).
//
// The instruction set: at first use we ask xsimd which ones the CPU has and honour TAPEGRAD_ARCH,
// which may only lower the choice; set_isa rebuilds the dispatch tables (kernels/dispatch.cpp).
// Threads: TAPEGRAD_THREADS or the OpenMP default until set_num_threads. Caches: read from sysfs.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

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
#include "tapegrad/error.hpp"
#include "tapegrad/runtime.hpp"

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

namespace {

// Sets *out to the instruction set called `s`; false if there is none.
bool parse_isa(const std::string& s, Isa* out) {
  for (Isa isa : {Isa::scalar, Isa::sse2, Isa::avx2, Isa::avx512})
    if (s == isa_name(isa)) return *out = isa, true;
  return false;
}

bool supported(Isa isa) {
  for (Isa a : available_isas())
    if (a == isa) return true;
  return false;
}

}  // namespace

Isa startup_isa() {
  if (const char* env = std::getenv("TAPEGRAD_ARCH"); env && *env) {
    Isa want;
    if (!parse_isa(env, &want))
      throw std::runtime_error(std::string("TAPEGRAD_ARCH: unknown instruction set '") + env +
                               "' (expected avx512, avx2, sse2 or scalar)");
    if (!supported(want))
      throw std::runtime_error(std::string("TAPEGRAD_ARCH=") + env + ": this CPU does not support it");
    return want;
  }
  return available_isas().back();
}

Isa active_isa() {
  return active_table<float>().isa;
}

void set_isa(Isa isa) {
  if (!supported(isa))
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

namespace tapegrad::runtime {

int num_threads() {
  return kernels::num_threads();
}
void set_num_threads(int n) {
  if (n < 1) throw Error("set_num_threads: expected a positive thread count, got " + std::to_string(n));
  kernels::set_num_threads(n);
}

std::string active_isa() {
  return kernels::isa_name(kernels::active_isa());
}

std::vector<std::string> available_isas() {
  std::vector<std::string> names;
  for (kernels::Isa isa : kernels::available_isas()) names.push_back(kernels::isa_name(isa));
  return names;
}

void set_isa(const std::string& name) {
  kernels::Isa isa;
  if (!kernels::parse_isa(name, &isa))
    throw Error("set_isa: unknown instruction set '" + name + "' (expected avx512, avx2, sse2 or scalar)");
  if (!kernels::supported(isa)) throw Error("set_isa: this CPU does not support " + name);
  kernels::set_isa(isa);
}

CacheSizes cache_sizes() {
  const kernels::CacheInfo& c = kernels::cache_info();
  return {c.l1d, c.l2, c.l3};
}

double peak_gflops() {
  static std::mutex guard;
  static std::map<std::string, double> measured;  // per instruction set
  const std::lock_guard<std::mutex> lock(guard);
  const std::string isa = active_isa();
  if (auto it = measured.find(isa); it != measured.end()) return it->second;
  float sink = 0;
  double best = 0;
  int64_t iterations = 1 << 16;
  for (int run = 0; run < 9; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    const double flops = kernels::fma_loop<float>(iterations, &sink);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < 4e-3) {  // too short to time well: grow the loop and do not count this run
      iterations *= 4;
      --run;
      continue;
    }
    best = std::max(best, flops / s * 1e-9);
  }
  measured[isa] = best;
  return best;
}

}  // namespace tapegrad::runtime
