// SIMD softmax family over rows x cols (float32): softmax with scale and additive / causal mask fused,
// its backward, log_softmax and its backward, and cross-entropy from logits. Contracts and the
// scalar oracle: kernels/kernels.hpp, kernels/ref/ref.hpp.
//
// Each row is handled by one thread in three short passes (max, exp and sum, normalise). A row of up
// to ~8K floats stays in L1/L2 between passes, so x is read from memory once and y written once
// (bench/bench_vector.cpp compares the kernel with memcpy of the same bytes). The exp pass is the
// cost: a chain of ~9 dependent vector ops per batch (math.hpp, exp_nonpositive), two batches
// interleaved. Plain softmax (no scale, mask or causal rule) is software-pipelined across rows and
// writes large outputs with streaming stores; see softmax_plain_rows(_fused). Rows are split statically
// across the team; nothing is reduced across rows, so results do not depend on the thread count.
// The double path stays on the reference.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/simd/common.hpp"
#include "kernels/simd/math.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

// max over n floats; -inf for n == 0. Four accumulators hide the latency of max.
template <class Arch>
float row_max(const float* x, int64_t n) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B m0(-kInf), m1(-kInf), m2(-kInf), m3(-kInf);
  int64_t c = 0;
  for (; c + 4 * W <= n; c += 4 * W) {
    m0 = xsimd::max(m0, B::load_unaligned(x + c));
    m1 = xsimd::max(m1, B::load_unaligned(x + c + W));
    m2 = xsimd::max(m2, B::load_unaligned(x + c + 2 * W));
    m3 = xsimd::max(m3, B::load_unaligned(x + c + 3 * W));
  }
  for (; c + W <= n; c += W) m0 = xsimd::max(m0, B::load_unaligned(x + c));
  if (c < n) m1 = xsimd::max(m1, load_tail<Arch>(x + c, n - c, -kInf));
  return hmax<Arch>(xsimd::max(xsimd::max(m0, m1), xsimd::max(m2, m3)));
}

struct MaxMin {
  float max, min;
};

// Max and min of a row. The min costs nothing here (the pass waits on loads) and lets the exp pass
// drop its clamp when no entry is far below the max (exp_nonpositive<Arch, false>).
template <class Arch>
TG_INLINE void max_min_step(const Batch<Arch>& v, Batch<Arch>& mx, Batch<Arch>& mn) {
  mx = xsimd::max(mx, v);
  mn = xsimd::min(mn, v);
}

template <class Arch>
TG_INLINE MaxMin finish_max_min(const Batch<Arch>& mx, const Batch<Arch>& mn) {
  return {hmax<Arch>(mx), hmin<Arch>(mn)};
}

template <class Arch>
MaxMin row_max_min(const float* x, int64_t n) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B m0(-kInf), m1(-kInf), n0(kInf), n1(kInf);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    max_min_step<Arch>(B::load_unaligned(x + c), m0, n0);
    max_min_step<Arch>(B::load_unaligned(x + c + W), m1, n1);
  }
  for (; c + W <= n; c += W) max_min_step<Arch>(B::load_unaligned(x + c), m0, n0);
  if (c < n) {
    m1 = xsimd::max(m1, load_tail<Arch>(x + c, n - c, -kInf));
    n1 = xsimd::min(n1, load_tail<Arch>(x + c, n - c, kInf));
  }
  return finish_max_min<Arch>(xsimd::max(m0, m1), xsimd::min(n0, n1));
}

// y = exp(x - shift) over n floats (x - shift <= 0), returns sum(y). x may equal y. Two
// independent exps per iteration and two accumulators: with more, AVX2's 16 registers no longer
// hold the exp's constants and the sums, and g++ keeps the sums on the stack (a store-to-load
// chain through every iteration).
template <class Arch, bool Clamp>
float exp_shift_sum(const float* x, float shift, int64_t n, float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B s(shift);
  B a0(0.0f), a1(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    B e[2] = {B::load_unaligned(x + c) - s, B::load_unaligned(x + c + W) - s};
    exp_nonpositive_n<Arch, Clamp, 2>(e);
    e[0].store_unaligned(y + c);
    e[1].store_unaligned(y + c + W);
    a0 += e[0];
    a1 += e[1];
  }
  for (; c + W <= n; c += W) {
    const B e = exp_nonpositive<Arch, Clamp>(B::load_unaligned(x + c) - s);
    e.store_unaligned(y + c);
    a0 += e;
  }
  if (c < n) {
    const B e = exp_nonpositive<Arch>(load_tail<Arch>(x + c, n - c, -kInf) - s);  // padding -> 0
    store_tail<Arch>(y + c, n - c, e);
    a1 += e;
  }
  return hsum<Arch>(a0 + a1);
}

