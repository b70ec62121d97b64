// The Transformer encoder-decoder: embeddings scaled by sqrt(d_model) plus positions, N encoder and
// N decoder layers, a final norm for pre-LN, and a linear output projection to the vocabulary. With
// tie_embeddings one table (src_embed.weight) is both embeddings and the projection's weight, and the
// tape adds the gradients of its three uses into it.
#include <cmath>

#include "src/models/models_internal.hpp"
#include "tapegrad/autograd.hpp"

namespace tapegrad::models {

namespace {

class Transformer : public Seq2Seq {
 public:
  Transformer(const ModelConfig& c, uint64_t seed) : Seq2Seq(c, seed) {
    Generator& g = gen_;
    const double emb_std = 1.0 / std::sqrt(double(c.d_model));  // times sqrt(d) in forward: unit scale
    src_embed_ = register_module("src_embed", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model, g, emb_std));
    tgt_embed_ = c.tie_embeddings ? src_embed_
                                  : register_module("tgt_embed", std::make_shared<nn::Embedding>(
                                                                     c.vocab_size, c.d_model, g, emb_std));
    src_pos_ = register_module("src_pos", std::make_shared<nn::PositionalEncoding>(c.positional, c.max_len, c.d_model, g));
    tgt_pos_ = register_module("tgt_pos", std::make_shared<nn::PositionalEncoding>(c.positional, c.max_len, c.d_model, g));
    const nn::TransformerLayerOptions o{c.d_model, c.heads, c.d_ff, c.dropout, c.activation, c.norm_first};
    for (int64_t l = 0; l < c.layers; ++l)
      encoder_.push_back(register_module("encoder.layers." + std::to_string(l), std::make_shared<nn::EncoderLayer>(o, g)));
    for (int64_t l = 0; l < c.layers; ++l)
      decoder_.push_back(register_module("decoder.layers." + std::to_string(l), std::make_shared<nn::DecoderLayer>(o, g)));
    if (c.norm_first) {
      enc_norm_ = register_module("encoder.norm", std::make_shared<nn::LayerNorm>(c.d_model));
      dec_norm_ = register_module("decoder.norm", std::make_shared<nn::LayerNorm>(c.d_model));
    }
    if (!c.tie_embeddings)
      out_proj_ = register_module("out_proj", std::make_shared<nn::Linear>(c.d_model, c.vocab_size, g));
    drop_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  }

  Tensor logits(const data::Batch& batch) override {
    const Tensor src_mask = padding_mask_if_any(batch.src, dtype());
    const Tensor memory = encode(batch.src, src_mask);
    return decode(batch.tgt_in, memory, src_mask);
  }

  Tensor encoder_states(const Tensor& src, const std::vector<int64_t>&) override {
    return encode(src, padding_mask_if_any(src, dtype()));
  }

  // One position at a time with a KV cache per decoder layer: step t runs the decoder on token t
  // only, attending over the cached keys and values of positions 0..t (and the encoder output,
  // projected once), instead of re-running the whole prefix.
  std::vector<std::vector<int32_t>> greedy_decode(const Tensor& src, const std::vector<int64_t>&,
                                                  int64_t max_len) override {
    NoGrad no_grad;
    const int64_t B = src.size(0);
    const Tensor src_mask = padding_mask_if_any(src, dtype());
    const Tensor memory = encode(src, src_mask);
    max_len = std::min(max_len, config_.max_len - 1);
    std::vector<nn::DecoderLayer::Cache> caches(decoder_.size());
    for (auto& c : caches) c.self.capacity = max_len;
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
    std::vector<int32_t> last(static_cast<size_t>(B), data::kBos);
    std::vector<bool> finished(static_cast<size_t>(B), false);
    for (int64_t t = 0; t < max_len; ++t) {
      Tensor x = embed(*tgt_embed_, *tgt_pos_, Tensor::from_ids(last, {B, 1}), t);
      for (size_t l = 0; l < decoder_.size(); ++l) x = decoder_[l]->forward(x, memory, {}, src_mask, gen_, &caches[l]);
      if (dec_norm_) x = dec_norm_->forward(x);
      const std::vector<int32_t> next = argmax_rows(reshape(project(x), {B, config_.vocab_size}));
      bool all = true;
      for (int64_t b = 0; b < B; ++b) {
        const int32_t tok = finished[size_t(b)] ? data::kPad : next[size_t(b)];
        if (!finished[size_t(b)]) {
          if (tok == data::kEos) finished[size_t(b)] = true;
          else out[size_t(b)].push_back(tok);
        }
        last[size_t(b)] = tok;
        all = all && finished[size_t(b)];
      }
      if (all) break;
    }
    return out;
  }

