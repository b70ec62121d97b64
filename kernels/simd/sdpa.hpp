// SIMD scaled-dot-product attention, forward and backward (float32), fused so that the T x T
// weights are never stored. Contracts and the scalar oracle: kernels/kernel_list.hpp,
// kernels/ref/ref.hpp.
//
// Unfused, attention is a batched GEMM for the scores, a softmax, a second batched GEMM and, for
// backward, the stored [B, H, Tq, Tk] weights: memory that grows with T^2, and at our model sizes
// (T = 32, d = 32) a chain of small GEMM calls each too short to pay a thread fork. Here each thread
// takes whole (b, h) heads (forward: blocks of kQueryBlock query rows of a head) and walks the keys
// in blocks of kKeyBlock:
//   forward:  S = scale * Q K^T + mask for the block, an online softmax update of each row's
//             running max m and sum l (rescaling the row's partial output when m grows), O += P V;
//             at the end O /= l and lse = m + log l is stored, B*H*Tq floats.
//   backward: per key block, for every query block: P = exp(S - lse) recomputed, dP = dO V^T,
//             dS = P (dP - D) with D = rowsum(dO o), then dV += P^T dO, dK += scale dS^T Q straight
//             into the gradients' rows, dQ += scale dS K into the head's accumulator (or into dq
//             itself when all keys are one block).
// Every product is a tile loop over the GEMM micro-kernel (gemm_micro.hpp; its register tile from
// gemm_config.hpp), with the operands that it reads as B packed once per head or key block, zero
// padded to whole vectors: K^T and V^T transposed, V, dO, Q, K row-major (short heads read the last
// four in place: direct_heads). Scratch is O(T d) per head plus O(kQueryBlock x kKeyBlock), per
// thread and kept for the next call (ThreadBuffers), never O(T^2). A key block of kKeyBlock keeps a
// query block's scores in L1/L2; at T <= kKeyBlock a row is one block: the online rescale never
// runs, and P, divided by l first, is multiplied by V straight into o.
// Each row's (forward) and each head's (backward) arithmetic is the same whatever thread runs it,
// so no result depends on the thread count. Dropout on the weights recomputes the dropout kernel's
// counter-based mask in vector lanes (random.hpp), forward and backward.
// Cost (bench/bench_attention.cpp, one Zen 3 core, AVX2): 0.95-1.25x the unfused ops' time from
// T = 64 to 2048, since the scores and their exp are computed twice (14 products to 12), for 5 MiB
// instead of 34 at T = 512; causal, 0.56-0.75x from T = 256 (key blocks past the diagonal are
// skipped); at T = 32 with 256 heads 1.4-2x, a third of it reading the heads' rows cold. Causal, each
// register tile of the seven products also computes only the keys its rows see (TileSpan): the
// kernels alone 1.41x faster at T 128 (8 heads of 64), 1.09x at 512, 1.27x at GPT's T 64 (12 x 4
// heads of 32), 1.14x at the decoder's T 33 of the small Transformer (1.39x in cache), paired runs
// on a Zen 5 (both builds at once on the two cores, then swapped); unmasked, 0.98-1.03x (noise). Writing
// o, dq, dk and dv from the micro-kernel (no accumulator copied out row by row) and reading short
// heads in place: the small Transformer's attention 17.2 -> 10.8 ms a 1-thread step (tapegrad
// profile, medians of four alternating runs on a Zen 5 core). The forward packing a head's K^T and V
// once for all its query blocks (it had packed them again for each) and every buffer taken from the
// thread's reused scratch (see ThreadBuffers): fused T 128 to 1024 1.12-1.13x faster in
// bench_attention (four alternating runs of both binaries, one Zen 5 core); with the per-row
// reciprocals, logs and padding fills gone as well, the kernels alone 1.08x at the small
// Transformer's shape, 1.13x at T 512 and 1.17x at T 128 (paired runs, both builds at once on the
// two cores, then swapped).
// Not here: the double path (the reference), a split of one head's backward across threads (a head
// is the unit of work, so B * H = 1 runs on one thread).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/simd/common.hpp"
#include "kernels/simd/gemm_config.hpp"
#include "kernels/simd/gemm_micro.hpp"
#include "kernels/simd/gemm_pack.hpp"
#include "kernels/simd/math.hpp"
#include "kernels/simd/random.hpp"
#include "kernels/simd/softmax.hpp"

TG_SIMD_SILENCE_GCC_PR105593_BEGIN

