// The caching allocator (see memory.hpp): size classes with intrusive free lists, 64-byte alignment.
//
// A cached block holds the pointer to the next cached block of its class in its own first bytes, and
// the list heads live in a fixed array indexed by size class, so returning a block (which happens in
// ~Storage, often while an exception unwinds) never allocates and cannot fail.
#include "tapegrad/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <mutex>

#include "tapegrad/checked.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::memory {
namespace {

constexpr int64_t kAlign = 64;
// Four classes per power of two up to 2^63.
constexpr int kClasses = 4 * 64;

// Rounds up to one of four classes per power of two (2^k, 1.25, 1.5, 1.75 x 2^k), and always to a
// multiple of 64 bytes (aligned_alloc requires the size to be a multiple of the alignment).
int64_t size_class(int64_t bytes) {
  if (bytes <= kAlign) return kAlign;
  const int64_t pow2 = int64_t(std::bit_floor(uint64_t(bytes)));
  const int64_t step = std::max<int64_t>(pow2 / 4, kAlign);
  return checked_add(bytes, step - 1, "allocation size") / step * step;
}

// The free-list slot of a class returned by size_class.
int class_index(int64_t cap) {
  const int64_t pow2 = int64_t(std::bit_floor(uint64_t(cap)));
  const int64_t step = std::max<int64_t>(pow2 / 4, kAlign);
  return 4 * std::countr_zero(uint64_t(pow2)) + int((cap - pow2) / step);
}

struct Cache {
  std::mutex mu;
  std::array<void*, kClasses> free_heads{};  // each cached block starts with the next one's address
  Stats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may die during static destruction
  return *c;
}

void*& next_of(void* block) {
  return *static_cast<void**>(block);
}

}  // namespace

int64_t machine_limit_bytes() {
  static const int64_t limit = [] {
    int64_t bytes = INT64_MAX;
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && pages <= INT64_MAX / page) bytes = int64_t(pages) * page;
    rlimit as{};
    if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && as.rlim_cur < rlim_t(bytes))
      bytes = int64_t(as.rlim_cur);
    return bytes;
  }();
  return limit;
}

void* allocate(int64_t bytes, int64_t* capacity) {
  if (bytes > machine_limit_bytes())
    throw OutOfMemory("out of memory: cannot allocate " + format_bytes(double(bytes)) +
                      " (the machine's limit is " + format_bytes(double(machine_limit_bytes())) + ")");
  const int64_t cap = size_class(bytes < 1 ? 1 : bytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    void*& head = c.free_heads[size_t(class_index(cap))];
    if (head) {
      void* p = head;
      head = next_of(p);
      c.stats.bytes_cached -= cap;
      c.stats.bytes_in_use += cap;
      c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
      ++c.stats.cache_hits;
      *capacity = cap;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, size_t(cap));
  if (!p) {
    // Cached blocks of other classes may be what stands between this request and the OS limit.
    empty_cache();
    p = std::aligned_alloc(kAlign, size_t(cap));
  }
  if (!p) throw OutOfMemory("out of memory: cannot allocate " + format_bytes(double(cap)));
  std::lock_guard lock(c.mu);
  c.stats.bytes_in_use += cap;
  c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
  ++c.stats.os_allocations;
  *capacity = cap;
  return p;
}

void release(void* ptr, int64_t capacity) noexcept {
  if (!ptr) return;
  Cache& c = cache();
  std::lock_guard lock(c.mu);  // std::mutex::lock throws only on a system error (EDEADLK / EINVAL)
  void*& head = c.free_heads[size_t(class_index(capacity))];
  next_of(ptr) = head;
  head = ptr;
  c.stats.bytes_in_use -= capacity;
  c.stats.bytes_cached += capacity;
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

void reset_peak() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  for (int k = 0; k < kClasses; ++k) {
    for (void* p = c.free_heads[size_t(k)]; p;) {
      void* next = next_of(p);
      std::free(p);
      p = next;
    }
    c.free_heads[size_t(k)] = nullptr;
  }
  c.stats.bytes_cached = 0;
}

}  // namespace tapegrad::memory