// sum(exp(x - shift)) without storing (log_softmax, cross-entropy).
template <class Arch>
float exp_shift_sum_only(const float* x, float shift, int64_t n) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B s(shift);
  B a0(0.0f), a1(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    a0 += exp_nonpositive<Arch>(B::load_unaligned(x + c) - s);
    a1 += exp_nonpositive<Arch>(B::load_unaligned(x + c + W) - s);
  }
  for (; c + W <= n; c += W) a0 += exp_nonpositive<Arch>(B::load_unaligned(x + c) - s);
  if (c < n) a1 += exp_nonpositive<Arch>(load_tail<Arch>(x + c, n - c, -kInf) - s);
  return hsum<Arch>(a0 + a1);
}

template <class Arch>
void scale_inplace(float* y, float k, int64_t n) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B kb(k);
  int64_t c = 0;
  for (; c + W <= n; c += W) (B::load_unaligned(y + c) * kb).store_unaligned(y + c);
  for (; c < n; ++c) y[c] *= k;
}

template <class Arch>
void fill_zero(float* y, int64_t n) {
  std::memset(y, 0, sizeof(float) * size_t(n));
}

// y = scale * x + mask over n floats (mask may be null); returns max(y) and min(y).
template <class Arch>
MaxMin scale_mask_max(const float* x, const float* mask, float scale, int64_t n, float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B sc(scale);
  B m0(-kInf), n0(kInf);
  float m1 = -kInf, n1 = kInf;
  int64_t c = 0;
  if (mask) {
    for (; c + W <= n; c += W) {
      const B v = xsimd::fma(sc, B::load_unaligned(x + c), B::load_unaligned(mask + c));
      v.store_unaligned(y + c);
      max_min_step<Arch>(v, m0, n0);
    }
    for (; c < n; ++c) y[c] = scale * x[c] + mask[c];
  } else {
    for (; c + W <= n; c += W) {
      const B v = sc * B::load_unaligned(x + c);
      v.store_unaligned(y + c);
      max_min_step<Arch>(v, m0, n0);
    }
    for (; c < n; ++c) y[c] = scale * x[c];
  }
  for (int64_t i = n - n % W; i < n; ++i) {
    m1 = y[i] > m1 ? y[i] : m1;
    n1 = y[i] < n1 ? y[i] : n1;
  }
  const MaxMin v = finish_max_min<Arch>(m0, n0);
  return {v.max > m1 ? v.max : m1, v.min < n1 ? v.min : n1};
}

// Pass 2 and the zero-row rule: y = exp(src - max) (src may be y), returns the sum, or 0 for a row
// whose every column is masked (max = -inf), which the reference defines as all zeros.
template <class Arch>
float exp_pass(const float* src, MaxMin mm, int64_t n, float* y) {
  if (mm.max == -kInf) {
    std::memset(y, 0, sizeof(float) * size_t(n));
    return 0.0f;
  }
  // No entry far below the max (the usual case): the clamp-free exp is exact for x - max >= -87.
  if (mm.min - mm.max >= kExpNoClampMin) return exp_shift_sum<Arch, false>(src, mm.max, n, y);
  return exp_shift_sum<Arch, true>(src, mm.max, n, y);
}

// One softmax row with scale and/or mask. Columns at or past `active` are causally masked
// (exp(-inf) = 0, written directly).
template <class Arch>
void softmax_row(const float* x, const float* mask, float scale, bool plain, int64_t active, int64_t cols,
                 float* y) {
  MaxMin mm;
  const float* src = x;
  if (plain) {
    mm = row_max_min<Arch>(x, active);
  } else {
    mm = scale_mask_max<Arch>(x, mask, scale, active, y);  // y holds the logits until pass 2
    src = y;
  }
  const float sum = exp_pass<Arch>(src, mm, active, y);
  if (sum > 0.0f) scale_inplace<Arch>(y, 1.0f / sum, active);
  if (active < cols) fill_zero<Arch>(y + active, cols - active);
}

