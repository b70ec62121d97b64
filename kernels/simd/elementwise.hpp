// SIMD elementwise kernels (float32): unary ops and their backwards, affine, and broadcasting binary
// ops and their backwards. Contracts and the oracle: kernels/kernels.hpp, kernels/ref/ref.hpp.
//
// Flat arrays are cut into fixed blocks handed to threads; the broadcasting ops coalesce their index
// space first (kernels/simd/strided.hpp) and vectorise the last dimension by its stride kind:
// contiguous, broadcast (stride 0, the scalar and row-broadcast fast paths) or general (gathered
// into a batch). pow stays scalar (std::pow) everywhere: it is rare, and a vector exp(b log a)
// loses accuracy on large results and differs from std::pow on special values (0^0, a < 0).
#pragma once

#include <cmath>

#include "kernels/simd/common.hpp"
#include "kernels/simd/math.hpp"
#include "kernels/simd/strided.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x s, s = sigmoid(2u), u = sqrt(2/pi) (x + c x^3), built
// from the one exp that can neither overflow nor need the full-range reduction: e = exp(-2|u|) in
// [0, 1] (exp_nonpositive). For u >= 0, s = 1 / (1 + e) and 1 - s = e / (1 + e); for u < 0 the two
// swap; either way s (1 - s) = e / (1 + e)^2, free of the cancellation in 1 - s near s = 1.
// Error, with z = |2u|: forward within (4 + 2z) eps |y|, backward within (8 + 4z) eps of the sum of
// its terms' sizes, plus 2 |x| FLT_MIN where e is flushed below FLT_MIN. The z term is the
// rounding of the computed 2u (a few eps relative), which moves exp(-z) z times as much; it only
// shows for x < 0, where y ~ x e^-z is tiny. Tested against double over [-14, 14]
// (test_vector_kernels.cpp, "gelu_tanh against double"): at most 0.67 of the bound, AVX2 and SSE2.
template <class Arch>
struct GeluSigmoid {
  Batch<Arch> e;                            // exp(-2|u|)
  xsimd::batch_bool<float, Arch> negative;  // u < 0 (x < 0); false for NaN
};

// 2u = x (a + b x^2), a = 2 sqrt(2/pi), b = a c; its derivative a + 3b x^2.
inline constexpr float kGeluA = float(2 * kSqrt2OverPi);
inline constexpr float kGeluB = float(2 * kSqrt2OverPi * kGeluCubic);
inline constexpr float kGelu3B = float(6 * kSqrt2OverPi * kGeluCubic);

template <class Arch>
TG_INLINE GeluSigmoid<Arch> gelu_sigmoid(const Batch<Arch>& x, const Batch<Arch>& x2) {
  using B = Batch<Arch>;
  const B two_u = x * xsimd::fma(x2, B(kGeluB), B(kGeluA));
  // -|2u| by setting the sign bit; exp_nonpositive's clamp turns -inf (x = +-inf) into exactly 0.
  return {exp_nonpositive<Arch>(two_u | B(-0.0f)), two_u < B(0.0f)};
}

// x s: x / (1 + e) for u >= 0, x e / (1 + e) for u < 0.
template <class Arch>
TG_INLINE Batch<Arch> gelu_tanh_forward(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  const GeluSigmoid<Arch> g = gelu_sigmoid<Arch>(x, x * x);
  return xsimd::select(g.negative, x * g.e, x) / (B(1.0f) + g.e);
}

// d/dx x s = s + x s (1 - s) d(2u)/dx, d(2u)/dx = a + 3 b x^2 (the reference's
// 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3c x^2) with t = tanh(u), 0.5 (1 + t) = s).
template <class Arch>
TG_INLINE Batch<Arch> gelu_tanh_derivative(const Batch<Arch>& x) {
  using B = Batch<Arch>;
  const B x2 = x * x;
  const GeluSigmoid<Arch> g = gelu_sigmoid<Arch>(x, x2);
  const B r = B(1.0f) / (B(1.0f) + g.e);
  const B s = xsimd::select(g.negative, g.e * r, r);
  const B s_1ms = g.e * r * r;  // s (1 - s)
  return xsimd::fma(x * s_1ms, xsimd::fma(x2, B(kGelu3B), B(kGeluA)), s);
}