namespace tapegrad::kernels::simd {
namespace {

inline constexpr int64_t kQueryBlock = 64;
inline constexpr int64_t kKeyBlock = 128;

// The register tiles. Short products (m < 64 rows: our models' T = 32 blocks) take 4 x 2 vectors
// (8 accumulators, just enough for two FMA pipes at 4 cycles), which divide a 32-row block, where
// the GEMM's 6-row tile leaves a 2-row remainder (11% wasted); longer ones take the GEMM's 6 x 2
// (12 accumulators: slack for the loads; 3% wasted on 64-row blocks). AVX-512: 8 x 2 for both.
template <class Arch, bool Short>
struct AttentionTile {
  static constexpr int W = int(Batch<Arch>::size);
  static constexpr int MR = std::is_base_of_v<xsimd::avx512f, Arch> ? 8 : Short ? 4 : 6;
  static constexpr int NV = 2;
  static constexpr int NR = NV * W;
};

// The part of a row tile's product that a causal mask leaves to compute: columns [0, n) of C and the
// depth [k0, k1) of the sum. Outside it the product is not needed (scores past a row's last key,
// which the softmax overwrites with zeros) or only adds zeros (weights and score gradients past the
// last key, or before the first query that sees a key), so it is skipped. Each element that is
// computed is the same k-ordered sum: a run of zero terms leaves the +0 the sum starts from, or
// adds +-0 to what it has, bit for bit. (Only a NaN or an infinity in V, dO, Q or K where the mask
// hides it would have made the whole tile's row NaN before.)
struct TileSpan {
  int64_t n, k0, k1;
};
// A span's bound where the mask sets none (tile_gemm clips every bound to the product).
inline constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// The whole product.
struct FullSpan {
  TileSpan operator()(int64_t, int) const { return {kUnbounded, 0, kUnbounded}; }
};

// span(i, rows): the TileSpan of the row tile of C at rows [i, i + rows), within the product.
template <class Arch, bool AK, bool Short, class Span>
void tile_loop(int64_t m, int64_t n, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
               float beta, float* c, int64_t ldc, const Span& span) {
  using Tile = AttentionTile<Arch, Short>;
  constexpr int MR = Tile::MR, NV = Tile::NV;
  static constexpr gemm_detail::MicroKernelTable<Arch, float, MR, NV, AK> table;
  // The rows below the last whole tile (the one row past 32 of the decoder's T = 33 blocks, in each
  // of the seven products) take a shorter tile where that is quicker (bottom_edge_kernels).
  const gemm_detail::MicroKernelFn<float>* edge =
      gemm_detail::bottom_edge_kernels<Arch, float, MR, NV, AK>(int(m % MR));
  for (int64_t j = 0; j < n; j += Tile::NR) {
    for (int64_t i = 0; i < m; i += MR) {
      const int rows = int(std::min<int64_t>(MR, m - i));
      const TileSpan t = span(i, rows);
      const int n_valid = int(std::min<int64_t>(Tile::NR, t.n - j));
      if (n_valid <= 0) continue;
      if (t.k1 <= t.k0) {  // only zeros to add
        if (beta == 0.0f)
          for (int r = 0; r < rows; ++r) std::fill_n(c + (i + r) * ldc + j, n_valid, 0.0f);
        continue;
      }
      const int v = (n_valid + Tile::W - 1) / Tile::W - 1;
      const float* at = AK ? a + t.k0 * lda + i : a + i * lda + t.k0;
      (rows < MR && edge ? edge : table.fn)[v](t.k1 - t.k0, at, lda, b + t.k0 * ldb + j, ldb, c + i * ldc + j,
                                               ldc, alpha, beta, rows, n_valid, nullptr, nullptr, nullptr);
    }
  }
}

// C (m x n, row stride ldc) = alpha * op(A) B + beta * C over kc >= 1, in micro-kernel tiles, within
// each row tile's span (see TileSpan; FullSpan for all of it). op(A) is A (m x kc, row stride lda)
// or, with AK, A^T read in place (A stored kc x m, row stride lda). B is k-major (kc x n, row stride
// ldb) and readable up to n rounded up to whole vectors.
template <class Arch, bool AK, class Span = FullSpan>
void tile_gemm(int64_t m, int64_t n, int64_t kc, float alpha, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc, const Span& span = Span{}) {
  if (m <= 0 || n <= 0 || kc <= 0) return;
  const auto clipped = [&](int64_t i, int rows) {
    const TileSpan t = span(i, rows);
    return TileSpan{std::min(t.n, n), std::max<int64_t>(t.k0, 0), std::min(t.k1, kc)};
  };
  if (m < 64)
    tile_loop<Arch, AK, true>(m, n, alpha, a, lda, b, ldb, beta, c, ldc, clipped);
  else
    tile_loop<Arch, AK, false>(m, n, alpha, a, lda, b, ldb, beta, c, ldc, clipped);
}

// The row stride of the key-block buffers (K^T, V^T, scores): whole vectors, plus one, so that a
// 128-key block's rows are not 512 bytes apart, which would put every eighth row in one L1 set.
template <class Arch>
int64_t key_block_ld(int64_t kb) {
  return gemm_detail::round_up(kb, int64_t(Batch<Arch>::size)) + int64_t(Batch<Arch>::size);
}

// Whether a head is short enough that its operands are read where they lie (forward: V; backward:
// Q, K, dO) rather than packed dense: one query block and one key block, rows of whole vectors (the
// micro-kernel reads B a vector at a time). Packing is for long heads, whose rows a power-of-two
// stride apart evict each other from L1 (see sdpa_backward_f32); at the small Transformer's T = 32
// it was a copy of every row for nothing.
template <class Arch>
bool direct_heads(const AttentionLayout& l) {
  constexpr int64_t W = Batch<Arch>::size;
  return l.Tq <= kQueryBlock && l.Tk <= kKeyBlock && l.dk % W == 0 && l.dv % W == 0;
}

// rows x cols of a strided operand (rows `stride` apart) into a dense buffer of row stride ld,
// zero padded from cols to ld. Vector copies inline: at T = 32 a library memcpy call per row cost
// more than the row.
template <class Arch>
void pack_rows(int64_t rows, int64_t cols, const float* src, int64_t stride, int64_t ld, float* dst) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * stride;
    float* y = dst + r * ld;
    int64_t c = 0;
    for (; c + W <= cols; c += W) B::load_unaligned(x + c).store_unaligned(y + c);
    for (; c < cols; ++c) y[c] = x[c];
    for (; c < ld; ++c) y[c] = 0.0f;
  }
}

// One call's buffers on one thread, carved in order from the thread's own grow-only scratch (slot 3
// of gemm_detail::scratch; each 64-byte aligned). Attention runs at every layer of every step, and
// buffers of its own per call (operator new) came from fresh pages each time once they passed
// glibc's mmap threshold (128 KiB: K^T, V, Q, dO of a head from T = 512 at d = 64), each page paying
// its first touch: the kernels alone at T 512 (8 heads of 64, one thread) ran 1.1x faster on reused
// pages (ten alternating rounds). O(T d) per thread, kept for the thread's life as the GEMM's are.
template <size_t N>
class ThreadBuffers {
 public:
  explicit ThreadBuffers(const std::array<int64_t, N>& floats) {
    int64_t total = 0;
    for (const int64_t n : floats) total += padded(n);
    float* at = gemm_detail::scratch<float>(3, total);
    for (size_t i = 0; i < N; ++i) parts_[i] = at, at += padded(floats[i]);
  }
  float* operator[](size_t i) const { return parts_[i]; }

 private:
  static int64_t padded(int64_t n) { return gemm_detail::round_up(std::max<int64_t>(n, 1), 16); }
  std::array<float*, N> parts_{};
};

// The offset of head (b, h) in an operand of strides s.
inline int64_t head_at(const AttentionStrides& s, int64_t b, int64_t h) {
  return b * s.b + h * s.h;
}

// The next head's rows are prefetched (gemm_detail::prefetch_rows) while this one computes: at T = 32
// a head's rows are a few KiB spread H rows apart, and at 64 x 4 heads (1 MiB per operand, beyond L2)
// reading them cold cost a third of the step (0.185 ms for 16 heads in cache, 4.55 for 256).
// Measured: 4.47 -> 3.85 ms (best of 10 alternating runs); prefetching the gradients and o for
// writing as well gained nothing.
using gemm_detail::prefetch_rows;

// Head bh's query rows [i0, i0 + rows) and all its key and value rows, prefetched.
inline void prefetch_head(const AttentionLayout& l, int64_t bh, int64_t i0, int64_t rows, const float* q,
                          const float* k, const float* v) {
  const int64_t b = bh / l.H, h = bh % l.H;
  prefetch_rows(rows, l.dk, q + head_at(l.q, b, h) + i0 * l.q.t, l.q.t);
  prefetch_rows(l.Tk, l.dk, k + head_at(l.k, b, h), l.k.t);
  prefetch_rows(l.Tk, l.dv, v + head_at(l.v, b, h), l.v.t);
}

