// The caching allocator (see memory.hpp): size classes with free lists, 64-byte alignment.
#include "tapegrad/memory.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace tapegrad::memory {
namespace {

constexpr int64_t kAlign = 64;

// Rounds up to one of four classes per power of two (2^k, 1.25, 1.5, 1.75 x 2^k), and always to a
// multiple of 64 bytes (aligned_alloc requires the size to be a multiple of the alignment).
int64_t size_class(int64_t bytes) {
  if (bytes <= kAlign) return kAlign;
  const int64_t pow2 = int64_t(std::bit_floor(uint64_t(bytes)));
  const int64_t step = std::max<int64_t>(pow2 / 4, kAlign);
  return (bytes + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<int64_t, std::vector<void*>> free_lists;
  Stats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may die during static destruction
  return *c;
}

}  // namespace

void* allocate(int64_t bytes, int64_t* capacity) {
  const int64_t cap = size_class(bytes < 1 ? 1 : bytes);
  *capacity = cap;
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    auto it = c.free_lists.find(cap);
    if (it != c.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.bytes_cached -= cap;
      c.stats.bytes_in_use += cap;
      ++c.stats.cache_hits;
      return p;
    }
    c.stats.bytes_in_use += cap;
    ++c.stats.os_allocations;
  }
  void* p = std::aligned_alloc(kAlign, size_t(cap));
  if (!p) throw std::bad_alloc();
  return p;
}

void release(void* ptr, int64_t capacity) {
  if (!ptr) return;
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.free_lists[capacity].push_back(ptr);
  c.stats.bytes_in_use -= capacity;
  c.stats.bytes_cached += capacity;
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  for (auto& [cap, list] : c.free_lists) {
    for (void* p : list) std::free(p);
    c.stats.bytes_cached -= cap * int64_t(list.size());
    list.clear();
  }
}

}  // namespace tapegrad::memory