// Elements per block when a flat array is shared between threads (a multiple of every batch size).
inline constexpr int64_t kFlatBlock = 4096;

// body(i0, i1) over [0, n) in blocks of kFlatBlock, blocks split across the team.
template <class F>
void parallel_flat(int64_t n, int64_t cost_per_element, F&& body) {
  if (n <= 0) return;
  const int64_t blocks = (n + kFlatBlock - 1) / kFlatBlock;
  const int nt = team_for(n * cost_per_element, blocks);
  parallel_ranges(blocks, nt,
                  [&](int64_t b0, int64_t b1) { body(b0 * kFlatBlock, std::min(n, b1 * kFlatBlock)); });
}

// Applies f (batch -> batch) over [i0, i1): vector body, padded-batch tail (fill 1 keeps log/sqrt
// of the padding finite). With Stream the body's stores bypass the caches (y + i0 batch-aligned;
// see stream_flat_output), which saves the read-for-ownership of every output line.
template <class Arch, bool Stream = false, class F>
TG_FLATTEN void map1(int64_t i0, int64_t i1, const float* x, float* y, F&& f) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  int64_t i = i0;
  for (; i + W <= i1; i += W) {
    const B v = f(B::load_unaligned(x + i));
    if constexpr (Stream)
      store_stream<Arch>(y + i, v);
    else
      v.store_unaligned(y + i);
  }
  if (i < i1) store_tail<Arch>(y + i, i1 - i, f(load_tail<Arch>(x + i, i1 - i, 1.0f)));
  if constexpr (Stream) _mm_sfence();  // streamed lines visible before the team's barrier
}

// y = f(x), one branch per op rather than per element.
template <class Arch>
void unary_f32(Unary op, int64_t n, const float* x, float* y) {
  using B = Batch<Arch>;
  const int64_t cost = (op == Unary::neg || op == Unary::abs || op == Unary::relu) ? 1 : 8;
  const bool stream = stream_flat_output<Arch>(n, y);
  parallel_flat(n, cost, [&](int64_t i0, int64_t i1) {
    auto map = [&](auto f) {
      if (stream)
        map1<Arch, true>(i0, i1, x, y, f);
      else
        map1<Arch, false>(i0, i1, x, y, f);
    };
    switch (op) {
      case Unary::neg:
        map([](B v) { return -v; });
        break;
      case Unary::exp:
        map([](B v) { return exp_full<Arch>(v); });
        break;
      case Unary::log:
        map([](B v) { return xsimd::log(v); });
        break;
      case Unary::sqrt:
        map([](B v) { return xsimd::sqrt(v); });
        break;
      case Unary::abs:
        map([](B v) { return xsimd::abs(v); });
        break;
      case Unary::tanh:
        map([](B v) { return tanh<Arch>(v); });
        break;
      case Unary::sigmoid:
        map([](B v) { return sigmoid<Arch>(v); });
        break;
      case Unary::relu:
        map([](B v) { return xsimd::select(v > B(0.0f), v, B(0.0f)); });
        break;
      case Unary::gelu_tanh:
        // x sigmoid(2u) with one exp of a non-positive argument and a division instead of xsimd's
        // tanh, and no cancellation in 1 + tanh(u) for negative x (see gelu_sigmoid).
        map([](B v) { return gelu_tanh_forward<Arch>(v); });
        break;
      case Unary::gelu_erf:
        map([](B v) { return B(0.5f) * v * (B(1.0f) + xsimd::erf(v * B(float(kInvSqrt2)))); });
        break;
      case Unary::softplus:
        // max(x, 0) + log1p(e^-|x|), as the reference: e^-|x| <= 1 never overflows.
        map([](B v) { return xsimd::max(v, B(0.0f)) + xsimd::log1p(exp_full<Arch>(-xsimd::abs(v))); });
        break;
    }
  });
}

