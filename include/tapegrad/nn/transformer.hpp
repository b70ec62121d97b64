/// @file
/// Transformer encoder and decoder layers ("Attention Is All You Need"), with residual connections
/// and layer norm either after each sub-layer (post-LN, the paper's) or before it (pre-LN).
#pragma once

#include "tapegrad/nn/attention.hpp"

namespace tapegrad::nn {

/// The sizes and choices every encoder and decoder layer of a model shares.
struct TransformerLayerOptions {
  /// d_model C, attention heads H (dividing C) and the feed-forward width.
  /// @{
  int64_t dim = 128, heads = 4, ff_dim = 512;
  /// @}
  double dropout = 0.1;                      ///< on attention weights, sub-layer outputs and the feed-forward
  Activation activation = Activation::relu;  ///< the feed-forward's
  bool norm_first = false;                   ///< pre-LN when true
  bool bias = true;  ///< false: no bias in any linear or layer norm (GPT-2 / nanoGPT's bias=False form)
};

/// x = x + SelfAttn(x); x = x + FF(x)   (with norms placed per norm_first). With causal self-attention
/// it is also the block of a decoder-only model (GPT: pre-LN, causal, no cross-attention).
class EncoderLayer : public Module {
 public:
  /// Weights drawn from `gen`.
  EncoderLayer(const TransformerLayerOptions& o, Generator& gen);
  /// x [B, S, C], src_mask additive (key_padding_mask of the source, or undefined) -> [B, S, C].
  /// causal: position i attends to positions <= i only. cache: incremental decoding of a causal
  /// stack (see KvCache; x is the next position, or a whole prefix while the cache is empty).
  Tensor forward(const Tensor& x, const Tensor& src_mask, Generator& gen, bool causal = false,
                 KvCache* cache = nullptr);
  std::shared_ptr<MultiHeadAttention> self_attn;  ///< child "self_attn"
  std::shared_ptr<FeedForward> ff;                ///< child "ff"
  /// Children "norm1" (around self-attention) and "norm2" (around the feed-forward).
  /// @{
  std::shared_ptr<LayerNorm> norm1, norm2;
  /// @}

 private:
  bool norm_first_;
  std::shared_ptr<Dropout> drop_;
};

/// x = x + MaskedSelfAttn(x); x = x + CrossAttn(x, memory); x = x + FF(x)
class DecoderLayer : public Module {
 public:
  /// Weights drawn from `gen`.
  DecoderLayer(const TransformerLayerOptions& o, Generator& gen);
  /// cache: incremental decoding, x the next position only (see KvCache); one per layer and sequence batch.
  struct Cache {
    /// The self-attention's and the cross-attention's caches.
    /// @{
    KvCache self, cross;
    /// @}
  };
  /// x [B, T, C] (causal self-attention; tgt_mask additive or undefined), memory [B, S, C] the
  /// encoder output (memory_mask: its key_padding_mask) -> [B, T, C].
  Tensor forward(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                 Generator& gen, Cache* cache = nullptr);
  /// Children "self_attn" (masked) and "cross_attn" (over memory).
  /// @{
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  /// @}
  std::shared_ptr<FeedForward> ff;  ///< child "ff"
  /// Children "norm1", "norm2", "norm3": around self-attention, cross-attention and the feed-forward.
  /// @{
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  /// @}

 private:
  bool norm_first_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace tapegrad::nn