// The transpose of the same: dst[c * ld + r] = src[r * stride + c] for c < cols, r < rows, zero
// from rows to the next whole vector (all the micro-kernel reads as B; the rest of ld is padding).
// With AVX, 8 x 8 blocks are transposed in registers (a scalar transpose of K and V was a fifth of
// the backward at T = 32); the edges are scalar. The zeros go in first, a vector a column that the
// transpose then partly overwrites: zeroing to ld column by column compiled to a library memset call
// per column, 2% of the kernels' time at the small Transformer's shape (T 32, d 32).
template <class Arch>
void pack_transposed(int64_t rows, int64_t cols, const float* src, int64_t stride, int64_t ld, float* dst) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  if (rows % W != 0)
    for (int64_t c = 0; c < cols; ++c) B(0.0f).store_unaligned(dst + c * ld + rows / W * W);
  int64_t r0 = 0;
#if defined(__AVX__)
  for (; r0 + 8 <= rows; r0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= cols; c0 += 8) {
      __m256 x[8], t[8];
      for (int i = 0; i < 8; ++i) x[i] = _mm256_loadu_ps(src + (r0 + i) * stride + c0);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        x[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        x[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        x[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        x[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + (c0 + i) * ld + r0, _mm256_permute2f128_ps(x[i], x[i + 4], 0x20));
        _mm256_storeu_ps(dst + (c0 + i + 4) * ld + r0, _mm256_permute2f128_ps(x[i], x[i + 4], 0x31));
      }
    }
    for (int64_t r = r0; r < r0 + 8; ++r)
      for (int64_t c = c0; c < cols; ++c) dst[c * ld + r] = src[r * stride + c];
  }
#endif
  for (int64_t r = r0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + r] = src[r * stride + c];
}

// y[0, n) = x[0, n), or += when the gradient y already holds one (x null: zeros).
template <class Arch>
TG_INLINE void put_row(int64_t n, const float* x, float* y, bool overwrite) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  if (!x) {
    if (overwrite) std::fill(y, y + n, 0.0f);
    return;
  }
  int64_t c = 0;  // (rows are short: a library memcpy call cost more than the copy)
  if (overwrite) {
    for (; c + W <= n; c += W) B::load_unaligned(x + c).store_unaligned(y + c);
    for (; c < n; ++c) y[c] = x[c];
    return;
  }
  for (; c + W <= n; c += W) (B::load_unaligned(y + c) + B::load_unaligned(x + c)).store_unaligned(y + c);
  for (; c < n; ++c) y[c] += x[c];
}

// y[0, n) = k x[0, n) (x may be y).
template <class Arch>
TG_INLINE void scale_row(int64_t n, const float* x, float k, float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const B kb(k);
  int64_t c = 0;
  for (; c + W <= n; c += W) (B::load_unaligned(x + c) * kb).store_unaligned(y + c);
  for (; c < n; ++c) y[c] = x[c] * k;
}

// x . y over n floats.
template <class Arch>
TG_INLINE float dot(int64_t n, const float* x, const float* y) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B a0(0.0f), a1(0.0f);
  int64_t c = 0;
  for (; c + W <= n; c += W) a0 = xsimd::fma(B::load_unaligned(x + c), B::load_unaligned(y + c), a0);
  if (c < n) a1 = load_tail<Arch>(x + c, n - c, 0.0f) * load_tail<Arch>(y + c, n - c, 0.0f);
  return hsum<Arch>(a0 + a1);
}

// The keys of block [j0, j0 + n) that query row i sees: the first `active` of them.
inline int64_t active_keys(const AttentionLayout& l, int64_t i, int64_t j0, int64_t n) {
  if (!l.causal) return n;
  return std::clamp<int64_t>(i + (l.Tk - l.Tq) + 1 - j0, 0, n);
}

// The first query row that sees key j: causal attention aligns the queries to the last keys.
inline int64_t first_query(const AttentionLayout& l, int64_t j) {
  return l.causal ? std::max<int64_t>(j - (l.Tk - l.Tq), 0) : 0;
}

// The last key (exclusive) any of query rows [i0, i1) sees.
inline int64_t key_end(const AttentionLayout& l, int64_t i1) {
  if (!l.causal) return l.Tk;
  return std::clamp<int64_t>(i1 - 1 + (l.Tk - l.Tq) + 1, 0, l.Tk);
}

// The TileSpans of the products of a block: query rows [i0, i0 + rows) against keys [j0, j0 + n).
// Causal, a tile of query rows [r, r + t) sees the block's first seen(r + t - 1) keys (past them the
// weights P and score gradients dS are zeros), and a tile of keys [r, r + t) is seen from query
// first_query(j0 + r) on. Unmasked, every span is the whole product.
template <class Arch>
struct BlockSpans {
  const AttentionLayout& l;
  int64_t i0, j0, n;
  int64_t seen(int64_t r) const { return active_keys(l, i0 + r, j0, n); }
  // S and dP (query rows x keys): up to the tile's last key, in whole vectors (their buffers have
  // room; the softmax and weights_and_score_grads overwrite what lies past a row's last key).
  auto scores() const {
    return [this](int64_t r, int t) {
      return TileSpan{gemm_detail::round_up(seen(r + t - 1), int64_t(Batch<Arch>::size)), 0, kUnbounded};
    };
  }
  // P V and dS K (query rows, summed over the keys): up to the tile's last key.
  auto over_keys() const {
    return [this](int64_t r, int t) { return TileSpan{kUnbounded, 0, seen(r + t - 1)}; };
  }
  // P^T dO and dS^T Q (key rows, summed over the queries): from the first query that sees them.
  auto over_queries() const {
    return [this](int64_t r, int) { return TileSpan{kUnbounded, first_query(l, j0 + r) - i0, kUnbounded}; };
  }
};

// s[0, n) += mask[0, n), returns max(s[0, n)) (-inf for n == 0).
template <class Arch>
TG_INLINE float mask_max(int64_t n, const float* mask, float* s) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  B m0(-kInf), m1(-kInf);
  int64_t c = 0;
  if (mask) {
    for (; c + W <= n; c += W) {
      const B v = B::load_unaligned(s + c) + B::load_unaligned(mask + c);
      v.store_unaligned(s + c);
      m0 = xsimd::max(m0, v);
    }
    if (c < n) {
      const B v = load_tail<Arch>(s + c, n - c, -kInf) + load_tail<Arch>(mask + c, n - c, 0.0f);
      store_tail<Arch>(s + c, n - c, v);
      m1 = v;
    }
  } else {
    for (; c + W <= n; c += W) m0 = xsimd::max(m0, B::load_unaligned(s + c));
    if (c < n) m1 = load_tail<Arch>(s + c, n - c, -kInf);
  }
  return hmax<Arch>(xsimd::max(m0, m1));
}