// dx = (Accumulate ? dx : 0) + dy * g(x, y) over [i0, i1), g the local derivative. Without
// Accumulate dx is only written: a fresh gradient is then one pass over memory instead of a zero fill
// and a read-modify-write (the small Transformer's four ReLU backward passes at [2048, 512]: 2.42-2.52
// -> 1.84-1.88 ms a step at 1 thread).
template <class Arch, bool Accumulate, class G>
TG_FLATTEN void map_backward(int64_t i0, int64_t i1, const float* x, const float* y, const float* dy,
                             float* dx, G&& g) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  int64_t i = i0;
  for (; i + W <= i1; i += W) {
    const B d = g(B::load_unaligned(x + i), B::load_unaligned(y + i));
    const B g0 = B::load_unaligned(dy + i);
    (Accumulate ? xsimd::fma(g0, d, B::load_unaligned(dx + i)) : g0 * d).store_unaligned(dx + i);
  }
  if (i < i1) {
    const int64_t n = i1 - i;
    const B d = g(load_tail<Arch>(x + i, n, 1.0f), load_tail<Arch>(y + i, n, 1.0f));
    const B g0 = load_tail<Arch>(dy + i, n, 0.0f);
    store_tail<Arch>(dx + i, n, Accumulate ? xsimd::fma(g0, d, load_tail<Arch>(dx + i, n, 0.0f)) : g0 * d);
  }
}

// dx = (accumulate ? dx : 0) + dy * f'(x), with f' written from y = f(x) where that is cheaper (see
// ref::unary_derivative).
template <class Arch>
void unary_backward_f32(Unary op, int64_t n, const float* x, const float* y, const float* dy, float* dx,
                        bool accumulate) {
  using B = Batch<Arch>;
  parallel_flat(n, 8, [&](int64_t i0, int64_t i1) {
    auto run = [&](auto g) {
      if (accumulate)
        map_backward<Arch, true>(i0, i1, x, y, dy, dx, g);
      else
        map_backward<Arch, false>(i0, i1, x, y, dy, dx, g);
    };
    switch (op) {
      case Unary::neg:
        run([](B, B) { return B(-1.0f); });
        break;
      case Unary::exp:
        run([](B, B v) { return v; });
        break;  // d exp = exp
      case Unary::log:
        run([](B u, B) { return B(1.0f) / u; });
        break;  // d log = 1/x
      case Unary::sqrt:
        run([](B, B v) { return B(0.5f) / v; });
        break;  // 1/(2 sqrt x)
      case Unary::abs:
        run([](B u, B) {
          return xsimd::select(u > B(0.0f), B(1.0f), xsimd::select(u < B(0.0f), B(-1.0f), B(0.0f)));
        });
        break;
      case Unary::tanh:
        run([](B, B v) { return xsimd::fnma(v, v, B(1.0f)); });
        break;  // 1 - tanh^2
      case Unary::sigmoid:
        run([](B, B v) { return v * (B(1.0f) - v); });
        break;  // s (1 - s)
      case Unary::relu:
        run([](B u, B) { return xsimd::select(u > B(0.0f), B(1.0f), B(0.0f)); });
        break;
      case Unary::gelu_tanh:
        run([](B u, B) { return gelu_tanh_derivative<Arch>(u); });
        break;  // see gelu_tanh_derivative
      case Unary::gelu_erf:
        // d/dx x Phi(x) = Phi(x) + x phi(x), with Phi(x) = y / x from the forward's output (1/2 at
        // x = 0): one exp and a division instead of an erf and an exp (xsimd's erf cost 2.4 of the
        // GPT step's 3.3 ms of GELU, forward and backward, at one thread)
        run([](B u, B v) {
          const B phi = B(float(kInvSqrt2Pi)) * exp_full<Arch>(B(-0.5f) * u * u);
          return xsimd::select(u == B(0.0f), B(0.5f), v / u) + u * phi;
        });
        break;
      case Unary::softplus:
        run([](B u, B) { return sigmoid<Arch>(u); });
        break;  // d softplus = sigmoid(x)
    }
  });
}