// One step of the software-pipelined plain softmax, over the n columns of three rows at once:
//   e = exp(xe - max_e), returning sum(e)         (pass 2 of row r)
//   max and min of xn into next                   (pass 1 of row r + 1)
//   yp = sp * kp, streamed if Stream (if HasPrev) (pass 3 of row r - 1)
// The three are independent, so the out-of-order core overlaps them, and the latency of a row's
// reductions (max -> exp, sum -> 1/sum -> normalise) no longer stalls the pipeline between rows;
// on 256-column rows that latency was as long as the arithmetic. Loads come before the stores at
// the same offset (4K aliasing: buffers a multiple of 4 KiB apart).
// y = v * k, stored streaming (past the caches) when the output is large (see stream_output).
template <class Arch, bool Stream>
TG_INLINE void store_scaled(float* y, const Batch<Arch>& v, const Batch<Arch>& k) {
  if constexpr (Stream)
    store_stream<Arch>(y, v * k);
  else
    (v * k).store_unaligned(y);
}

template <class Arch, bool Clamp, bool HasPrev, bool Stream>
TG_INLINE float pipelined_step(int64_t n, const float* xe, float max_e, float* e, const float* xn,
                               MaxMin& next, const float* sp, float kp, float* yp) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B s(max_e), k(kp);
  B a0(0.0f), a1(0.0f), m0(-kInf), m1(-kInf), n0(kInf), n1(kInf);
  auto scale_store = [&](int64_t c, const B& v) { store_scaled<Arch, Stream>(yp + c, v, k); };
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    const B x0 = B::load_unaligned(xe + c), x1 = B::load_unaligned(xe + c + W);
    const B v0 = B::load_unaligned(xn + c), v1 = B::load_unaligned(xn + c + W);
    B p0(0.0f), p1(0.0f);
    if constexpr (HasPrev) p0 = B::load_unaligned(sp + c), p1 = B::load_unaligned(sp + c + W);
    const B e0 = exp_nonpositive<Arch, Clamp>(x0 - s), e1 = exp_nonpositive<Arch, Clamp>(x1 - s);
    e0.store_unaligned(e + c);
    e1.store_unaligned(e + c + W);
    a0 += e0;
    a1 += e1;
    max_min_step<Arch>(v0, m0, n0);
    max_min_step<Arch>(v1, m1, n1);
    if constexpr (HasPrev) {
      scale_store(c, p0);
      scale_store(c + W, p1);
    }
  }
  for (; c + W <= n; c += W) {
    const B x0 = B::load_unaligned(xe + c), v0 = B::load_unaligned(xn + c);
    B p0(0.0f);
    if constexpr (HasPrev) p0 = B::load_unaligned(sp + c);
    const B e0 = exp_nonpositive<Arch, Clamp>(x0 - s);
    e0.store_unaligned(e + c);
    a0 += e0;
    max_min_step<Arch>(v0, m0, n0);
    if constexpr (HasPrev) scale_store(c, p0);
  }
  if (c < n) {  // Stream implies n % W == 0, so tails use plain stores
    const int64_t t = n - c;
    if constexpr (HasPrev)
      for (int64_t i = c; i < n; ++i) yp[i] = sp[i] * kp;
    m1 = xsimd::max(m1, load_tail<Arch>(xn + c, t, -kInf));
    n1 = xsimd::min(n1, load_tail<Arch>(xn + c, t, kInf));
    const B e0 = exp_nonpositive<Arch>(load_tail<Arch>(xe + c, t, -kInf) - s);  // padding -> 0
    store_tail<Arch>(e + c, t, e0);
    a1 += e0;
  }
  next = finish_max_min<Arch>(xsimd::max(m0, m1), xsimd::min(n0, n1));
  return hsum<Arch>(a0 + a1);
}

// y = s * k over n floats, streamed if Stream (the last row's normalise pass).
template <class Arch, bool Stream>
void scale_copy(const float* src, float k, int64_t n, float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B kb(k);
  int64_t c = 0;
  for (; c + W <= n; c += W) {
    if constexpr (Stream)
      store_stream<Arch>(y + c, B::load_unaligned(src + c) * kb);
    else
      (B::load_unaligned(src + c) * kb).store_unaligned(y + c);
  }
  for (; c < n; ++c) y[c] = src[c] * k;
}