  Tensor next_token_log_probs(const std::vector<int32_t>& src,
                              const std::vector<std::vector<int32_t>>& prefixes) override {
    NoGrad no_grad;
    const int64_t N = int64_t(prefixes.size()), len = int64_t(prefixes[0].size()), S = int64_t(src.size());
    std::vector<int32_t> srcs, flat;
    for (int64_t n = 0; n < N; ++n) {
      srcs.insert(srcs.end(), src.begin(), src.end());
      flat.insert(flat.end(), prefixes[size_t(n)].begin(), prefixes[size_t(n)].end());
    }
    const Tensor s = Tensor::from_ids(srcs, {N, S});
    const Tensor mask = padding_mask_if_any(s, dtype());
    const Tensor lg = decode(Tensor::from_ids(flat, {N, len}), encode(s, mask), mask);
    return log_softmax(reshape(narrow(lg, 1, len - 1, 1), {N, config_.vocab_size}));
  }

  void keep_attention(bool on) override {
    for (auto& l : encoder_) l->self_attn->keep_weights(on);
    for (auto& l : decoder_) l->self_attn->keep_weights(on), l->cross_attn->keep_weights(on);
  }

  std::vector<std::pair<std::string, Tensor>> attention_head_maps() const override {
    std::vector<std::pair<std::string, Tensor>> maps;
    auto add_map = [&](const std::string& name, const nn::MultiHeadAttention& a) {
      if (a.last_weights().defined()) maps.emplace_back(name, a.last_weights());  // [B, H, Tq, Tk]
    };
    for (size_t l = 0; l < encoder_.size(); ++l) add_map("encoder.layers." + std::to_string(l) + ".self_attn", *encoder_[l]->self_attn);
    for (size_t l = 0; l < decoder_.size(); ++l) {
      add_map("decoder.layers." + std::to_string(l) + ".self_attn", *decoder_[l]->self_attn);
      add_map("decoder.layers." + std::to_string(l) + ".cross_attn", *decoder_[l]->cross_attn);
    }
    return maps;
  }

 private:
  DType dtype() const { return src_embed_->weight.dtype(); }

  // x [B, T, C] -> logits [B, T, V]: x E^T with the tied table, else the output projection.
  Tensor project(const Tensor& x) const {
    return out_proj_ ? out_proj_->forward(x) : linear(x, src_embed_->weight, Tensor());
  }

  // ids [B, T] at positions offset .. offset + T - 1
  Tensor embed(const nn::Embedding& e, const nn::PositionalEncoding& pos, const Tensor& ids, int64_t offset = 0) {
    return drop_->forward(pos.forward(mul(e.forward(ids), std::sqrt(double(config_.d_model))), offset), gen_);
  }

  Tensor encode(const Tensor& src, const Tensor& src_mask) {
    Tensor x = embed(*src_embed_, *src_pos_, src);
    for (auto& layer : encoder_)
      x = run_layer(config_.checkpoint_layers, gen_,
                    [layer, src_mask, gen = &gen_](const std::vector<Tensor>& in) {
                      return layer->forward(in[0], src_mask, *gen);
                    },
                    {x});
    return enc_norm_ ? enc_norm_->forward(x) : x;
  }

  Tensor decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src_mask) {
    Tensor x = embed(*tgt_embed_, *tgt_pos_, tgt_in);
    // Causal masking is fused into the self-attention softmax; padded target positions only produce
    // ignored losses, and keys after a real position are already masked by causality.
    for (auto& layer : decoder_)
      x = run_layer(config_.checkpoint_layers, gen_,
                    [layer, src_mask, gen = &gen_](const std::vector<Tensor>& in) {
                      return layer->forward(in[0], in[1], {}, src_mask, *gen);
                    },
                    {x, memory});
    if (dec_norm_) x = dec_norm_->forward(x);
    return project(x);
  }

  std::shared_ptr<nn::Embedding> src_embed_, tgt_embed_;
  std::shared_ptr<nn::PositionalEncoding> src_pos_, tgt_pos_;
  std::vector<std::shared_ptr<nn::EncoderLayer>> encoder_;
  std::vector<std::shared_ptr<nn::DecoderLayer>> decoder_;
  std::shared_ptr<nn::LayerNorm> enc_norm_, dec_norm_;
  std::shared_ptr<nn::Linear> out_proj_;
  std::shared_ptr<nn::Dropout> drop_;
};

}  // namespace

std::unique_ptr<Seq2Seq> make_transformer(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<Transformer>(config, seed);
}

}  // namespace tapegrad::models
