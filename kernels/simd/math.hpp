// Vector exp for float32, our own so that its error bound and its edge behaviour are known and
// tested (tests/kernels/test_vector_kernels.cpp, "exp"). log, log1p and erf come from xsimd and
// serve only the unary ops log, softplus (log1p) and gelu_erf (gelu_tanh goes through
// exp_nonpositive, see elementwise.hpp; tanh is ours, see below).
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
// That is exp_full. The softmax family's exp_nonpositive uses a finer reduction through a table of
// 2^(j/8) and a cubic where the ISA has a vector permute (AVX2, AVX-512; see there).
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

// exp for x <= 0, the softmax family's case (x - max), and gelu_tanh's exp(-2|u|).
//
// Where a vector permute exists (AVX2, AVX-512) it uses a finer reduction so that the polynomial
// can be short: exp(x) = 2^n 2^(j/8) exp(r), k = 8n + j = round(8 x / ln2), r = x - k ln2/8 in
// [-ln2/16, ln2/16]. 2^(j/8) comes from an 8-entry table in one register (vpermps; its index is the
// low 3 bits of k, read straight from the rounding trick's bits) and exp(r) = 1 + q(r) with
//   q(r) = C_j + r + c2 r^2 + c3 r^3,
// a cubic fitted (Remez, for this file) to the relative error of 1 + q on the interval: 0.163 eps.
// C_j folds in the table entry's rounding, (2^(j/8) - T_j) / T_j, so the result T_j (1 + q)
// carries no table error. The result is fma(T, q, T): one rounding (0.5 eps); q's and r's own
// roundings are scaled by |q|, |r| <= 0.044 (0.05 eps). r = x - k L with L = ln2/8 rounded to
// float, one fused rounding; the rest, -k (ln2/8 - L) (below 3e-7 in size), is added to C_j off
// the critical path, and using r for r + d in the r^2 and r^3 terms costs |r d| < 1.1e-8. So the
// bound is 0.75 eps over the whole range (|x| does not enter, unlike the one-step ln2 reduction
// this replaces: (0.8 + |x|/48) eps); measured 0.70 eps (tests/kernels/test_vector_kernels.cpp,
// "exp for softmax"). Against the degree-6 polynomial it is four fewer fmas on the dependency
// chain (the cubic is evaluated as two halves) for two permutes beside it; measured on the softmax
// of 8192x256 (bench/bench_vector.cpp), about 10% faster on AVX2.
// Without a permute (SSE2), the degree-6 polynomial on [-ln2/2, ln2/2] of exp_full with its
// two-step reduction (fma is a rounded multiply and add there): 2 eps.
// Clamp = true handles any input: -inf (masked entries) gives exactly 0 and NaN stays NaN; results
// below FLT_MIN (x < -87.33) are flushed to 0 rather than returned as denormals (absolute error
// < 1.2e-38), which keeps n in [-126, 0] for the exponent-field construction. Clamp = false saves
// the compare and blend when the caller knows every x >= kExpNoClampMin.
inline constexpr float kExpNoClampMin = -87.0f;
inline constexpr float kExpFlushBelow = -87.33654f;  // ln(FLT_MIN)

// True where exp_nonpositive can look up a table held in one register by a lane index.
template <class Arch>
constexpr bool has_permute() {
  return std::is_base_of_v<xsimd::avx512f, Arch> || std::is_base_of_v<xsimd::avx2, Arch>;
}

// The 8-entry table lookup: lane i gets table[idx_i & 7]. AVX-512 indexes 16 lanes by 4 bits, so
// there the table is given twice.
template <class Arch>
TG_INLINE Batch<Arch> permute8(const Batch<Arch>& table, const IBatch<Arch>& idx) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>)
    return Batch<Arch>(_mm512_permutexvar_ps(idx, table));
  else
    return Batch<Arch>(_mm256_permutevar8x32_ps(table, idx));
}

// bits(T_j) - (j << 20), T_j = 2^(j/8) rounded to float: adding (k << 20) = (n << 23) + (j << 20)
// leaves bits(T_j) + (n << 23) = T_j 2^n, for k = 8n + j. Twice, for AVX-512's 16 lanes.
alignas(64) inline constexpr uint32_t kExp2Eighths[16] = {
    0x3f800000, 0x3f7b95c2, 0x3f7837f0, 0x3f75fed7, 0x3f7504f3, 0x3f75672a, 0x3f7744fd, 0x3f7ac0c7,
    0x3f800000, 0x3f7b95c2, 0x3f7837f0, 0x3f75fed7, 0x3f7504f3, 0x3f75672a, 0x3f7744fd, 0x3f7ac0c7};
// C_j = (2^(j/8) - T_j) / T_j plus the cubic's constant term (-1.68e-8), rounded to float.
alignas(64) inline constexpr float kExp2EighthsFix[16] = {
    -0x1.20ff9cp-26f, -0x1.ef05acp-26f, 0x1.03a068p-26f,  -0x1.9ab51ep-25f, 0x1.417046p-32f, -0x1.8e2e52p-27f,
    -0x1.0ef08ep-25f, -0x1.8a47fap-26f, -0x1.20ff9cp-26f, -0x1.ef05acp-26f, 0x1.03a068p-26f, -0x1.9ab51ep-25f,
    0x1.417046p-32f,  -0x1.8e2e52p-27f, -0x1.0ef08ep-25f, -0x1.8a47fap-26f};