// Rows [r0, r1) without scale, mask or causal rule whose output is streamed (stream_output),
// software-pipelined with the three passes in one loop (pipelined_step). Each row's exp values go
// to a two-row scratch that stays in L1 and y is written once, with streaming stores. On these
// long rows the fused loop measured ~10% faster than softmax_plain_rows's separate loops (4096x1024,
// AVX2): the FMA-bound exp and the store-bound normalise share each iteration.
template <class Arch, bool Stream>
void softmax_plain_rows_fused(int64_t r0, int64_t r1, int64_t cols, const float* x, float* y,
                              float* scratch) {
  auto ebuf = [&](int64_t r) { return Stream ? scratch + (r & 1) * cols : y + r * cols; };
  MaxMin mm = row_max_min<Arch>(x + r0 * cols, cols);
  float kp = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xn = x + std::min(r + 1, r1 - 1) * cols;  // the last row's "next" is itself: harmless
    float* e = ebuf(r);
    const float* sp = r > r0 ? ebuf(r - 1) : nullptr;
    float* yp = r > r0 ? y + (r - 1) * cols : nullptr;
    MaxMin next;
    float sum;
    if (mm.max == -kInf) {  // every column -inf: the reference defines the row as zeros
      std::memset(e, 0, sizeof(float) * size_t(cols));
      if (r > r0) scale_copy<Arch, Stream>(sp, kp, cols, yp);
      next = row_max_min<Arch>(xn, cols);
      sum = 0.0f;
    } else {
      const bool clamp = !(mm.min - mm.max >= kExpNoClampMin);
#define TG_STEP(C, P) pipelined_step<Arch, C, P, Stream>(cols, x + r * cols, mm.max, e, xn, next, sp, kp, yp)
      if (r > r0)
        sum = clamp ? TG_STEP(true, true) : TG_STEP(false, true);
      else
        sum = clamp ? TG_STEP(true, false) : TG_STEP(false, false);
#undef TG_STEP
    }
    kp = sum > 0.0f ? 1.0f / sum : 0.0f;
    mm = next;
  }
  scale_copy<Arch, Stream>(ebuf(r1 - 1), kp, cols, y + (r1 - 1) * cols);
  if constexpr (Stream) _mm_sfence();  // streamed lines visible before the team's barrier
}

// The plain softmax's other half-step, over the n columns of two other rows at once:
//   yp = sp * kp, streamed if Stream (if sp)      (pass 3 of row r - 1)
//   max and min of xn into next (if xn)            (pass 1 of row r + 2)
// Both are load/store work, so they overlap with each other and, in the out-of-order window, with
// the FMA-bound exp pass of row r around them. Loads come before the stores at the same offset
// (4K aliasing: buffers a multiple of 4 KiB apart).
template <class Arch, bool Stream>
void scale_and_scan(int64_t n, const float* sp, float kp, float* yp, const float* xn, MaxMin& next) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B k(kp);
  B m0(-kInf), m1(-kInf), n0(kInf), n1(kInf);
  auto scale_store = [&](int64_t c, const B& v) { store_scaled<Arch, Stream>(yp + c, v, k); };
  int64_t c = 0;
  if (sp && xn) {
    for (; c + 2 * W <= n; c += 2 * W) {
      const B v0 = B::load_unaligned(xn + c), v1 = B::load_unaligned(xn + c + W);
      const B p0 = B::load_unaligned(sp + c), p1 = B::load_unaligned(sp + c + W);
      max_min_step<Arch>(v0, m0, n0);
      max_min_step<Arch>(v1, m1, n1);
      scale_store(c, p0);
      scale_store(c + W, p1);
    }
  }
  if (sp) {
    for (int64_t i = c; i + W <= n; i += W) scale_store(i, B::load_unaligned(sp + i));
    for (int64_t i = n - n % W; i < n; ++i) yp[i] = sp[i] * kp;  // Stream implies n % W == 0
  }
  if (xn) {
    for (; c + W <= n; c += W) max_min_step<Arch>(B::load_unaligned(xn + c), m0, n0);
    if (c < n) {
      m1 = xsimd::max(m1, load_tail<Arch>(xn + c, n - c, -kInf));
      n1 = xsimd::min(n1, load_tail<Arch>(xn + c, n - c, kInf));
    }
    next = finish_max_min<Arch>(xsimd::max(m0, m1), xsimd::min(n0, n1));
  }
}

