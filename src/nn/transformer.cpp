// Transformer encoder and decoder layers, post-LN (the paper's) or pre-LN.
#include "tapegrad/nn/transformer.hpp"

namespace tapegrad::nn {

EncoderLayer::EncoderLayer(const TransformerLayerOptions& o, Generator& gen) : norm_first_(o.norm_first) {
  self_attn =
      register_module("self_attn", std::make_shared<MultiHeadAttention>(o.dim, o.heads, o.dropout, gen, o.bias));
  ff = register_module("ff", std::make_shared<FeedForward>(o.dim, o.ff_dim, o.activation, o.dropout, gen, o.bias));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.dim, 1e-5, o.bias));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.dim, 1e-5, o.bias));
  drop_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
}

Tensor EncoderLayer::forward(const Tensor& x_in, const Tensor& src_mask, Generator& gen, bool causal,
                             KvCache* cache) {
  Tensor x = x_in;
  if (norm_first_) {
    const Tensor h = norm1->forward(x);
    x = add(x, drop_->forward(self_attn->forward(h, h, src_mask, causal, gen, cache), gen));
    x = add(x, drop_->forward(ff->forward(norm2->forward(x), gen), gen));
  } else {
    x = norm1->forward(add(x, drop_->forward(self_attn->forward(x, x, src_mask, causal, gen, cache), gen)));
    x = norm2->forward(add(x, drop_->forward(ff->forward(x, gen), gen)));
  }
  return x;
}

DecoderLayer::DecoderLayer(const TransformerLayerOptions& o, Generator& gen) : norm_first_(o.norm_first) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(o.dim, o.heads, o.dropout, gen));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(o.dim, o.heads, o.dropout, gen));
  ff = register_module("ff", std::make_shared<FeedForward>(o.dim, o.ff_dim, o.activation, o.dropout, gen));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.dim));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.dim));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(o.dim));
  drop_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
}

Tensor DecoderLayer::forward(const Tensor& x_in, const Tensor& memory, const Tensor& tgt_mask,
                             const Tensor& memory_mask, Generator& gen, Cache* cache) {
  KvCache* self_cache = cache ? &cache->self : nullptr;
  KvCache* cross_cache = cache ? &cache->cross : nullptr;
  Tensor x = x_in;
  if (norm_first_) {
    const Tensor h = norm1->forward(x);
    x = add(x, drop_->forward(self_attn->forward(h, h, tgt_mask, true, gen, self_cache), gen));
    x = add(x, drop_->forward(cross_attn->forward(norm2->forward(x), memory, memory_mask, false, gen, cross_cache),
                              gen));
    x = add(x, drop_->forward(ff->forward(norm3->forward(x), gen), gen));
  } else {
    x = norm1->forward(add(x, drop_->forward(self_attn->forward(x, x, tgt_mask, true, gen, self_cache), gen)));
    x = norm2->forward(
        add(x, drop_->forward(cross_attn->forward(x, memory, memory_mask, false, gen, cross_cache), gen)));
    x = norm3->forward(add(x, drop_->forward(ff->forward(x, gen), gen)));
  }
  return x;
}

}  // namespace tapegrad::nn
