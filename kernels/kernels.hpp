// The narrow interface between tapegrad's ops and its compute kernels.
//
// Everything here works on raw, contiguous (or explicitly strided) buffers of float or double: no
// Tensor type, no autograd, no allocation visible to the caller. Each function is defined for
// T = float and T = double. float calls go through the dispatch table (kernels/dispatch.cpp), which
// picks the best SIMD path the machine has at start-up (AVX-512, AVX2+FMA, SSE2) or the scalar
// reference in kernels/ref/; double calls use the reference, except GEMM, which has its own path.
//
// Conventions: row-major; sizes are int64_t; "rows x cols" means `rows` contiguous rows of `cols`.
// Backward kernels *accumulate* into their gradient outputs (dx += ...), so a tensor used twice
// gets both contributions; forward kernels overwrite their outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tapegrad::kernels {

// ---------------------------------------------------------------------------------------------
// Run-time configuration.

enum class Isa { scalar, sse2, avx2, avx512 };

const char* isa_name(Isa isa);
// The instruction set in use: the best the machine has, or TAPEGRAD_ARCH if set (never above what
// the machine supports; an unknown or unsupported name throws std::runtime_error at first use).
Isa active_isa();
// Every instruction set this machine can run, lowest first (always includes scalar).
std::vector<Isa> available_isas();
// Switches the path for the whole process (tests iterate the available ones). Throws if unsupported.
void set_isa(Isa isa);

// OpenMP thread count used by every kernel: TAPEGRAD_THREADS, else the OpenMP default.
int num_threads();
void set_num_threads(int n);

// Cache sizes in bytes as read from the OS at start-up (sensible defaults if unreadable).
struct CacheInfo {
  int64_t l1d = 48 * 1024, l2 = 1024 * 1024, l3 = 32 * 1024 * 1024;
};
const CacheInfo& cache_info();

// ---------------------------------------------------------------------------------------------
// GEMM: C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. op(A) is M x K, op(B) is K x N,
// C is M x N. Leading dimensions are row strides of the stored (untransposed) matrices.
// When beta == 0, C is not read (NaNs in C do not propagate).

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// op(B) (K x N) packed once for many GEMMs that share it, such as a recurrent weight used at every
// time step: the panels each gemm call would otherwise pack afresh. packed_b_size gives the elements
// the packing needs (0: the active path packs nothing) and pack_b fills a caller's buffer of that
// size (64-byte aligned). The panels belong to the instruction set active at pack_b; on another one
// gemm_packed_b reads `source` instead. B's storage and values, and the buffer, must stay unchanged
// while the PackedB is in use.
template <class T>
struct PackedB {
  bool trans = false;
  int64_t K = 0, N = 0, ld = 0;
  const T* source = nullptr;
  Isa isa = Isa::scalar;
  const T* panels = nullptr;  // null if nothing was packed
};
template <class T>
int64_t packed_b_size(int64_t K, int64_t N);
template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb, T* buffer);
// C = alpha * op(A) * op(B) + beta * C with op(B) from pack_b (M x K times B.K x B.N).
template <class T>
void gemm_packed_b(bool trans_a, int64_t M, T alpha, const T* A, int64_t lda, const PackedB<T>& B, T beta, T* C,
                   int64_t ldc);

// `batch` independent GEMMs; matrix i uses A + i*stride_a, B + i*stride_b, C + i*stride_c.
// A stride of 0 broadcasts that operand over the batch.
template <class T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb, int64_t stride_b,
                  T beta, T* C, int64_t ldc, int64_t stride_c);

// ---------------------------------------------------------------------------------------------
// Elementwise.

enum class Unary { neg, exp, log, sqrt, abs, tanh, sigmoid, relu, gelu_tanh, gelu_erf };
enum class Binary { add, sub, mul, div, pow };

// y[i] = f(x[i])
template <class T>
void unary(Unary op, int64_t n, const T* x, T* y);
// dx[i] += dy[i] * f'(x[i]); y = f(x) is passed because several derivatives are cheaper from it.
template <class T>
void unary_backward(Unary op, int64_t n, const T* x, const T* y, const T* dy, T* dx);

// y = x * scale + shift, elementwise (covers scalar add/mul and their backwards when accumulate).
template <class T>
void affine(int64_t n, const T* x, T scale, T shift, T* y, bool accumulate);
// y[i] = pow(x[i], p); backward: dx += dy * p * pow(x, p-1)
template <class T>
void pow_scalar(int64_t n, const T* x, T p, T* y);
template <class T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* dy, T* dx);

// Broadcasting binary op over an nd index space `shape` (ndim <= 8); a_strides / b_strides are in
// elements, 0 on broadcast dimensions; y is contiguous in `shape`. Fast paths inside for
// same-shape, scalar and row-broadcast operands.
template <class T>
void binary(Binary op, int ndim, const int64_t* shape, const T* a, const int64_t* a_strides, const T* b,
            const int64_t* b_strides, T* y);

// Gradients of y = a op b w.r.t. a (which = 0) or b (which = 1), *before* any broadcast reduction:
// g[i] = dy[i] * d(a op b)/d(operand) at index i, written (not accumulated) to g, contiguous in shape.
template <class T>
void binary_backward(Binary op, int which, int ndim, const int64_t* shape, const T* a,
                     const int64_t* a_strides, const T* b, const int64_t* b_strides, const T* dy, T* g);

// out[map(i)] += x[i] over the index space `shape`, where out_strides are 0 on the dimensions being
// reduced: the adjoint of broadcasting (sum over broadcast dimensions). out is accumulated.
template <class T>
void sum_to(int ndim, const int64_t* shape, const T* x, const int64_t* out_strides, T* out);