// Rows [r0, r1) without scale, mask or causal rule, software-pipelined: while row r's exp pass runs,
// row r - 1 is normalised and row r + 2's max and min are found (scale_and_scan). Each reduction's
// result is needed only a row or two later, so the latency of the horizontal reductions and the
// division (max -> exp, sum -> 1/sum -> normalise), as long as the arithmetic of a 256-column row,
// no longer stalls the core between rows. The exp pass is a loop of its own: fused with the other
// two it needs more than AVX2's 16 registers, and g++ kept the sums on the stack. With Stream, each
// row's exp values go to a two-row scratch that stays in L1 and y is written once, with streaming
// stores; otherwise y itself holds them between passes.
template <class Arch, bool Stream>
void softmax_plain_rows(int64_t r0, int64_t r1, int64_t cols, const float* x, float* y, float* scratch) {
  auto ebuf = [&](int64_t r) { return Stream ? scratch + (r & 1) * cols : y + r * cols; };
  MaxMin mm[3];  // rows r, r + 1, r + 2, by r % 3
  mm[r0 % 3] = row_max_min<Arch>(x + r0 * cols, cols);
  if (r0 + 1 < r1) mm[(r0 + 1) % 3] = row_max_min<Arch>(x + (r0 + 1) * cols, cols);
  float kp = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const MaxMin cur = mm[r % 3];
    float* e = ebuf(r);
    float sum = 0.0f;
    if (cur.max == -kInf)  // every column -inf: the reference defines the row as zeros
      std::memset(e, 0, sizeof(float) * size_t(cols));
    else if (cur.min - cur.max >= kExpNoClampMin)
      sum = exp_shift_sum<Arch, false>(x + r * cols, cur.max, cols, e);
    else
      sum = exp_shift_sum<Arch, true>(x + r * cols, cur.max, cols, e);
    scale_and_scan<Arch, Stream>(cols, r > r0 ? ebuf(r - 1) : nullptr, kp,
                                 r > r0 ? y + (r - 1) * cols : nullptr,
                                 r + 2 < r1 ? x + (r + 2) * cols : nullptr, mm[(r + 2) % 3]);
    kp = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  MaxMin unused;
  scale_and_scan<Arch, Stream>(cols, ebuf(r1 - 1), kp, y + (r1 - 1) * cols, nullptr, unused);
  if constexpr (Stream) _mm_sfence();  // streamed lines visible before the team's barrier
}

// Short rows with scale, mask or causal rule (attention's T x T weights at T up to 4 vectors: 64 floats
// on AVX-512), two rows at a time held in registers: s = scale * x + mask, masked lanes (causal or
// past the row) -inf, then max, exp, sum and normalise without touching memory in between. A row's
// passes are a chain of dependent reductions as long as its arithmetic; two rows' chains side by side
// let the core overlap them (causal rows of 64 through softmax_row: 2.6 ns a float on Zen 5).
template <class Arch, int NV>
struct ShortRows {
  using B = Batch<Arch>;
  static constexpr int64_t W = B::size;

  // Row r of x into v[0..NV): scaled, masked, -inf at columns >= active.
  static TG_INLINE void load(const float* x, const float* mask, float scale, int64_t active, int64_t cols,
                             B* v) {
    alignas(64) static constexpr float kLane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const B lane = B::load_aligned(kLane);  // column numbers, exact as floats
    for (int j = 0; j < NV; ++j) {
      const int64_t c = j * W, n = std::min<int64_t>(W, cols - c);
      B s = n == W ? B::load_unaligned(x + c) : load_tail<Arch>(x + c, n, 0.0f);
      if (mask)
        s = xsimd::fma(B(scale), s,
                       n == W ? B::load_unaligned(mask + c) : load_tail<Arch>(mask + c, n, 0.0f));
      else
        s = B(scale) * s;
      v[j] = xsimd::select(lane + B(float(c)) >= B(float(active)), B(-kInf), s);
    }
  }
  // v -= max (the row's shift), or false for a row with every column masked.
  static TG_INLINE bool shift(B* v) {
    B m = v[0];
    for (int j = 1; j < NV; ++j) m = xsimd::max(m, v[j]);
    const float mx = hmax<Arch>(m);
    if (mx == -kInf) return false;
    for (int j = 0; j < NV; ++j) v[j] = v[j] - B(mx);
    return true;
  }
  static TG_INLINE void normalise_store(B* v, int64_t cols, float* y) {
    B t = v[0];
    for (int j = 1; j < NV; ++j) t = t + v[j];
    const B k(1.0f / hsum<Arch>(t));
    for (int j = 0; j < NV; ++j) {
      const int64_t c = j * W, n = std::min<int64_t>(W, cols - c);
      if (n == W)
        (v[j] * k).store_unaligned(y + c);
      else
        store_tail<Arch>(y + c, n, v[j] * k);
    }
  }
  static TG_INLINE void zeros(int64_t cols, float* y) { std::memset(y, 0, sizeof(float) * size_t(cols)); }

