// The counter-based generator behind every dropout mask, as constants shared by its scalar form
// (uniform_at, kernels/dispatch.cpp) and its vector form (kernels/simd/random.hpp), which must agree
// bit for bit: the masks then do not depend on the instruction set, the thread count or call order.
//
//   uniform_at(seed, i) = top53(splitmix64(seed * kSeedMul + i * kGolden)) * 2^-53
//   splitmix64(z):  z += kGolden; z = (z ^ z >> 30) * kMix1; z = (z ^ z >> 27) * kMix2; z ^ z >> 31
//
// top53 is the hash's upper 53 bits, an integer below 2^53 that converts to double exactly, so
// uniform_at(seed, i) >= p  <=>  top53 >= keep_threshold(p) = ceil(p * 2^53): the vector form
// compares integers.
#pragma once

#include <cmath>
#include <cstdint>

namespace tapegrad::kernels::counter_rng {

inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // splitmix64's Weyl increment, 2^64 / phi
inline constexpr uint64_t kSeedMul = 0xD1B54A32D192ED03ull;  // spreads consecutive seeds apart
inline constexpr uint64_t kMix1 = 0xBF58476D1CE4E5B9ull;
inline constexpr uint64_t kMix2 = 0x94D049BB133111EBull;

// The Weyl value of counter i before the mixing rounds: seed * kSeedMul + (i + 1) * kGolden.
constexpr uint64_t weyl(uint64_t seed, uint64_t counter) {
  return seed * kSeedMul + (counter + 1) * kGolden;
}

// The smallest top53 that is kept at drop probability p in [0, 1): ceil(p * 2^53), exact.
inline int64_t keep_threshold(double p) {
  return int64_t(std::ceil(std::ldexp(p, 53)));
}

}  // namespace tapegrad::kernels::counter_rng