// Strided copy of an nd array into a contiguous buffer (contiguous(), permute, slices).
template <class T>
void copy_strided(int ndim, const int64_t* shape, const T* x, const int64_t* x_strides, T* y);
// y = cond != 0 ? a : b over the index space `shape`, all three strided (0 on broadcast dims); y contiguous.
template <class T>
void where(int ndim, const int64_t* shape, const T* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* y);

// The adjoint of copy_strided: x_grad (strided) += y_grad (contiguous).
template <class T>
void add_strided(int ndim, const int64_t* shape, const T* dy, T* dx, const int64_t* dx_strides);

template <class T>
void fill(int64_t n, T value, T* y);

// ---------------------------------------------------------------------------------------------
// Reductions over the last axis of an (outer x n x inner) view: y[o, i] = reduce_k x[o, k, i].

template <class T>
void sum_axis(int64_t outer, int64_t n, int64_t inner, const T* x, T* y);
// Also writes the index of the first maximum (for backward).
template <class T>
void max_axis(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* argmax);
// Sum of all n elements in a fixed order (independent of thread count).
template <class T>
T sum_all(int64_t n, const T* x);
// Sum of squares, for gradient-norm clipping.
template <class T>
T sum_squares(int64_t n, const T* x);

// ---------------------------------------------------------------------------------------------
// Softmax family over rows x cols.

// y = softmax(scale * x + mask) row-wise. mask is null, or an additive (mask_rows x cols) matrix
// applied to row r as mask[r % mask_rows] (so one T x T mask serves every batch and head).
// causal = true masks column c > (r % causal_period) + causal_offset with -inf (decoder self-attention).
struct SoftmaxOptions {
  double scale = 1.0;
  const void* mask = nullptr;  // same type as x
  int64_t mask_rows = 0;
  bool causal = false;
  int64_t causal_period = 0;   // rows per (batch, head) block; 0 = cols
  int64_t causal_offset = 0;
};
template <class T>
void softmax(int64_t rows, int64_t cols, const T* x, T* y, const SoftmaxOptions& opts = {});
// dx += scale * y * (dy - sum(dy * y))
template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, double scale = 1.0);
// y = x - max - log(sum(exp(x - max)))
template <class T>
void log_softmax(int64_t rows, int64_t cols, const T* x, T* y);
// dx += dy - exp(y) * sum(dy)
template <class T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);

// Cross-entropy from logits, fused. For each row with target t != ignore_index:
//   loss_r = -(1 - eps) * logp[t] - eps / V * sum_v logp[v],  logp = log_softmax(logits_r)
// Writes loss per row (0 for ignored rows) and, if grad is non-null, the gradient of the *sum* of
// row losses scaled by grad_scale: grad_r = grad_scale * (softmax(logits_r) - (1-eps) onehot(t) - eps/V)
// (zero for ignored rows). Returns the number of non-ignored rows.
template <class T>
int64_t cross_entropy(int64_t rows, int64_t V, const T* logits, const int32_t* targets, int32_t ignore_index,
                      double label_smoothing, T* row_loss, T* grad, double grad_scale);

// ---------------------------------------------------------------------------------------------
// Layer norm over the last axis: y = (x - mean) * rstd * gamma + beta. gamma/beta may be null.
// mean and rstd (rows) are saved for backward.
template <class T>
void layer_norm(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta, double eps, T* y,
                T* mean, T* rstd);
// Accumulates dx, dgamma, dbeta (each may be null to skip).
template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean,
                         const T* rstd, const T* dy, T* dx, T* dgamma, T* dbeta);

// ---------------------------------------------------------------------------------------------
// Indexing.

// y[i, :] = table[ids[i], :]; ids already validated by the caller.
template <class T>
void embedding(int64_t n, int64_t dim, const T* table, const int32_t* ids, T* y);
// dtable[ids[i], :] += dy[i, :] (repeated ids accumulate, in index order).
template <class T>
void embedding_backward(int64_t n, int64_t dim, const int32_t* ids, const T* dy, T* dtable);

// ---------------------------------------------------------------------------------------------
// Additive (Bahdanau) attention scores, fused: keys [B, S, A], query [B, A], v [A], all contiguous.

// scores[b, s] = sum_a v[a] tanh(keys[b, s, a] + query[b, a])
template <class T>
void additive_score(int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v, T* scores);
// Its backward for dscores [B, S], t = tanh(keys + query) recomputed, g = dscores[b, s] v (1 - t^2):
// dkeys[b, s, :] += g;  dquery[b, :] += sum_s g;  dv += sum_{b,s} dscores[b, s] t[b, s, :].
// Accumulates; any output may be null to skip it. dv is summed over b in order, so it does not
// depend on the thread count.
template <class T>
void additive_score_backward(int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v,
                             const T* dscores, T* dkeys, T* dquery, T* dv);

// ---------------------------------------------------------------------------------------------
// Optimizer updates (in place).

struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;  // weight_decay: decoupled (AdamW) if decoupled
  bool decoupled;
  int64_t step;  // 1-based, for bias correction
};
template <class T>
void adam_update(int64_t n, T* param, const T* grad, T* m, T* v, const AdamParams& p);

// ---------------------------------------------------------------------------------------------
// Random numbers (a counter-based generator, so results do not depend on thread count).

// Philox-style hash of (seed, counter) to a uniform double in [0, 1).
double uniform_at(uint64_t seed, uint64_t counter);
// y[i] = keep ? x[i] / (1 - p) : 0 with keep decided by uniform_at(seed, i) >= p; mask written as 0/1.
template <class T>
void dropout(int64_t n, const T* x, double p, uint64_t seed, T* y, uint8_t* mask);

}  // namespace tapegrad::kernels