  template <class Active>
  static void rows(int64_t r0, int64_t r1, int64_t cols, const float* x, const float* mask, int64_t mask_rows,
                   float scale, Active active, float* y) {
    auto mask_row = [&](int64_t r) { return mask ? mask + (r % mask_rows) * cols : nullptr; };
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {
      B v[2 * NV];
      load(x + r * cols, mask_row(r), scale, active(r), cols, v);
      load(x + (r + 1) * cols, mask_row(r + 1), scale, active(r + 1), cols, v + NV);
      const bool live0 = shift(v), live1 = shift(v + NV);
      exp_nonpositive_n<Arch, true, 2 * NV>(v);  // -inf lanes give exactly 0
      live0 ? normalise_store(v, cols, y + r * cols) : zeros(cols, y + r * cols);
      live1 ? normalise_store(v + NV, cols, y + (r + 1) * cols) : zeros(cols, y + (r + 1) * cols);
    }
    if (r < r1) {
      B v[NV];
      load(x + r * cols, mask_row(r), scale, active(r), cols, v);
      const bool live = shift(v);
      exp_nonpositive_n<Arch, true, NV>(v);
      live ? normalise_store(v, cols, y + r * cols) : zeros(cols, y + r * cols);
    }
  }
};

template <class Arch>
void softmax_f32(int64_t rows, int64_t cols, const float* x, float* y, const SoftmaxOptions& o) {
  if (rows <= 0 || cols <= 0) return;
  const float* mask = static_cast<const float*>(o.mask);
  const float scale = float(o.scale);
  const bool plain = !mask && scale == 1.0f;
  const int64_t period = o.causal_period > 0 ? o.causal_period : cols;
  const int nt = team_for(rows * cols * 4, rows);  // exp makes a column cost ~4 plain elements
  const bool stream = plain && !o.causal && stream_output<Arch>(rows, cols, y);
  parallel_ranges(rows, nt, [&](int64_t r0, int64_t r1) {
    if (plain && !o.causal) {
      if (stream) {
        Scratch scratch(2 * cols);
        softmax_plain_rows_fused<Arch, true>(r0, r1, cols, x, y, scratch.p);
      } else {
        softmax_plain_rows<Arch, false>(r0, r1, cols, x, y, nullptr);
      }
      return;
    }
    // causal: column c is masked when c > (r % period) + offset, i.e. the first (r % period) +
    // offset + 1 columns stay.
    auto active = [&](int64_t r) {
      return o.causal ? std::clamp<int64_t>((r % period) + o.causal_offset + 1, 0, cols) : cols;
    };
    constexpr int64_t W = Batch<Arch>::size;
    if (cols <= 4 * W) {
      const int nv = int((cols + W - 1) / W);
      auto run = [&]<int NV>() {
        ShortRows<Arch, NV>::rows(r0, r1, cols, x, mask, o.mask_rows, scale, active, y);
      };
      if (nv == 1)
        run.template operator()<1>();
      else if (nv == 2)
        run.template operator()<2>();
      else if (nv == 3)
        run.template operator()<3>();
      else
        run.template operator()<4>();
      return;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t active_cols = active(r);
      softmax_row<Arch>(x + r * cols, mask ? mask + (r % o.mask_rows) * cols : nullptr, scale, plain,
                        active_cols, cols, y + r * cols);
    }
  });
}

// The row functions below take sizes and pointers by value: inside a lambda they would be read
// through the closure, and every vector store (a may-alias type) would force a reload of the loop
// bound and the pointers on each iteration.