// s[c] = exp(s[c] - shift) for c < n (every s[c] <= shift), returns their sum: softmax's pass, in place.
template <class Arch>
TG_INLINE float exp_sum(int64_t n, float shift, float* s) {
  return exp_shift_sum<Arch, true>(s, shift, n, s);
}

// The dropout mask of weights (b, h, i, j0 ..), drawn as the dropout kernel draws it for the
// contiguous [B, H, Tq, Tk] weights (AttentionLayout::dropout).
template <class Arch>
TG_INLINE KeepStream<Arch> weight_keeps(const AttentionLayout& l, int64_t b, int64_t h, int64_t i, int64_t j0) {
  return KeepStream<Arch>(l.dropout_seed, uint64_t(((b * l.H + h) * l.Tq + i) * l.Tk + j0), l.dropout);
}

// Weights w[c] of row i (key j0 + c) times their dropout factor (0 or 1 / (1 - p)).
template <class Arch>
TG_INLINE void apply_dropout(const AttentionLayout& l, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                             float* w) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  KeepStream<Arch> keep = weight_keeps<Arch>(l, b, h, i, j0);
  const B scale(float(1.0 / (1.0 - l.dropout)));
  int64_t c = 0;
  for (; c + W <= n; c += W)
    xsimd::select(keep.next(), B::load_unaligned(w + c) * scale, B(0.0f)).store_unaligned(w + c);
  if (c < n) store_tail<Arch>(w + c, n - c, xsimd::select(keep.next(), load_tail<Arch>(w + c, n - c, 0.0f) * scale, B(0.0f)));
}

// inv[r] = 1 / l[r] for r < n, W rows at a time.
template <class Arch>
TG_INLINE void reciprocals(int64_t n, const float* l, float* inv) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  int64_t r = 0;
  for (; r + W <= n; r += W) (B(1.0f) / B::load_unaligned(l + r)).store_unaligned(inv + r);
  if (r < n) store_tail<Arch>(inv + r, n - r, B(1.0f) / load_tail<Arch>(l + r, n - r, 1.0f));
}

// lse[r] = m[r] + log l[r] for r < n, W rows at a time; +inf where l[r] == 0 or for every row when
// none saw a key. One vector log for W rows where a library logf per row cost 2.5% of the kernels
// at the small Transformer's shape.
template <class Arch>
TG_INLINE void row_lse(int64_t n, bool no_keys, const float* m, const float* l, float* lse) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  auto one = [&](const B& mv, const B& lv) {
    return no_keys ? B(kInf) : xsimd::select(lv == B(0.0f), B(kInf), mv + xsimd::log(lv));
  };
  int64_t r = 0;
  for (; r + W <= n; r += W) one(B::load_unaligned(m + r), B::load_unaligned(l + r)).store_unaligned(lse + r);
  if (r < n)
    store_tail<Arch>(lse + r, n - r,
                     one(load_tail<Arch>(m + r, n - r, 0.0f), load_tail<Arch>(l + r, n - r, 1.0f)));
}

// ---------------------------------------------------------------------------------------------
// The forward of short heads, keys-major. A head that direct_heads reads in place (one query block,
// one key block) and whose queries fill whole vectors (Tq a multiple of W: the small Transformer's
// encoder at T 32, the GPT recipe's T 64) computes its scores transposed, S^T = scale K Q^T, keys
// down and queries across, so each query's softmax runs down a column with W queries in the lanes
// of a vector: the maximum, the exponentials, the sum, the division and the dropout are vertical
// operations and lse is stored as vectors, where the row-major loop reduces every row across its
// lanes twice (max and sum: chains of shuffles) and pays a loop per row. o = P V then reads P^T in
// place as A^T. Paired runs of the kernels alone (both builds at once, one on each Zen 5 core, then
// swapped; two rounds): the forward at 64 x 4 heads of 32, T 32, 1.23x faster (causal 1.28x), at
// 12 x 4 heads of 32, T 64, 1.06x (causal 1.03x), at 8 heads of 64, T 64, 1.04x; on the AVX2 path
// (TAPEGRAD_ARCH=avx2, the same machine) 1.11x (causal 1.22x), 1.04x and 1.035x.
// Not taken: a ragged last column (the decoder's T 33: 3 vectors for 33 queries, and a 1-column tile
// of S^T that costs half a full one) ran the forward 0.90x (Tq 33, Tk 32) and 0.98x (causal 33);
// and the backward keys-major (dP^T = V dO^T, P^T and dS^T down the columns, dV = P^T dO, dK =
// scale dS^T Q, dQ = scale dS K with dS^T as A^T) ran 1.00-1.01x unmasked and 0.81-0.89x causal,
// where the row-major backward skips the scores past the diagonal tile by tile (TileSpan) and the
// keys-major S^T cannot skip the queries before it.

// Whether the mask differs between a head's queries (then the keys-major forward transposes it).
inline bool mask_varies_by_query(const AttentionLayout& l) {
  return l.mask && l.mask_strides.t != 0 && l.Tq > 1;
}

// The mask of one head's keys-major scores: masked(s, j, c, queries) is row j (key j) of the scores
// for the queries [c, c + W) (their indices as floats in `queries`), plus the additive mask, and
// -inf where causality hides key j from a query.
template <class Arch>
struct KeysMajorMask {
  using B = Batch<Arch>;
  const float* per_key = nullptr;     // the mask row, when every query shares it, or null
  const float* transposed = nullptr;  // else the head's mask transposed, [Tk x ld], or null
  int64_t ld = 0;
  bool causal = false;
  int64_t offset = 0;  // Tk - Tq: query i sees key j when j <= i + offset
  TG_INLINE B masked(const B& s, int64_t j, int64_t c, const B& queries) const {
    B x = s;
    if (per_key)
      x += B(per_key[j]);
    else if (transposed)
      x += B::load_unaligned(transposed + j * ld + c);
    if (causal) x = xsimd::select(queries >= B(float(j - offset)), x, B(-kInf));
    return x;
  }
  bool any() const { return per_key || transposed || causal; }
};

