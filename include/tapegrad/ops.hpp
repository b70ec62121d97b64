/// @file
/// Differentiable functions. Each checks its inputs (throwing an Error that names the op and every
/// shape), allocates its output, calls a kernel, and records a tape entry when some input requires
/// grad. float32 and float64 are both supported by every op; mixing them is an error.
/// Shapes: B batch, T time, C channels/features, H heads, V vocabulary.
/// Each section names the file that defines it; Tensor's member shortcuts (reshape, sum, ...) are in
/// src/ops/tensor_methods.cpp and every op's gradient-check row in src/ops/op_checks.cpp.
#pragma once

#include <vector>

#include "tapegrad/tensor.hpp"

namespace tapegrad {

// ---- elementwise, numpy broadcasting (src/ops/elementwise.cpp) ----------------------------------
/// a + b, a - b, a * b, a / b elementwise: a and b broadcast numpy-style to the output shape
/// (ShapeError naming both shapes if they cannot).
/// @{
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
/// @}
/// a^b elementwise, broadcasting; a > 0 where b is differentiated.
Tensor pow(const Tensor& a, const Tensor& b);
/// Scalar variants: a + s, a * s, a^p, -a; the output has a's shape.
/// @{
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor pow(const Tensor& a, double p);
Tensor neg(const Tensor& a);
/// @}

/// Elementwise functions: the output has a's shape. log and sqrt expect a > 0.
/// @{
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
/// @}
/// Which GELU: the tanh approximation 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))), or the
/// exact a Phi(a) with the normal CDF Phi (PyTorch's default).
enum class GeluApprox { tanh, exact };
/// GELU elementwise (tanh approximation by default); the output has a's shape.
Tensor gelu(const Tensor& a, GeluApprox approx = GeluApprox::tanh);
/// log(1 + exp(a)) without overflow: PyTorch's F.softplus with beta = 1 (see elementwise.cpp).
Tensor softplus(const Tensor& a);

/// y = where(mask != 0, value, x); mask (any dtype) broadcasts to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// y = cond != 0 ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

/// Operators for add, sub, mul, div and neg with the same broadcasting; `s - a` is neg(a) + s and
/// `a / s` is a * (1 / s).
/// @{
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
/// @}

// ---- linear algebra (src/ops/matmul.cpp) --------------------------------------------------------
/// a [.., M, K] @ b [.., K, N] -> [.., M, N]; 1-D b is a vector; leading dims broadcast.
/// Transposed views of the last two dims are passed to GEMM as transposes, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x [.., in] @ weight[out, in]^T + bias[out] -> [.., out] (bias may be undefined). One GEMM.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

/// While a WeightPackScope is alive on a thread, linear() packs each weight's GEMM panels once and
/// reuses them for every later call with that weight (and backward, once more for dx = dy W),
/// instead of packing them at every call: for recurrent models, which apply the same few weights
/// at every time step to a small batch, packing was ~8% of a training step. The scope keeps the
/// weights it has seen alive, so their addresses cannot be reused for other data; the weights must
/// not be modified in place while it lives (open one per forward pass, never across an optimizer
/// step). Scopes nest; only the outermost one owns the cache.
class WeightPackScope {
 public:
  WeightPackScope();
  ~WeightPackScope();
  WeightPackScope(const WeightPackScope&) = delete;
  WeightPackScope& operator=(const WeightPackScope&) = delete;

 private:
  bool outermost_;
};

// ---- shape (src/ops/shape.cpp) ------------------------------------------------------------------
/// The same elements in `shape` (one dimension may be -1: inferred); a view whenever a's layout
/// allows it (always when contiguous), else a copy. ShapeError if the element counts differ.
Tensor reshape(const Tensor& a, const Shape& shape);
/// Swaps two dimensions (negative counts from the back): a view.
Tensor transpose(const Tensor& a, int dim0, int dim1);
/// Reorders the dimensions: output dimension i is a's dimension dims[i] (a permutation); a view.
Tensor permute(const Tensor& a, const std::vector<int>& dims);
/// a itself when already contiguous, else a row-major copy (recorded).
Tensor contiguous(const Tensor& a);
/// Joins tensors along an existing axis; every other dimension must match (ShapeError otherwise).
Tensor concat(const std::vector<Tensor>& xs, int axis);
/// Joins tensors of one shape along a new axis inserted at `axis`: n x [..] -> [.., n, ..].
Tensor stack(const std::vector<Tensor>& xs, int axis);
/// Elements [start, start + length) along axis (a view; recorded).
Tensor narrow(const Tensor& a, int axis, int64_t start, int64_t length);

// ---- reductions (src/ops/reduce.cpp) ------------------------------------------------------------
/// Sum of all elements: a scalar (shape []).
Tensor sum(const Tensor& a);
/// Sum along `axis` (negative counts from the back); the axis is dropped, or kept as 1 with keepdim.
Tensor sum(const Tensor& a, int axis, bool keepdim = false);
/// Mean of all elements: a scalar.
Tensor mean(const Tensor& a);
/// Mean along `axis`, shaped as sum(a, axis, keepdim).
Tensor mean(const Tensor& a, int axis, bool keepdim = false);
/// Largest element: a scalar; gradient flows to the first maximum. ShapeError if a is empty.
Tensor max(const Tensor& a);
/// Largest along `axis`, shaped as sum(a, axis, keepdim); gradient flows to the first maximum.
Tensor max(const Tensor& a, int axis, bool keepdim = false);

// ---- softmax family and cross-entropy (src/ops/softmax.cpp) -------------------------------------
/// What softmax fuses in before normalising.
struct SoftmaxSpec {
  double scale = 1.0;  ///< applied to x before the mask
  /// Additive, broadcast over leading dims: shape [.., Tq, Tk] whose trailing dims match x's and whose
  /// leading dims are 1 or match (such as [B,1,1,Tk]); undefined: none.
  Tensor mask;
  bool causal = false;  ///< mask key j > query i (decoder self-attention)
};
/// softmax(scale * x + mask) over the last axis; the output has x's shape.
Tensor softmax(const Tensor& x, const SoftmaxSpec& spec = {});
/// log(softmax(x)) over the last axis, computed stably; x's shape (ShapeError for a scalar).
Tensor log_softmax(const Tensor& x);
/// logits [N, V] (or [B, T, V]), targets int32 [N] (or [B, T]) -> scalar mean over non-ignored targets.
/// Targets equal to ignore_index count for nothing; label_smoothing in [0, 1) mixes the one-hot
/// target with the uniform distribution over V. A target outside [0, V) throws IndexError; if every
/// target is ignored the loss is 0 with zero gradient.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int ignore_index = -100,
                     double label_smoothing = 0.0);

