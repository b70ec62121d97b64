// Vector exp for float32, our own so that its error bound and its edge behaviour are known and
// tested (tests/kernels/test_vector_kernels.cpp, "exp"). log, log1p, tanh and erf come from xsimd and
// serve only the unary ops log, tanh, softplus (log1p) and gelu_erf (gelu_tanh goes through
// exp_nonpositive, see elementwise.hpp).
//
// Method: exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2], with ln2 split
// into a short high part (n * hi is exact for |n| < 2^15) and a low correction (Cody-Waite), and
// exp(r) by a degree-6 polynomial interpolating exp at the 7 Chebyshev nodes of [-ln2/2, ln2/2]
// (near-minimax; coefficients computed for this file and rounded to float). Its relative error,
// float coefficients included, is 2.0e-8 = 0.17 eps over the interval (a degree-7 Taylor series
// would need one more fma for 0.06 eps; degree-6 Taylor gives 1.35 eps). With the rounding of the
// six Horner steps the bound is 2 ulp (2 eps relative) for results in the normal range; the test
// measures the worst case against std::exp over [-87.3, 88.7]: 0.74 eps (AVX2, AVX-512), 0.94 eps
// (SSE2, whose fma is a rounded multiply and add).
//
// 2^n is applied with vscalefps on AVX-512 (one instruction, exact, with IEEE underflow to
// denormals and 0 and overflow to inf), elsewhere by building the exponent field in integer lanes.
#pragma once

#include <type_traits>

#include "kernels/simd/common.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // 355/512: 9 significant bits, so n * hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
// 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer held in the low mantissa bits.
inline constexpr float kRoundMagic = 12582912.0f;

// True for the AVX-512 family, where vscalefps applies 2^n in one instruction.
template <class Arch>
constexpr bool uses_scalef() {
  return std::is_base_of_v<xsimd::avx512f, Arch>;
}

// True where xsimd::fma is a real fused multiply-add (AVX2+FMA, AVX-512). SSE2 emulates it with a
// rounded product, so the one-step reduction below would lose r's accuracy there.
template <class Arch>
constexpr bool has_fma() {
  return std::is_base_of_v<xsimd::avx512f, Arch> || std::is_base_of_v<xsimd::fma3<xsimd::avx2>, Arch>;
}

// exp(r) for |r| <= ln2/2 (see the file comment for the error).
template <class Arch>
TG_INLINE Batch<Arch> exp_poly(const Batch<Arch>& r) {
  using B = Batch<Arch>;
  B p(0x1.6d7532p-10f);
  p = xsimd::fma(p, r, B(0x1.126fa6p-7f));
  p = xsimd::fma(p, r, B(0x1.5554acp-5f));
  p = xsimd::fma(p, r, B(0x1.555404p-3f));
  p = xsimd::fma(p, r, B(0.5f));
  p = xsimd::fma(p, r, B(1.0f));
  return xsimd::fma(p, r, B(1.0f));
}

// p * 2^n for integral n (a float batch), n in [-150, 128] (AVX-512 only).
template <class Arch>
TG_INLINE Batch<Arch> scalef(const Batch<Arch>& p, const Batch<Arch>& n) {
  return Batch<Arch>(_mm512_scalef_ps(p, n));
}

// exp for x <= 0, the softmax family's case (x - max). Cheaper than exp_full by one fma: with a
// fused multiply-add the reduction uses ln2 rounded to float in a single step, which adds
// |n| * 1.9e-9 to r, so the relative error is (0.8 + |x| / 48) eps (measured 0.79 eps on [-10, 0],
// 2.54 eps worst, near x = -87; SSE2 keeps the two-step reduction: 0.89 eps). In a
// softmax that is harmless: an error of |x| 2.7e-9 relative on a term e^x <= 1 is below 1e-9
// absolute, far under the eps of the probabilities near 1.
// Clamp = true handles any input: -inf (masked entries) gives exactly 0 and NaN stays NaN; without
// scalef, results below FLT_MIN (x < -87.33) are flushed to 0 rather than returned as denormals
// (absolute error < 1.2e-38), which keeps n in [-126, 0] for the exponent-field construction.
// Clamp = false saves the clamp (another op of ~12) when the caller knows every x >= kExpNoClampMin.
inline constexpr float kExpNoClampMin = -87.0f;