// Head (b, h)'s KeysMajorMask; a mask that varies by query is transposed into `scratch` ([Tk x ld]).
template <class Arch>
KeysMajorMask<Arch> keys_major_mask(const AttentionLayout& l, int64_t b, int64_t h, int64_t ld,
                                    float* scratch) {
  KeysMajorMask<Arch> m;
  m.ld = ld, m.causal = l.causal, m.offset = l.Tk - l.Tq;
  if (l.mask) {
    const float* row0 = static_cast<const float*>(l.mask) + head_at(l.mask_strides, b, h);
    if (mask_varies_by_query(l))
      pack_transposed<Arch>(l.Tq, l.Tk, row0, l.mask_strides.t, ld, scratch), m.transposed = scratch;
    else
      m.per_key = row0;
  }
  return m;
}

// Whether the keys-major forward takes these heads.
template <class Arch>
bool keys_major(const AttentionLayout& l) {
  return direct_heads<Arch>(l) && l.Tq % int64_t(Batch<Arch>::size) == 0 && l.Tk > 0;
}

// The query indices [c, c + W) as floats.
template <class Arch>
TG_INLINE Batch<Arch> query_lanes(int64_t c) {
  alignas(64) static constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return Batch<Arch>::load_aligned(kIota) + Batch<Arch>(float(c));
}

// The dropout keep masks of the queries [c, c + W) of head bh, key after key: weight (bh, i, j)
// draws counter (bh Tq + i) Tk + j, as the row-major path and the dropout kernel do.
template <class Arch>
KeepStream<Arch> column_keeps(const AttentionLayout& l, int64_t bh, int64_t c) {
  return KeepStream<Arch>(l.dropout_seed, uint64_t((bh * l.Tq + c) * l.Tk), l.dropout, l.Tk, 1);
}

// Forward of one thread's heads [bh0, bh1), keys-major (see above): per head, Q^T packed, S^T =
// scale K Q^T, then each column of W queries: the running maximum down the keys, exp(s - max) and
// its sum, each weight divided by the sum and dropped out; lse = max + log sum; o = P V.
template <class Arch>
void sdpa_forward_keys_major(const AttentionLayout& l, const float* q, const float* k, const float* v,
                             float* o, float* lse) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const int64_t heads = l.B * l.H, ld = key_block_ld<Arch>(l.Tq);
  const float scale = float(l.scale);
  const int nt = team_for(heads * l.Tq * l.Tk * (l.dk + l.dv), heads);
  parallel_ranges(heads, nt, [&](int64_t bh0, int64_t bh1) {
    const ThreadBuffers<3> buf({l.dk * ld, l.Tk * ld, mask_varies_by_query(l) ? l.Tk * ld : 0});
    float *qt = buf[0], *s = buf[1], *mt = buf[2];
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / l.H, h = bh % l.H;
      const float* qh = q + head_at(l.q, b, h);
      const float* kh = k + head_at(l.k, b, h);
      const float* vh = v + head_at(l.v, b, h);
      if (bh + 1 < bh1) prefetch_head(l, bh + 1, 0, l.Tq, q, k, v);  // the next head, while this one computes
      // S^T = scale K Q^T [Tk x Tq]
      if (l.dk > 0) {
        pack_transposed<Arch>(l.Tq, l.dk, qh, l.q.t, ld, qt);
        tile_gemm<Arch, false>(l.Tk, l.Tq, l.dk, scale, kh, l.k.t, qt, ld, 0.0f, s, ld);
      } else {
        std::fill(s, s + l.Tk * ld, 0.0f);
      }
      const KeysMajorMask<Arch> mask = keys_major_mask<Arch>(l, b, h, ld, mt);
      for (int64_t c = 0; c < l.Tq; c += W) {
        const B queries = query_lanes<Arch>(c);
        B m(-kInf);
        for (int64_t j = 0; j < l.Tk; ++j) {
          float* sj = s + j * ld + c;
          B x = B::load_unaligned(sj);
          if (mask.any()) x = mask.masked(x, j, c, queries), x.store_unaligned(sj);
          m = xsimd::max(m, x);
        }
        // (a query with no key to see: its max -inf, its weights exp(-inf - 0) = 0, its sum 0)
        const B shift = xsimd::select(m == B(-kInf), B(0.0f), m);
        B sum0(0.0f), sum1(0.0f);
        int64_t j = 0;
        for (; j + 2 <= l.Tk; j += 2) {
          float *s0 = s + j * ld + c, *s1 = s0 + ld;
          B e[2] = {B::load_unaligned(s0) - shift, B::load_unaligned(s1) - shift};
          exp_nonpositive_n<Arch, true, 2>(e);
          e[0].store_unaligned(s0), e[1].store_unaligned(s1);
          sum0 += e[0], sum1 += e[1];
        }
        if (j < l.Tk) {
          float* sj = s + j * ld + c;
          const B e = exp_nonpositive<Arch>(B::load_unaligned(sj) - shift);
          e.store_unaligned(sj);
          sum0 += e;
        }
        const B sum = sum0 + sum1;
        const auto none = sum == B(0.0f);
        xsimd::select(none, B(kInf), m + xsimd::log(sum)).store_unaligned(lse + bh * l.Tq + c);
        const B inv = xsimd::select(none, B(0.0f), B(1.0f) / sum);
        if (l.dropout > 0) {
          KeepStream<Arch> keep = column_keeps<Arch>(l, bh, c);
          const B kept = inv * B(float(1.0 / (1.0 - l.dropout)));
          for (int64_t jj = 0; jj < l.Tk; ++jj) {
            float* sj = s + jj * ld + c;
            xsimd::select(keep.next(), B::load_unaligned(sj) * kept, B(0.0f)).store_unaligned(sj);
          }
        } else {
          for (int64_t jj = 0; jj < l.Tk; ++jj) {
            float* sj = s + jj * ld + c;
            (B::load_unaligned(sj) * inv).store_unaligned(sj);
          }
        }
      }
      // o = P V: P^T read as A^T; causal, each tile of queries sums only the keys it sees
      const BlockSpans<Arch> spans{l, 0, 0, l.Tk};
      tile_gemm<Arch, true>(l.Tq, l.dv, l.Tk, 1.0f, s, ld, vh, l.v.t, 0.0f, o + head_at(l.o, b, h), l.o.t,
                            spans.over_keys());
    }
  });
}