// y = (accumulate ? y : 0) + x * scale + shift over [i0, i1). Sizes and pointers by value: read
// through a lambda's closure they would be reloaded after every (may-alias) vector store.
template <class Arch, bool Accumulate>
void affine_block(int64_t i0, int64_t i1, const float* x, float scale, float shift, float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B s(scale), t(shift);
  int64_t i = i0;
  for (; i + W <= i1; i += W) {
    const B v = B::load_unaligned(x + i) * s;
    (Accumulate ? B::load_unaligned(y + i) + v + t : v + t).store_unaligned(y + i);
  }
  for (; i < i1; ++i) y[i] = (Accumulate ? y[i] : 0.0f) + x[i] * scale + shift;
}

template <class Arch>
void affine_f32(int64_t n, const float* x, float scale, float shift, float* y, bool accumulate) {
  parallel_flat(n, 1, [&](int64_t i0, int64_t i1) {
    if (accumulate)
      affine_block<Arch, true>(i0, i1, x, scale, shift, y);
    else
      affine_block<Arch, false>(i0, i1, x, scale, shift, y);
  });
}

// ---------------------------------------------------------------------------------------------
// Broadcasting binary ops.

// Stride kinds of an operand along the run: 0 broadcast, 1 contiguous, 2 anything else.
inline int stride_kind(int64_t s) {
  return s == 0 ? 0 : (s == 1 ? 1 : 2);
}

template <class Arch, int K>
TG_INLINE Batch<Arch> load_kind(const float* p, int64_t s, int64_t j) {
  using B = Batch<Arch>;
  if constexpr (K == 0) {
    return B(p[0]);
  } else if constexpr (K == 1) {
    return B::load_unaligned(p + j);
  } else {
    alignas(64) float buf[B::size];
    for (std::size_t l = 0; l < B::size; ++l) buf[l] = p[(j + int64_t(l)) * s];
    return B::load_aligned(buf);
  }
}

// y[j] = f(a[j*sa], b[j*sb], d[j]) for j in [j0, j1); d (the incoming gradient) is contiguous and
// read only when HasD. f is generic: called with batches in the body and with floats in the tail;
// with Vector = false only with floats (pow).
template <class Arch, int KA, int KB, bool HasD, bool Vector, class F>
void binary_run(int64_t j0, int64_t j1, const float* a, int64_t sa, const float* b, int64_t sb,
                const float* d, float* y, F&& f) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  int64_t j = j0;
  if constexpr (Vector) {
    for (; j + W <= j1; j += W) {
      const B vd = HasD ? B::load_unaligned(d + j) : B(0.0f);
      f(load_kind<Arch, KA>(a, sa, j), load_kind<Arch, KB>(b, sb, j), vd).store_unaligned(y + j);
    }
  }
  for (; j < j1; ++j) y[j] = f(a[j * sa], b[j * sb], HasD ? d[j] : 0.0f);
}

// Picks the instantiation for the runtime stride kinds (9 combinations).
template <class Arch, bool HasD, bool Vector, class F>
void binary_run_dispatch(int64_t j0, int64_t j1, const float* a, int64_t sa, const float* b, int64_t sb,
                         const float* d, float* y, F&& f) {
#define TG_RUN(KA, KB) binary_run<Arch, KA, KB, HasD, Vector>(j0, j1, a, sa, b, sb, d, y, f)
  if constexpr (!Vector) {
    TG_RUN(2, 2);
    return;
  }
  switch (stride_kind(sa) * 3 + stride_kind(sb)) {
    case 0:
      TG_RUN(0, 0);
      break;
    case 1:
      TG_RUN(0, 1);
      break;
    case 2:
      TG_RUN(0, 2);
      break;
    case 3:
      TG_RUN(1, 0);
      break;
    case 4:
      TG_RUN(1, 1);
      break;
    case 5:
      TG_RUN(1, 2);
      break;
    case 6:
      TG_RUN(2, 0);
      break;
    case 7:
      TG_RUN(2, 1);
      break;
    default:
      TG_RUN(2, 2);
      break;
  }
#undef TG_RUN
}