template <class Arch, bool Clamp = true>
TG_INLINE Batch<Arch> exp_nonpositive(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  constexpr float kLn2F = 0.693147182f;  // ln2 rounded to float (error 1.9e-9)
  if constexpr (uses_scalef<Arch>()) {
    // Clamping at -104 (where exp rounds to 0) keeps n finite for -inf; scalef then rounds the tiny
    // results to denormals or 0 itself. (max returns its second operand for NaN: NaN stays NaN.)
    const B xc = Clamp ? xsimd::max(B(-104.0f), x) : x;
    const B t = xsimd::fma(xc, B(kLog2e), B(kRoundMagic));
    const B n = t - B(kRoundMagic);
    return scalef<Arch>(exp_poly<Arch>(xsimd::fnma(n, B(kLn2F), xc)), n);
  } else {
    const B t = xsimd::fma(x, B(kLog2e), B(kRoundMagic));
    const B n = t - B(kRoundMagic);
    // bits(t) = bits(1.5 * 2^23) + n; shifting left by 23 drops the constant (it only has bits
    // >= 22), leaving n in the exponent field, and + bits(1.0f) adds the bias.
    const I e = (xsimd::bitwise_cast<I>(t) << 23) + I(0x3F800000);
    B r;
    if constexpr (has_fma<Arch>()) {
      r = xsimd::fnma(n, B(kLn2F), x);
    } else {  // n * hi is exact, so only the small lo product rounds
      r = xsimd::fnma(n, B(kLn2Hi), x);
      r = xsimd::fnma(n, B(kLn2Lo), r);
    }
    const B y = exp_poly<Arch>(r) * xsimd::bitwise_cast<B>(e);
    if constexpr (Clamp) return xsimd::select(x < B(-87.33654f), B(0.0f), y);
    return y;
  }
}

// exp over the whole float range: overflow to +inf above 88.72, gradual underflow through the
// denormals to 0 below -103.97, as std::exp. Without scalef, 2^n is applied as 2^(n/2) * 2^(n - n/2)
// so that both factors stay normal for n in [-150, 128].
template <class Arch>
TG_INLINE Batch<Arch> exp_full(const Batch<Arch>& x_in) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  // max/min return their second operand when either is NaN, so NaN passes through the clamp.
  const B x = xsimd::min(B(89.0f), xsimd::max(B(-104.0f), x_in));
  const B t = xsimd::fma(x, B(kLog2e), B(kRoundMagic));
  const B n = t - B(kRoundMagic);
  B r = xsimd::fnma(n, B(kLn2Hi), x);
  r = xsimd::fnma(n, B(kLn2Lo), r);
  if constexpr (uses_scalef<Arch>()) return scalef<Arch>(exp_poly<Arch>(r), n);
  const I ni = xsimd::bitwise_cast<I>(t) - xsimd::bitwise_cast<I>(B(kRoundMagic));
  const I n1 = ni >> 1;
  const I n2 = ni - n1;
  const B s1 = xsimd::bitwise_cast<B>((n1 + I(127)) << 23);
  const B s2 = xsimd::bitwise_cast<B>((n2 + I(127)) << 23);
  return exp_poly<Arch>(r) * s1 * s2;
}

// 1 / (1 + exp(-x)): exp(-x) = inf for x < -88.7 gives exactly 0, as the reference.
template <class Arch>
TG_INLINE Batch<Arch> sigmoid(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  return B(1.0f) / (B(1.0f) + exp_full<Arch>(-x));
}

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
