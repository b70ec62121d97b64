// The balanced split of n items into `parts` contiguous ranges: part p gets [begin, end), the sizes
// differ by at most one, the larger parts first. One definition for the kernels' thread ranges
// (kernels/simd/common.hpp) and the data-parallel shards of a batch (src/train/distributed.cpp).
//
// In an unnamed namespace, as the SIMD helpers are: kernels/simd/isa_*.cpp include it under their own
// -m flags, and internal linkage keeps the linker from merging one ISA's copy into another's path.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tapegrad::kernels {
namespace {

struct Range {
  int64_t begin, end;
};

inline Range balanced_split(int64_t n, int64_t part, int64_t parts) {
  const int64_t q = n / parts, r = n % parts;
  const int64_t b = part * q + std::min(part, r);
  return {b, b + q + (part < r ? 1 : 0)};
}

}  // namespace
}  // namespace tapegrad::kernels