// softmax: dx = (Accumulate ? dx : 0) + scale * y * (dy - sum(dy * y)), one row of n.
template <class Arch, bool Accumulate>
void softmax_backward_row(int64_t n, const float* y, const float* dy, float* dx, float scale) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B a0(0.0f), a1(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    a0 = xsimd::fma(B::load_unaligned(dy + c), B::load_unaligned(y + c), a0);
    a1 = xsimd::fma(B::load_unaligned(dy + c + W), B::load_unaligned(y + c + W), a1);
  }
  for (; c + W <= n; c += W) a0 = xsimd::fma(B::load_unaligned(dy + c), B::load_unaligned(y + c), a0);
  float dot = hsum<Arch>(a0 + a1);
  for (; c < n; ++c) dot += dy[c] * y[c];
  const B d(dot), s(scale);
  c = 0;
  for (; c + W <= n; c += W) {
    const B g = s * B::load_unaligned(y + c) * (B::load_unaligned(dy + c) - d);
    (Accumulate ? B::load_unaligned(dx + c) + g : g).store_unaligned(dx + c);
  }
  for (; c < n; ++c) dx[c] = (Accumulate ? dx[c] : 0.0f) + scale * y[c] * (dy[c] - dot);
}

template <class Arch>
void softmax_backward_f32(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx,
                          double scale, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  parallel_ranges(rows, team_for(rows * cols * 3, rows), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *yr = y + r * cols, *dyr = dy + r * cols;
      if (accumulate)
        softmax_backward_row<Arch, true>(cols, yr, dyr, dx + r * cols, float(scale));
      else
        softmax_backward_row<Arch, false>(cols, yr, dyr, dx + r * cols, float(scale));
    }
  });
}

// y = x - max - log(sum(exp(x - max))), one row of n.
template <class Arch>
void log_softmax_row(int64_t n, const float* x, float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const float mx = row_max<Arch>(x, n);
  const float lse = mx + std::log(exp_shift_sum_only<Arch>(x, mx, n));
  const B l(lse);
  int64_t c = 0;
  for (; c + W <= n; c += W) (B::load_unaligned(x + c) - l).store_unaligned(y + c);
  for (; c < n; ++c) y[c] = x[c] - lse;
}

template <class Arch>
void log_softmax_f32(int64_t rows, int64_t cols, const float* x, float* y) {
  if (rows <= 0 || cols <= 0) return;
  parallel_ranges(rows, team_for(rows * cols * 4, rows), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) log_softmax_row<Arch>(cols, x + r * cols, y + r * cols);
  });
}

// log_softmax: dx = (Accumulate ? dx : 0) + dy - exp(y) * sum(dy), one row of n. y = log p <= 0:
// exp(y) cannot overflow.
template <class Arch, bool Accumulate>
void log_softmax_backward_row(int64_t n, const float* y, const float* dy, float* dx) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B a0(0.0f), a1(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    a0 += B::load_unaligned(dy + c);
    a1 += B::load_unaligned(dy + c + W);
  }
  for (; c + W <= n; c += W) a0 += B::load_unaligned(dy + c);
  if (c < n) a1 += load_tail<Arch>(dy + c, n - c, 0.0f);
  const B s(hsum<Arch>(a0 + a1));
  c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {  // two exps interleaved, as in exp_shift_sum
    B e[2] = {B::load_unaligned(y + c), B::load_unaligned(y + c + W)};
    exp_nonpositive_n<Arch, true, 2>(e);
    for (int h = 0; h < 2; ++h) {
      const B g = B::load_unaligned(dy + c + h * W) - e[h] * s;
      (Accumulate ? B::load_unaligned(dx + c + h * W) + g : g).store_unaligned(dx + c + h * W);
    }
  }
  for (; c + W <= n; c += W) {
    const B g = B::load_unaligned(dy + c) - exp_nonpositive<Arch>(B::load_unaligned(y + c)) * s;
    (Accumulate ? B::load_unaligned(dx + c) + g : g).store_unaligned(dx + c);
  }
  if (c < n) {
    const int64_t t = n - c;
    const B g = load_tail<Arch>(dy + c, t, 0.0f) - exp_nonpositive<Arch>(load_tail<Arch>(y + c, t, 0.0f)) * s;
    store_tail<Arch>(dx + c, t, Accumulate ? load_tail<Arch>(dx + c, t, 0.0f) + g : g);
  }
}

