/// @file
/// Transformer encoder and decoder layers ("Attention Is All You Need"), with residual connections
/// and layer norm either after each sub-layer (post-LN, the paper's) or before it (pre-LN).
#pragma once

#include "tapegrad/nn/attention.hpp"

namespace tapegrad::nn {

struct TransformerLayerOptions {
  int64_t dim = 128, heads = 4, ff_dim = 512;
  double dropout = 0.1;
  Activation activation = Activation::relu;
  bool norm_first = false;  ///< pre-LN when true
};

/// x = x + SelfAttn(x); x = x + FF(x)   (with norms placed per norm_first)
class EncoderLayer : public Module {
 public:
  EncoderLayer(const TransformerLayerOptions& o, Generator& gen);
  Tensor forward(const Tensor& x, const Tensor& src_mask, Generator& gen);
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  bool norm_first_;
  std::shared_ptr<Dropout> drop_;
};

/// x = x + MaskedSelfAttn(x); x = x + CrossAttn(x, memory); x = x + FF(x)
class DecoderLayer : public Module {
 public:
  DecoderLayer(const TransformerLayerOptions& o, Generator& gen);
  /// cache: incremental decoding, x the next position only (see KvCache); one per layer and sequence batch.
  struct Cache {
    KvCache self, cross;
  };
  Tensor forward(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                 Generator& gen, Cache* cache = nullptr);
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  bool norm_first_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace tapegrad::nn
