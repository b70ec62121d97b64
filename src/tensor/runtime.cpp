// The public run-time settings, tapegrad::runtime (include/tapegrad/runtime.hpp): the kernels'
// settings (kernels/runtime.hpp) in public terms, instruction sets by name and tapegrad::Error for
// bad input. It sits in the tensor layer, the lowest with public headers and the error types, so
// the kernels below need nothing from include/; peak_gflops times the kernels' FMA loop.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/runtime.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/runtime.hpp"

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
  if (!kernels::isa_supported(isa)) throw Error("set_isa: this CPU does not support " + name);
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