template <class Arch>
void sdpa_forward_f32(const AttentionLayout& l, const float* q, const float* k, const float* v, float* o,
                      float* lse) {
  constexpr int64_t W = Batch<Arch>::size;
  if (l.B <= 0 || l.H <= 0 || l.Tq <= 0 || l.dv <= 0) return;
  if (keys_major<Arch>(l)) return sdpa_forward_keys_major<Arch>(l, q, k, v, o, lse);
  const int64_t heads = l.B * l.H, qblocks = (l.Tq + kQueryBlock - 1) / kQueryBlock;
  const int64_t dvp = gemm_detail::round_up(l.dv, W), kb = std::min(kKeyBlock, std::max<int64_t>(l.Tk, 1));
  const int64_t kbp = key_block_ld<Arch>(kb);
  const float scale = float(l.scale);
  const float* mask_base = static_cast<const float*>(l.mask);
  // All keys in one block: each row's max and sum are final after it, so the weights are divided
  // by the sum before P V, which writes o itself (no accumulator, no rescale), and V whose rows are
  // whole vectors is read in place (see direct_heads).
  const bool one_block = l.Tk <= kKeyBlock;
  const bool v_in_place = direct_heads<Arch>(l);
  const int nt = team_for(heads * l.Tq * std::max<int64_t>(l.Tk, 1) * (l.dk + l.dv), heads * qblocks);
  parallel_ranges(heads * qblocks, nt, [&](int64_t item0, int64_t item1) {
    // (V read in place needs no copy, and one key block no accumulator: P V goes straight to o)
    // K^T and V of the thread's current head, packed a key block at a time as its first query block
    // reaches it and kept for the head's other query blocks.
    const int64_t kblocks = (l.Tk + kb - 1) / kb, kt_block = std::max<int64_t>(l.dk, 1) * kbp;
    const ThreadBuffers<8> buf({kblocks * kt_block, v_in_place ? 0 : kblocks * kb * dvp, kQueryBlock * kbp,
                                one_block ? 0 : kQueryBlock * dvp, kQueryBlock, kQueryBlock, kQueryBlock,
                                kQueryBlock});
    float *kt = buf[0], *vp = buf[1], *s = buf[2], *acc = buf[3], *mrow = buf[4], *lrow = buf[5],
          *inv = buf[6], *bmax = buf[7];
    int64_t packed_head = -1, packed_blocks = 0;
    for (int64_t item = item0; item < item1; ++item) {
      const int64_t bh = item / qblocks, b = bh / l.H, h = bh % l.H;
      const int64_t i0 = (item % qblocks) * kQueryBlock, rows = std::min(kQueryBlock, l.Tq - i0);
      const float* qb = q + head_at(l.q, b, h) + i0 * l.q.t;
      const float* kh = k + head_at(l.k, b, h);
      const float* vh = v + head_at(l.v, b, h);
      if (item + 1 < item1 && l.Tk <= kKeyBlock) {  // the next head's rows, while this one computes
        const int64_t ni0 = ((item + 1) % qblocks) * kQueryBlock;
        prefetch_head(l, (item + 1) / qblocks, ni0, std::min(kQueryBlock, l.Tq - ni0), q, k, v);
      }
      if (bh != packed_head) packed_head = bh, packed_blocks = 0;
      std::fill(mrow, mrow + rows, -kInf);
      std::fill(lrow, lrow + rows, 0.0f);
      const int64_t jend = key_end(l, i0 + rows);
      for (int64_t j0 = 0; j0 < jend; j0 += kb) {
        const int64_t n = std::min(kb, jend - j0), jb = j0 / kb;
        float* ktb = kt + jb * kt_block;
        float* vpb = vp + jb * kb * dvp;
        if (jb == packed_blocks) {  // K^T (the micro-kernel's B) and V of the whole block
          const int64_t all = std::min(kb, l.Tk - j0);
          pack_transposed<Arch>(all, l.dk, kh + j0 * l.k.t, l.k.t, kbp, ktb);
          if (!v_in_place) pack_rows<Arch>(all, l.dv, vh + j0 * l.v.t, l.v.t, dvp, vpb);
          ++packed_blocks;
        }
        const BlockSpans<Arch> spans{l, i0, j0, n};  // causal: the masked part is not computed
        // S = scale * Q K^T for this block
        if (l.dk > 0)
          tile_gemm<Arch, false>(rows, n, l.dk, scale, qb, l.q.t, ktb, kbp, 0.0f, s, kbp, spans.scores());
        else
          for (int64_t r = 0; r < rows; ++r) std::fill(s + r * kbp, s + r * kbp + n, 0.0f);
        // Online softmax: row r's running max m and sum l; its partial output rescaled when m grows.
        // The block's row maxima first, in a pass of their own: each row's exp waits for its max's
        // horizontal reduction, and with both in one loop that chain ran row after row (the forward
        // at the small Transformer's shape, operands in cache, 1.05x faster so).
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          const float* mr =
              mask_base ? mask_base + head_at(l.mask_strides, b, h) + i * l.mask_strides.t + j0
                        : nullptr;
          bmax[r] = mask_max<Arch>(active_keys(l, i, j0, n), mr, s + r * kbp);
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r, active = active_keys(l, i, j0, n);
          float* sr = s + r * kbp;
          const float m_new = std::max(mrow[r], bmax[r]);
          if (m_new == -kInf) {  // nothing seen yet: the row contributes zeros
            std::fill(sr, sr + n, 0.0f);
            continue;
          }
          const float sum = exp_sum<Arch>(active, m_new, sr);
          if (active < n) std::fill(sr + active, sr + n, 0.0f);
          const float rescale = j0 > 0 ? std::exp(mrow[r] - m_new) : 0.0f;  // 0 on the row's first keys
          if (j0 > 0 && rescale != 1.0f) scale_row<Arch>(dvp, acc + r * dvp, rescale, acc + r * dvp);
          lrow[r] = lrow[r] * rescale + sum;
          mrow[r] = m_new;
          if (l.dropout > 0) apply_dropout<Arch>(l, b, h, i, j0, active, sr);
        }
        if (one_block) {  // P / l, the rows' reciprocals as vectors (a divide per row sat on its chain)
          reciprocals<Arch>(rows, lrow, inv);
          for (int64_t r = 0; r < rows; ++r)
            if (lrow[r] != 0.0f)
              scale_row<Arch>(active_keys(l, i0 + r, j0, n), s + r * kbp, inv[r], s + r * kbp);
        }
        // O += P V (one block: O = P V, P already divided by the row sums)
        const float* vb = vh + j0 * l.v.t;
        int64_t ldv = l.v.t;
        if (!v_in_place) vb = vpb, ldv = dvp;
        if (one_block)
          tile_gemm<Arch, false>(rows, l.dv, n, 1.0f, s, kbp, vb, ldv, 0.0f,
                                 o + head_at(l.o, b, h) + i0 * l.o.t, l.o.t, spans.over_keys());
        else
          tile_gemm<Arch, false>(rows, l.dv, n, 1.0f, s, kbp, vb, ldv, j0 > 0 ? 1.0f : 0.0f, acc, dvp,
                                 spans.over_keys());
      }
      // lse = m + log l, or +inf for a row that saw no key (its o zeros, as softmax defines such a row)
      row_lse<Arch>(rows, jend == 0, mrow, lrow, lse + bh * l.Tq + i0);
      if (!one_block) reciprocals<Arch>(rows, lrow, inv);
      for (int64_t r = 0; r < rows; ++r) {
        float* orow = o + head_at(l.o, b, h) + (i0 + r) * l.o.t;
        if (lrow[r] == 0.0f || jend == 0)
          std::fill(orow, orow + l.dv, 0.0f);
        else if (!one_block)
          scale_row<Arch>(l.dv, acc + r * dvp, inv[r], orow);
      }
    }
  });
}