// The SSE2 version (no permute): the degree-6 polynomial on [-ln2/2, ln2/2].
template <class Arch, bool Clamp>
TG_INLINE Batch<Arch> exp_nonpositive_poly6(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  const B t = xsimd::fma(x, B(kLog2e), B(kRoundMagic));
  const B n = t - B(kRoundMagic);
  // bits(t) = bits(1.5 * 2^23) + n; shifting left by 23 drops the constant (it only has bits
  // >= 22), leaving n in the exponent field, and + bits(1.0f) adds the bias.
  const I e = (xsimd::bitwise_cast<I>(t) << 23) + I(0x3F800000);
  // n * hi is exact, so only the small lo product rounds
  B r = xsimd::fnma(n, B(kLn2Hi), x);
  r = xsimd::fnma(n, B(kLn2Lo), r);
  const B y = exp_poly<Arch>(r) * xsimd::bitwise_cast<B>(e);
  if constexpr (Clamp) return xsimd::select(x < B(kExpFlushBelow), B(0.0f), y);
  return y;
}

// exp_nonpositive of N batches in place, step by step across the N (each step's N operations are
// independent, so the scheduler always has ready work from the other chain). A single exp is N = 1.
#define TG_EACH(...)                                    \
  _Pragma("GCC unroll 8") for (int i = 0; i < N; ++i) { \
    __VA_ARGS__;                                        \
  }
template <class Arch, bool Clamp, int N>
TG_INLINE void exp_nonpositive_n(Batch<Arch> (&v)[N]) {
  using B = Batch<Arch>;
  using I = IBatch<Arch>;
  if constexpr (has_permute<Arch>()) {
    // 8 / ln2, and ln2 / 8 = L + L_lo with L rounded to float.
    constexpr float k8Log2e = 0x1.715476p+3f;
    constexpr float kLn2E8 = 0x1.62e430p-4f;
    constexpr float kLn2E8Lo = -0x1.05c610p-32f;
    const B table = B::load_aligned(reinterpret_cast<const float*>(kExp2Eighths));  // bit patterns
    const B fix = B::load_aligned(kExp2EighthsFix);
    B t[N], kf[N], scale[N], r[N], d[N], q[N];
    TG_EACH(t[i] = xsimd::fma(v[i], B(k8Log2e), B(kRoundMagic)))  // bits(t) = bits(1.5 * 2^23) + k
    TG_EACH(kf[i] = t[i] - B(kRoundMagic))
    // (k << 20): the rounding constant's bits all sit at 22 and above, so the shift drops them.
    TG_EACH(scale[i] = xsimd::bitwise_cast<B>(
                xsimd::bitwise_cast<I>(permute8<Arch>(table, xsimd::bitwise_cast<I>(t[i]))) +
                (xsimd::bitwise_cast<I>(t[i]) << 20)))
    // r = x - k L, fused (one rounding); the rest of the reduction, -k L_lo (|.| < 3e-7), joins
    // the table's correction C_j off the critical path. Using r for r + d in the r^2 and r^3 terms
    // costs |r d| < 1.1e-8 relative.
    TG_EACH(r[i] = xsimd::fnma(kf[i], B(kLn2E8), v[i]))
    TG_EACH(d[i] = xsimd::fnma(kf[i], B(kLn2E8Lo), permute8<Arch>(fix, xsimd::bitwise_cast<I>(t[i]))))
    // q = (r + d) + r^2 (c2 + c3 r), in two independent halves (Estrin): a shorter chain.
    TG_EACH(q[i] =
                xsimd::fma(xsimd::fma(B(0x1.5560b6p-3f), r[i], B(0x1.000a2ap-1f)), r[i] * r[i], r[i] + d[i]))
    if constexpr (Clamp) {
      TG_EACH(v[i] = xsimd::select(v[i] < B(kExpFlushBelow), B(0.0f), xsimd::fma(scale[i], q[i], scale[i])))
    } else {
      TG_EACH(v[i] = xsimd::fma(scale[i], q[i], scale[i]))
    }
  } else {
    TG_EACH(v[i] = exp_nonpositive_poly6<Arch, Clamp>(v[i]))
  }
}
#undef TG_EACH

template <class Arch, bool Clamp = true>
TG_INLINE Batch<Arch> exp_nonpositive(const Batch<Arch>& x) {
  Batch<Arch> v[1] = {x};
  exp_nonpositive_n<Arch, Clamp, 1>(v);
  return v[0];
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

// tanh(x) = sign(x) t(|x|): for a = |x| >= 0.3, t = (1 - e) / (1 + e) with e = exp(-2a) from
// exp_nonpositive (1 - e is exact for e in [0.5, 1], so its relative error is e / (1 - e) <= 1.22
// times e's); below 0.3 the Taylor series through a^11 (the next term is under 1e-8 relative there).
// Measured against double on a dense grid of [-10, 10] (tests/kernels/test_vector_kernels.cpp):
// within 2 eps. tanh(+-inf) = +-1, NaN stays NaN. It replaces xsimd's tanh (a generic exp, a
// polynomial branch and a division) in the unary op, the GRU cell and additive attention.
template <class Arch>
TG_INLINE Batch<Arch> tanh(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  const B a = xsimd::abs(x), s = a * a;
  B p = xsimd::fma(B(-1382.0f / 155925.0f), s, B(62.0f / 2835.0f));
  p = xsimd::fma(p, s, B(-17.0f / 315.0f));
  p = xsimd::fma(p, s, B(2.0f / 15.0f));
  p = xsimd::fma(p, s, B(-1.0f / 3.0f));
  const B small = xsimd::fma(a * s, p, a);
  const B e = exp_nonpositive<Arch>(B(-2.0f) * a);
  const B t = xsimd::select(a < B(0.3f), small, (B(1.0f) - e) / (B(1.0f) + e));
  return xsimd::bitwise_or(t, xsimd::bitwise_and(x, B(-0.0f)));  // the sign of x
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