// Shared driver: coalesce (a, b, contiguous output), then runs of the last dimension.
template <class Arch, bool HasD, bool Vector, class F>
void binary_drive(int ndim, const int64_t* shape, const float* a, const int64_t* sa, const float* b,
                  const int64_t* sb, const float* d, float* y, int64_t cost, F&& f) {
  const int64_t* strides[3] = {sa, sb, nullptr};
  const Space s = coalesce(ndim, shape, 3, strides);
  if (s.total == 0) return;
  const int64_t last = s.ndim - 1;
  const int64_t inner = s.shape[last];
  const int nt = team_for(s.total * cost, s.total / std::min(inner, kRunChunk));
  for_each_run(s, 3, nt, [&](const int64_t* off, int64_t j0, int64_t j1) {
    // The output is contiguous, so its offset for this outer index is off[2]; shift every pointer to
    // the run's outer start and index the run from j0.
    binary_run_dispatch<Arch, HasD, Vector>(j0, j1, a + off[0], s.stride[0][last], b + off[1],
                                            s.stride[1][last], HasD ? d + off[2] : nullptr, y + off[2], f);
  });
}

template <class Arch>
void binary_f32(Binary op, int ndim, const int64_t* shape, const float* a, const int64_t* sa, const float* b,
                const int64_t* sb, float* y) {
  auto drive = [&](int64_t cost, auto f) {
    binary_drive<Arch, false, true>(ndim, shape, a, sa, b, sb, nullptr, y, cost, f);
  };
  switch (op) {
    case Binary::add:
      drive(1, [](auto u, auto v, auto) { return u + v; });
      break;
    case Binary::sub:
      drive(1, [](auto u, auto v, auto) { return u - v; });
      break;
    case Binary::mul:
      drive(1, [](auto u, auto v, auto) { return u * v; });
      break;
    case Binary::div:
      drive(2, [](auto u, auto v, auto) { return u / v; });
      break;
    case Binary::pow:
      binary_drive<Arch, false, false>(ndim, shape, a, sa, b, sb, nullptr, y, 8,
                                       [](float u, float v, float) { return std::pow(u, v); });
      break;
  }
}

// g = dy * d(a op b)/d(operand `which`), elementwise before any broadcast reduction.
template <class Arch>
void binary_backward_f32(Binary op, int which, int ndim, const int64_t* shape, const float* a,
                         const int64_t* sa, const float* b, const int64_t* sb, const float* dy, float* g) {
  auto drive = [&](int64_t cost, auto f) {
    binary_drive<Arch, true, true>(ndim, shape, a, sa, b, sb, dy, g, cost, f);
  };
  switch (op) {
    case Binary::add:
      drive(1, [](auto, auto, auto d) { return d; });
      break;
    case Binary::sub:
      if (which == 0)
        drive(1, [](auto, auto, auto d) { return d; });
      else
        drive(1, [](auto, auto, auto d) { return -d; });
      break;
    case Binary::mul:  // d(ab)/da = b, d(ab)/db = a
      if (which == 0)
        drive(1, [](auto, auto v, auto d) { return d * v; });
      else
        drive(1, [](auto u, auto, auto d) { return d * u; });
      break;
    case Binary::div:  // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
      if (which == 0)
        drive(2, [](auto, auto v, auto d) { return d * (decltype(v)(1.0f) / v); });
      else
        drive(2, [](auto u, auto v, auto d) { return d * (-u / (v * v)); });
      break;
    case Binary::pow:  // d(a^b)/da = b a^(b-1), d(a^b)/db = a^b log a
      if (which == 0)
        binary_drive<Arch, true, false>(ndim, shape, a, sa, b, sb, dy, g, 8, [](float u, float v, float d) {
          return d * (v * std::pow(u, v - 1.0f));
        });
      else
        binary_drive<Arch, true, false>(ndim, shape, a, sa, b, sb, dy, g, 8, [](float u, float v, float d) {
          return d * (std::pow(u, v) * std::log(u));
        });
      break;
  }
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(unary, unary_f32)
TG_SIMD_KERNEL(unary_backward, unary_backward_f32)
TG_SIMD_KERNEL(affine, affine_f32)
TG_SIMD_KERNEL(binary, binary_f32)
TG_SIMD_KERNEL(binary_backward, binary_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