// One (query block, key block) tile of the backward, in place: p holds s = scale * Q K^T and
// becomes the weights P (dropout applied), ds holds dP = dO V^T and becomes dS = w (drop'(dP) - D).
template <class Arch>
void weights_and_score_grads(const AttentionLayout& l, int64_t b, int64_t h, int64_t i0, int64_t rows,
                             int64_t j0, int64_t n, int64_t kbp, const float* lse, const float* D, float* p,
                             float* ds) {
  using B = Batch<Arch>;
  constexpr int64_t W = B::size;
  const float* mask_base = static_cast<const float*>(l.mask);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, active = active_keys(l, i, j0, n);
    float *pr = p + r * kbp, *dr = ds + r * kbp;
    const float row_lse = lse[i];
    if (row_lse == kInf || active == 0) {  // a row of zeros, or keys it does not see: no gradient
      std::fill(pr, pr + n, 0.0f);
      std::fill(dr, dr + n, 0.0f);
      continue;
    }
    const float* mr =
        mask_base ? mask_base + head_at(l.mask_strides, b, h) + i * l.mask_strides.t + j0
                  : nullptr;
    const B sh(row_lse), dd(D[i]);
    const bool dropout = l.dropout > 0;
    // w = exp(s + mask - lse) (s <= lse up to rounding), ds = w (dp - D); the tail padded.
    auto step = [&](const B& s_in, const B& mask_v, const B& dp, B& w, B& g) {
      w = exp_nonpositive<Arch>(xsimd::min(s_in + mask_v - sh, B(0.0f)));
      g = w * (dp - dd);
    };
    int64_t c = 0;
    for (; c + W <= active; c += W) {
      B w, g;
      step(B::load_unaligned(pr + c), mr ? B::load_unaligned(mr + c) : B(0.0f), B::load_unaligned(dr + c), w,
           g);
      w.store_unaligned(pr + c);
      if (!dropout) g.store_unaligned(dr + c);
    }
    if (c < active) {
      const int64_t m = active - c;
      B w, g;
      step(load_tail<Arch>(pr + c, m, -kInf), mr ? load_tail<Arch>(mr + c, m, 0.0f) : B(0.0f),
           load_tail<Arch>(dr + c, m, 0.0f), w, g);
      store_tail<Arch>(pr + c, m, w);
      if (!dropout) store_tail<Arch>(dr + c, m, g);
    }
    if (dropout) {  // dS = w (f dP - D) with the weight's dropout factor f, and P = f w
      KeepStream<Arch> keep = weight_keeps<Arch>(l, b, h, i, j0);
      const B kept(float(1.0 / (1.0 - l.dropout)));
      auto drop = [&](const B& w, const B& dp, B& pw, B& g) {
        const B f = xsimd::select(keep.next(), kept, B(0.0f));
        g = w * (f * dp - dd);
        pw = w * f;
      };
      int64_t c = 0;
      for (; c + W <= active; c += W) {
        B pw, g;
        drop(B::load_unaligned(pr + c), B::load_unaligned(dr + c), pw, g);
        pw.store_unaligned(pr + c);
        g.store_unaligned(dr + c);
      }
      if (c < active) {
        const int64_t m = active - c;
        B pw, g;
        drop(load_tail<Arch>(pr + c, m, 0.0f), load_tail<Arch>(dr + c, m, 0.0f), pw, g);
        store_tail<Arch>(pr + c, m, pw);
        store_tail<Arch>(dr + c, m, g);
      }
    }
    if (active < n) std::fill(pr + active, pr + n, 0.0f), std::fill(dr + active, dr + n, 0.0f);
  }
}