template <class Arch>
void log_softmax_backward_f32(int64_t rows, int64_t cols, const float* y, const float* dy, float* dx,
                              bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  parallel_ranges(rows, team_for(rows * cols * 4, rows), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *yr = y + r * cols, *dyr = dy + r * cols;
      if (accumulate)
        log_softmax_backward_row<Arch, true>(cols, yr, dyr, dx + r * cols);
      else
        log_softmax_backward_row<Arch, false>(cols, yr, dyr, dx + r * cols);
    }
  });
}

// Cross-entropy from logits, fused; per row (target t not ignored), with logp = x - lse:
//   loss = (1 - eps) (lse - x[t]) + eps/V (V lse - sum x)
//   grad = grad_scale * (p - eps/V - (1 - eps) [v == t]),  p = e / sum(e),  e = exp(x - max)
// Three passes: max, min and sum(x); e into the gradient row (which stays in L1/L2) and its sum;
// then the gradient from e in place, so each logit costs one exp. One row of V; g may be null.
template <class Arch>
float cross_entropy_row(int64_t V, const float* x, int32_t t, float smooth, float on, float gs, float* g) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B m0(-kInf), m1(-kInf), n0(kInf), n1(kInf), s0(0.0f), s1(0.0f);
  int64_t c = 0;
  for (; c + 2 * W <= V; c += 2 * W) {
    const B v0 = B::load_unaligned(x + c), v1 = B::load_unaligned(x + c + W);
    max_min_step<Arch>(v0, m0, n0);
    max_min_step<Arch>(v1, m1, n1);
    s0 += v0;
    s1 += v1;
  }
  for (; c + W <= V; c += W) {
    const B v = B::load_unaligned(x + c);
    max_min_step<Arch>(v, m0, n0);
    s0 += v;
  }
  if (c < V) {
    m1 = xsimd::max(m1, load_tail<Arch>(x + c, V - c, -kInf));
    n1 = xsimd::min(n1, load_tail<Arch>(x + c, V - c, kInf));
    s1 += load_tail<Arch>(x + c, V - c, 0.0f);
  }
  const MaxMin mm = finish_max_min<Arch>(xsimd::max(m0, m1), xsimd::min(n0, n1));
  const float sum_x = hsum<Arch>(s0 + s1);
  const float sum = g ? exp_pass<Arch>(x, mm, V, g) : exp_shift_sum_only<Arch>(x, mm.max, V);
  const float lse = mm.max + std::log(sum);
  const float loss = on * (lse - x[t]) + smooth * (float(V) * lse - sum_x);
  if (!g) return loss;
  // grad = gs (e / sum - eps/V), then the target's extra -(1 - eps)
  const float inv = 1.0f / sum, p_t = g[t] * inv;
  const B k(gs * inv), off(-gs * smooth);
  c = 0;
  for (; c + W <= V; c += W) xsimd::fma(B::load_unaligned(g + c), k, off).store_unaligned(g + c);
  for (; c < V; ++c) g[c] = g[c] * (gs * inv) - gs * smooth;
  g[t] = gs * (p_t - smooth - on);
  return loss;
}

template <class Arch>
int64_t cross_entropy_f32(int64_t rows, int64_t V, const float* logits, const int32_t* targets,
                          int32_t ignore_index, double eps, float* row_loss, float* grad, double grad_scale) {
  if (rows <= 0) return 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) counted += targets[r] != ignore_index;
  const float gs = float(grad_scale), smooth = float(eps / double(V)), on = float(1 - eps);
  parallel_ranges(rows, team_for(rows * V * 4, rows), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* g = grad ? grad + r * V : nullptr;
      if (targets[r] == ignore_index || V <= 0) {
        row_loss[r] = 0;
        if (g) fill_zero<Arch>(g, V);
        continue;
      }
      row_loss[r] = cross_entropy_row<Arch>(V, logits + r * V, targets[r], smooth, on, gs, g);
    }
  });
  return counted;
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(softmax, softmax_f32)
TG_SIMD_KERNEL(softmax_backward, softmax_backward_f32)
TG_SIMD_KERNEL(log_softmax, log_softmax_f32)
TG_SIMD_KERNEL(log_softmax_backward, log_softmax_backward_f32)
TG_SIMD_KERNEL(cross_entropy, cross_entropy_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
