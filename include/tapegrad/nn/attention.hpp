/// @file
/// Attention: multi-head scaled dot-product attention (Transformer) and additive / general / dot
/// attention over encoder states (attention RNN seq2seq).
#pragma once

#include "tapegrad/nn/layers.hpp"

namespace tapegrad::nn {

/// Additive mask for keys that are padding: ids [B, S] -> float [B, 1, 1, S] holding 0 for real
/// tokens and -1e9 for `<pad>` (a large finite value: a fully padded row stays finite).
Tensor key_padding_mask(const Tensor& ids, DType dtype = DType::f32);

/// Keys and values kept between the steps of incremental decoding (inference only, no autograd), so
/// each new position costs one position's projections instead of re-running the whole prefix.
/// Self-attention appends each step's key and value (up to `capacity` positions); cross-attention
/// projects the encoder output on the first step and reuses it after.
struct KvCache {
  int64_t capacity = 0;  ///< positions, for self-attention
  int64_t len = 0;       ///< positions held
  /// Keys, transposed, [B, H, dk, capacity] and values [B, H, capacity, dk] (cross: [.., Tk] and [.., Tk,
  /// ..]).
  /// @{
  Tensor kt, v;
  /// @}
};

/// How MultiHeadAttention computes softmax(q k^T / sqrt(d_k) + mask) v. Both give the same result up
/// to float rounding, with the same dropout mask:
/// ```
///   unfused  matmul, softmax, dropout, matmul: keeps the [B, H, Tq, Tk] weights for backward.
///   fused    scaled_dot_product_attention: keeps O(T d) per head, recomputes the weights backward.
///   automatic (the default): fused whenever no KV cache is in use.
///            Memory: the fused op keeps 5 MiB instead of 34 at T = 512 and 20 MiB instead of 520 at
///            T = 2048 (8 heads of 64). Time, in the models (whole training steps, the two paths
///            alternating, 2-core Zen 5): the fused op reads the heads where the projections left
///            them and writes their gradients back there, where the unfused ops copy q, k, v and o
///            between [B, T, H, d] and [B, H, T, d] and keep the weights: the small Transformer of
///            bench_train (T 32, 4 heads of 32) 52.5-53.7 -> 46.0-47.3 ms at 2 threads, even at 1;
///            the GPT recipe (T 64) 1-6% faster at 1 and 2 threads. With dropout on the weights the
///            fused backward draws the mask again, which once cost the Spanish-English Transformer
///            (dropout 0.1) 6-12% at 2 threads; since the kernels write o and the gradients from
///            the micro-kernel it is faster fused there too: 14.5-15.5k target tokens/s against
///            10.5-11.4k at 2 threads, 7.1-8.0k against 7.0-7.9k at 1 (three alternating rounds of
///            12 steps). The choice depends on the path setting and the cache only, never on
///            sizes or the thread count, so training stays bitwise the same at any thread count.
/// ```
/// A KV cache always takes the unfused path.
enum class AttentionPath { automatic, fused, unfused };

/// Per head h: q = x W_Q^h, k = m W_K^h, v = m W_V^h, weights = softmax(q k^T / sqrt(d_k) + mask),
/// out = concat_h(weights v) W_O. query [B, Tq, C], memory [B, Tk, C] -> [B, Tq, C].
class MultiHeadAttention : public Module {
 public:
  /// `dim` = C features split into `heads` heads of dim / heads (ShapeError unless it divides);
  /// dropout on the attention weights; weights drawn from `gen`; the four projections without a bias
  /// when `bias` is false.
  MultiHeadAttention(int64_t dim, int64_t heads, double dropout, Generator& gen, bool bias = true);
  /// mask: additive, broadcastable to [B, H, Tq, Tk] (such as key_padding_mask), or undefined.
  /// causal: query i may not attend to key j > i (decoder self-attention).
  /// cache: incremental decoding (see KvCache): query is the next position alone ([B, 1, C]); for
  /// self-attention (memory is query) it attends over every position so far, itself included. An
  /// empty self-attention cache also takes a whole prefix at once ([B, Tq, C], causal: a prompt's
  /// prefill). A cache needs NoGrad (Error otherwise). Returns [B, Tq, C]; dropout draws from `gen` in
  /// training.
  Tensor forward(const Tensor& query, const Tensor& memory, const Tensor& mask, bool causal, Generator& gen,
                 KvCache* cache = nullptr);
  void set_path(AttentionPath path) { path_ = path; }  ///< Forces a path (see AttentionPath).
  AttentionPath path() const { return path_; }         ///< The path setting (automatic by default).
  /// When on, forward keeps its attention weights [B, H, Tq, Tk] (detached, before dropout) for
  /// inspection; on the fused path they are recomputed for it, off the tape.
  void keep_weights(bool on) { keep_weights_ = on; }
  /// The weights kept by the last forward with keep_weights on (undefined before).
  const Tensor& last_weights() const { return last_weights_; }
  int64_t heads() const { return heads_; }  ///< Number of heads H.
  /// Children "q_proj", "k_proj", "v_proj" (W_Q, W_K, W_V for all heads) and "out_proj" (W_O), each C -> C.
  /// @{
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  /// @}

 private:
  int64_t dim_, heads_;
  std::shared_ptr<Dropout> drop_;
  AttentionPath path_ = AttentionPath::automatic;
  bool keep_weights_ = false;
  Tensor last_weights_;
};

/// How SeqAttention scores decoder state s against encoder state h_j:
///   additive (Bahdanau): e_j = v^T tanh(W_q s + W_k h_j), with W_q, W_k, its bias and v;
///   general (Luong):     e_j = s^T W h_j, with W [query_dim, key_dim];
///   dot (Luong):         e_j = s^T h_j, no parameters (query and key sizes must be equal).
enum class AttentionScore { additive, general, dot };
/// The canonical name parse_score reads back: "additive", "general" or "dot".
const char* score_name(AttentionScore s);
/// "additive" (alias "bahdanau"), "general" (alias "luong"), "dot"; throws Error naming the
/// unknown value and the choices. (Model configs written before "general" existed stored it as
/// "dot": ModelConfig::from_json reads those by their version.)
AttentionScore parse_score(const std::string& name);

/// Attention of one decoder state over all encoder states, scored as AttentionScore says;
/// weights = softmax(e + mask), context = sum_j weights_j h_j.
class SeqAttention : public Module {
 public:
  /// attn_dim is the additive score's hidden width (unused by general and dot). Throws ShapeError
  /// for dot scoring when query_dim != key_dim, naming the score and both sizes.
  SeqAttention(AttentionScore score, int64_t query_dim, int64_t key_dim, int64_t attn_dim, Generator& gen);
  /// Per-sequence work that does not depend on the decoder step: keys [B, S, K] -> projected keys
  /// (dot scoring: the keys themselves).
  Tensor precompute(const Tensor& keys) const;
  /// query [B, Q], keys [B, S, K] (as given to precompute), projected = precompute(keys),
  /// mask additive [B, S] or undefined -> context [B, K]; weights [B, S] written to *weights if non-null.
  Tensor forward(const Tensor& query, const Tensor& keys, const Tensor& projected, const Tensor& mask,
                 Tensor* weights = nullptr) const;
  AttentionScore score() const { return score_; }  ///< The score function.

 private:
  AttentionScore score_;
  std::shared_ptr<Linear> query_proj_, key_proj_;
  Tensor v_;  ///< [attn_dim] for additive scoring
};

}  // namespace tapegrad::nn