template <class Arch>
void sdpa_backward_f32(const AttentionLayout& l, const float* q, const float* k, const float* v,
                       const float* o, const float* lse, const float* dout, GradOutput<float> dq_out,
                       GradOutput<float> dk_out, GradOutput<float> dv_out) {
  constexpr int64_t W = Batch<Arch>::size;
  float *dq = dq_out.data, *dk = dk_out.data, *dv = dv_out.data;
  if (l.B <= 0 || l.H <= 0 || l.Tq <= 0 || (!dq && !dk && !dv)) return;
  if (l.Tk <= 0) {  // no keys: dq is zero (dk, dv are empty)
    for (int64_t bh = 0; dq && bh < l.B * l.H; ++bh)
      for (int64_t i = 0; i < l.Tq; ++i)
        put_row<Arch>(l.dk, nullptr, dq + (bh / l.H) * l.dq.b + (bh % l.H) * l.dq.h + i * l.dq.t,
                      dq_out.overwrite);
    return;
  }
  const int64_t heads = l.B * l.H, dkp = gemm_detail::round_up(std::max<int64_t>(l.dk, 1), W);
  const int64_t dvp = gemm_detail::round_up(std::max<int64_t>(l.dv, 1), W);
  const int64_t kb = std::min(kKeyBlock, l.Tk), kbp = key_block_ld<Arch>(kb);
  const int64_t qb = std::min(kQueryBlock, l.Tq);
  const float scale = float(l.scale);
  // dK and dV are summed over the query blocks straight into the outputs; dQ too when there is one
  // key block (else in an accumulator over the key blocks). Short heads read Q, K, dO in place.
  const bool dq_direct = l.Tk <= kb;
  const bool in_place = direct_heads<Arch>(l);
  const int nt = team_for(heads * l.Tq * l.Tk * (l.dk + l.dv) * 2, heads);
  parallel_ranges(heads, nt, [&](int64_t bh0, int64_t bh1) {
    // Per head: Q, K, dO packed row-major (unless short), dQ's accumulator (several key blocks), D.
    // Per key block: K^T, V^T. Per tile: P and dS.
    const ThreadBuffers<9> buf({in_place ? 0 : l.Tq * dkp, in_place ? 0 : l.Tk * dkp,
                                in_place ? 0 : l.Tq * dvp, dq_direct ? 0 : l.Tq * dkp, l.Tq, dkp * kbp,
                                dvp * kbp, qb * kbp, qb * kbp});
    float *qp = buf[0], *kp = buf[1], *dop = buf[2], *dqacc = buf[3], *D = buf[4];
    float *kt = buf[5], *vt = buf[6], *p = buf[7], *ds = buf[8];
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / l.H, h = bh % l.H;
      const float* qh = q + head_at(l.q, b, h);
      const float* kh = k + head_at(l.k, b, h);
      const float* vh = v + head_at(l.v, b, h);
      const float* oh = o + head_at(l.o, b, h);
      const float* doh = dout + head_at(l.o, b, h);
      const float* lse_h = lse + bh * l.Tq;
      if (bh + 1 < bh1 && l.Tq <= kQueryBlock && l.Tk <= kKeyBlock) {  // the next head's rows, as forward
        const int64_t nb = (bh + 1) / l.H, nh = (bh + 1) % l.H;
        prefetch_head(l, bh + 1, 0, l.Tq, q, k, v);
        prefetch_rows(l.Tq, l.dv, o + head_at(l.o, nb, nh), l.o.t);
        prefetch_rows(l.Tq, l.dv, dout + head_at(l.o, nb, nh), l.o.t);
      }
      // Q, K, dO packed dense unless short (see direct_heads): read in place, rows a power-of-two
      // stride apart (2 KiB for 8 heads of 64) fall into a few L1 sets and evict each other
      // (measured: a third slower at T = 512).
      const float *qr = qh, *kr = kh, *dor = doh;
      int64_t ldq = l.q.t, ldk = l.k.t, ldo = l.o.t;
      if (!in_place) {
        pack_rows<Arch>(l.Tq, l.dk, qh, l.q.t, dkp, qp);
        pack_rows<Arch>(l.Tk, l.dk, kh, l.k.t, dkp, kp);
        pack_rows<Arch>(l.Tq, l.dv, doh, l.o.t, dvp, dop);
        qr = qp, kr = kp, dor = dop, ldq = dkp, ldk = dkp, ldo = dvp;
      }
      for (int64_t i = 0; i < l.Tq; ++i)
        D[i] = dot<Arch>(l.dv, doh + i * l.o.t, oh + i * l.o.t);  // D_i = dO_i . o_i
      if (!dq_direct) std::fill(dqacc, dqacc + l.Tq * dkp, 0.0f);
      float* dqh = dq ? dq + head_at(l.dq, b, h) : nullptr;
      const float dq_beta = dq_out.overwrite ? 0.0f : 1.0f;
      for (int64_t j0 = 0; j0 < l.Tk; j0 += kb) {
        const int64_t n = std::min(kb, l.Tk - j0);
        pack_transposed<Arch>(n, l.dk, kh + j0 * l.k.t, l.k.t, kbp, kt);
        pack_transposed<Arch>(n, l.dv, vh + j0 * l.v.t, l.v.t, kbp, vt);
        float* dkb = dk ? dk + head_at(l.dk_, b, h) + j0 * l.dk_.t : nullptr;
        float* dvb = dv ? dv + head_at(l.dv_, b, h) + j0 * l.dv_.t : nullptr;
        bool first = true;  // the first tile to reach the block's dK, dV writes them (or adds)
        for (int64_t i0 = 0; i0 < l.Tq; i0 += qb) {
          const int64_t rows = std::min(qb, l.Tq - i0);
          if (key_end(l, i0 + rows) <= j0) {           // causal: no row of the block sees these keys
            if (dqh && dq_direct && dq_out.overwrite)  // (one key block: these rows see none)
              for (int64_t i = i0; i < i0 + rows; ++i) put_row<Arch>(l.dk, nullptr, dqh + i * l.dq.t, true);
            continue;
          }
          // S = scale * Q K^T -> p, dP = dO V^T -> ds (an empty dk or dv leaves zeros)
          if (l.dk == 0) std::fill(p, p + rows * kbp, 0.0f);
          if (l.dv == 0) std::fill(ds, ds + rows * kbp, 0.0f);
          const BlockSpans<Arch> spans{l, i0, j0, n};  // causal: the masked part is not computed
          tile_gemm<Arch, false>(rows, n, l.dk, scale, qr + i0 * ldq, ldq, kt, kbp, 0.0f, p, kbp,
                                 spans.scores());
          tile_gemm<Arch, false>(rows, n, l.dv, 1.0f, dor + i0 * ldo, ldo, vt, kbp, 0.0f, ds, kbp,
                                 spans.scores());
          weights_and_score_grads<Arch>(l, b, h, i0, rows, j0, n, kbp, lse_h, D, p, ds);
          const float dv_beta = first && dv_out.overwrite ? 0.0f : 1.0f;
          const float dk_beta = first && dk_out.overwrite ? 0.0f : 1.0f;
          if (dv)
            tile_gemm<Arch, true>(n, l.dv, rows, 1.0f, p, kbp, dor + i0 * ldo, ldo, dv_beta, dvb, l.dv_.t,
                                  spans.over_queries());
          if (dk)
            tile_gemm<Arch, true>(n, l.dk, rows, scale, ds, kbp, qr + i0 * ldq, ldq, dk_beta, dkb, l.dk_.t,
                                  spans.over_queries());
          if (dq && dq_direct)
            tile_gemm<Arch, false>(rows, l.dk, n, scale, ds, kbp, kr + j0 * ldk, ldk, dq_beta,
                                   dqh + i0 * l.dq.t, l.dq.t, spans.over_keys());
          else if (dq)
            tile_gemm<Arch, false>(rows, dkp, n, scale, ds, kbp, kr + j0 * ldk, ldk, 1.0f, dqacc + i0 * dkp,
                                   dkp, spans.over_keys());
          first = false;
        }
        if (first)  // causal, no query sees these keys: their gradients are zero
          for (int64_t j = 0; j < n; ++j) {
            if (dv) put_row<Arch>(l.dv, nullptr, dvb + j * l.dv_.t, dv_out.overwrite);
            if (dk) put_row<Arch>(l.dk, nullptr, dkb + j * l.dk_.t, dk_out.overwrite);
          }
      }
      if (dq && !dq_direct)
        for (int64_t i = 0; i < l.Tq; ++i)
          put_row<Arch>(l.dk, dqacc + i * dkp, dqh + i * l.dq.t, dq_out.overwrite);
    }
  });
}

// The float32 versions of these kernel-list rows.
TG_SIMD_KERNEL(sdpa_forward, sdpa_forward_f32)
TG_SIMD_KERNEL(sdpa_backward, sdpa_backward_f32)

}  // namespace
}  // namespace tapegrad::kernels::simd

TG_SIMD_SILENCE_GCC_PR105593_END
