// Benchmark operands stored as the library stores tensors: 64-byte aligned, as its caching allocator
// (src/tensor/memory.cpp) and PyTorch's CPU allocator give them. A plain large std::vector starts 16
// bytes into a page, which splits every 64-byte vector load and store across two cache lines: a
// cost real tensors never pay, which would be measured for every implementation alike but charged
// most to the ones that read operands in place instead of copying them first.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tapegrad::bench {

template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const Aligned64&) const { return true; }
};

template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;

}  // namespace tapegrad::bench