// ---- normalisation (src/ops/norm.cpp) -----------------------------------------------------------
/// Over the last axis; weight and bias [C] may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// ---- indexing and regularisation (src/ops/indexing.cpp) -----------------------------------------
/// table [V, C], ids int32 [...] -> [..., C]
Tensor embedding(const Tensor& table, const Tensor& ids);
/// Zeroes each element with probability p and scales the rest by 1/(1-p); identity if !training.
/// The mask is a function of (seed, element index), so results do not depend on thread count.
Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed);
/// The same with the seed drawn from `gen` (one draw per call in training with p > 0, none otherwise).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// ---- fused recurrent-model ops (src/ops/fused.cpp) ----------------------------------------------
/// GRU gates from the input and recurrent projections xp, hp [B, 3H] (gate order r, z, n; rows may be
/// strided views, such as one time step of a [B, T, 3H] projection) and the state h [B, H]:
/// ```
///   r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) n + z h  -> [B, H]
/// ```
Tensor gru_cell(const Tensor& xp, const Tensor& hp, const Tensor& h);
/// Additive (Bahdanau) attention scores: keys [B, S, A] (projected), query [B, A] (projected), v [A]
/// ```
///   scores[b, s] = v . tanh(keys[b, s, :] + query[b, :])  -> [B, S]
/// ```
/// Nothing of size [B, S, A] is kept for backward: it recomputes tanh chunk by chunk.
Tensor additive_score(const Tensor& keys, const Tensor& query, const Tensor& v);

// ---- the feed-forward block (src/ops/matmul.cpp) -------------------------------------------------
/// A Transformer's ReLU feed-forward block, x [.., in], w1 [hidden, in], w2 [out, hidden], biases
/// [hidden], [out] or undefined:
/// ```
///   y = linear(dropout(relu(linear(x, w1, b1)), p, true, seed), w2, b2)  -> [.., out]
/// ```
/// as one tape entry: the ReLU is applied as the first GEMM stores its tiles, and the backward
/// gates dy w2 by the ReLU (and the dropout mask) as that GEMM stores its tiles, so neither the
/// activation nor its gradient takes a pass over [rows, hidden] of its own. Same values as the
/// composite; keeps x and the [rows, hidden] activation, as the composite does.
Tensor feed_forward_relu(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                         const Tensor& b2, double dropout = 0, uint64_t dropout_seed = 0);

// ---- attention (src/ops/attention.cpp) ----------------------------------------------------------
/// What scaled_dot_product_attention fuses in.
struct AttentionSpec {
  double scale = 1.0;  ///< scores are scale * q . k + mask
  Tensor mask;         ///< additive, broadcastable to [B, H, Tq, Tk]: e.g. key padding [B,1,1,Tk], or [Tq,Tk]
  bool causal = false;  ///< mask key j for query i when j > i + (Tk - Tq) (queries aligned to the last keys)
  double dropout = 0;   ///< on the weights, in training: the mask dropout(weights, p, true, seed) draws
  uint64_t dropout_seed = 0;  ///< the seed of that dropout mask
};
/// Multi-head scaled dot-product attention in the heads-inner layout the projections produce:
/// ```
///   q [B, Tq, H, dk], k [B, Tk, H, dk], v [B, Tk, H, dv] -> o [B, Tq, H, dv], per (b, h):
///   o = dropout(softmax(scale * q k^T + mask)) v
/// ```
/// fused, so the [B, H, Tq, Tk] weights are never stored (backward recomputes them from the rows'
/// log-sum-exp). Views whose last dimension is contiguous (heads narrowed off a stacked projection)
/// are read in place, and o.reshape({B, Tq, H * dv}) is a view. A row with no key to see (causal
/// with Tq > Tk, or every key -inf) is zeros, as in softmax.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionSpec& spec = {});
/// The same on stacked projections, as MultiHeadAttention computes them (C = heads * d): self-attention
/// on qkv [B, T, 3C] (queries, keys, values side by side; kv undefined), or queries q [B, Tq, C] and
/// kv [B, Tk, 2C] (keys, values side by side). -> o [B, Tq, heads, d]. The heads are read in place,
/// and backward writes the three gradients straight into the stacked tensors' gradients, where the
/// op on narrowed views leaves three slices for narrow's backward to gather. One tape entry of kind
/// scaled_dot_product_attention with the stacked tensors as its inputs.
Tensor scaled_dot_product_attention_stacked(const Tensor& q, const Tensor& kv, int64_t heads,
                                            const AttentionSpec& spec = {});

}  // namespace tapegrad
