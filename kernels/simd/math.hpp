// Vector exp for float32, our own so that its error bound and its edge behaviour are known and
// tested (tests/kernels/test_vector_kernels.cpp, "exp"). Other transcendental functions (log, tanh,
// erf) come from xsimd; they are not on any hot path that memory bandwidth does not already cap.
//
// Method: exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2], with ln2 split
// into a short high part (n * hi is exact for |n| < 2^15) and a low correction (Cody-Waite), and
// exp(r) by its degree-7 Taylor polynomial in Horner form. Truncation error is
// r^8/8! <= 0.3466^8 / 40320 = 5.3e-9 relative (0.09 ulp); with the rounding of the eight Horner
// steps and the scaling, the bound is 2 ulp (2.4e-7 relative) for results in the normal range.
// The test measures the worst case against std::exp over [-87, 88] (about 1 ulp).
#pragma once

#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // 355/512: 9 significant bits, so n * hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
// 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer held in the low mantissa bits.
inline constexpr float kRoundMagic = 12582912.0f;

// exp(r) for |r| <= ln2/2: 1 + r + r^2/2! + ... + r^7/7!.
template <class Arch>
Batch<Arch> exp_poly(const Batch<Arch>& r) {
  using B = Batch<Arch>;
  B p(1.0f / 5040.0f);
  p = xsimd::fma(p, r, B(1.0f / 720.0f));
  p = xsimd::fma(p, r, B(1.0f / 120.0f));
  p = xsimd::fma(p, r, B(1.0f / 24.0f));
  p = xsimd::fma(p, r, B(1.0f / 6.0f));
  p = xsimd::fma(p, r, B(0.5f));
  p = xsimd::fma(p, r, B(1.0f));
  return xsimd::fma(p, r, B(1.0f));
}

// exp for x <= 0, the softmax case (x - max(x)). Results below FLT_MIN (x < -87.33) are flushed to
// zero instead of being returned as denormals (absolute error < 1.2e-38, invisible next to the
// row's maximum term, which is 1); -inf (masked entries) gives exactly 0; NaN stays NaN. With n in
// [-126, 0], 2^n is built directly in the exponent field.
template <class Arch>
Batch<Arch> exp_nonpositive(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  const B t = xsimd::fma(x, B(kLog2e), B(kRoundMagic));
  const B n = t - B(kRoundMagic);
  B r = xsimd::fnma(n, B(kLn2Hi), x);
  r = xsimd::fnma(n, B(kLn2Lo), r);
  // bits(t) = bits(1.5 * 2^23) + n; shifting left by 23 drops the constant (it only has bits >= 22),
  // leaving n in the exponent field, and + bits(1.0f) adds the bias.
  const I e = (xsimd::bitwise_cast<I>(t) << 23) + I(0x3F800000);
  const B y = exp_poly<Arch>(r) * xsimd::bitwise_cast<B>(e);
  return xsimd::select(x < B(-87.33654f), B(0.0f), y);
}

// exp over the whole float range: overflow to +inf above 88.72, gradual underflow through the
// denormals to 0 below -103.97, as std::exp. 2^n is applied as 2^(n/2) * 2^(n - n/2) so that both
// factors stay normal for n in [-150, 128].
template <class Arch>
Batch<Arch> exp_full(const Batch<Arch>& x_in) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  // max/min return their second operand when either is NaN, so NaN passes through the clamp.
  const B x = xsimd::min(B(89.0f), xsimd::max(B(-104.0f), x_in));
  const B t = xsimd::fma(x, B(kLog2e), B(kRoundMagic));
  const B n = t - B(kRoundMagic);
  B r = xsimd::fnma(n, B(kLn2Hi), x);
  r = xsimd::fnma(n, B(kLn2Lo), r);
  const I ni = xsimd::bitwise_cast<I>(t) - xsimd::bitwise_cast<I>(B(kRoundMagic));
  const I n1 = ni >> 1;
  const I n2 = ni - n1;
  const B s1 = xsimd::bitwise_cast<B>((n1 + I(127)) << 23);
  const B s2 = xsimd::bitwise_cast<B>((n2 + I(127)) << 23);
  return exp_poly<Arch>(r) * s1 * s2;
}

// 1 / (1 + exp(-x)): exp(-x) = inf for x < -88.7 gives exactly 0, as the reference.
template <class Arch>
Batch<Arch> sigmoid(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  return B(1.0f) / (B(1.0f) + exp_full<Arch>(-x));
}

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
