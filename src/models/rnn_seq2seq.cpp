// RNN encoder-decoders: vanilla (the decoder sees only the encoder's final state) and attention
// (Luong-style: at step t the decoder state h_t attends over all encoder states, the attentional
// vector tanh(W_c [h_t; c_t]) predicts the token and is fed to the next step's input).
#include "src/models/models_internal.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/checked.hpp"

namespace tapegrad::models {

namespace {

class RnnSeq2Seq : public Seq2Seq {
 public:
  RnnSeq2Seq(const ModelConfig& c, uint64_t seed) : Seq2Seq(c, seed), attention_(c.kind == ModelKind::attention_rnn) {
    Generator& g = gen_;
    src_embed_ = register_module("src_embed", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model, g));
    tgt_embed_ = register_module("tgt_embed", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model, g));
    encoder_ = register_module("encoder", std::make_shared<nn::RnnStack>(c.cell, c.d_model, c.hidden, c.layers, c.dropout, g));
    const int64_t dec_in = attention_ ? checked_add(c.d_model, c.hidden, "decoder input d_model + hidden")
                                      : c.d_model;  // input feeding
    decoder_ = register_module("decoder", std::make_shared<nn::RnnStack>(c.cell, dec_in, c.hidden, c.layers, c.dropout, g));
    if (attention_) {
      attn_ = register_module("attention", std::make_shared<nn::SeqAttention>(c.score, c.hidden, c.hidden, c.hidden, g));
      combine_ = register_module(
          "combine", std::make_shared<nn::Linear>(checked_mul(2, c.hidden, "attention combine 2 x hidden"),
                                                  c.hidden, g, false));
    }
    out_proj_ = register_module("out_proj", std::make_shared<nn::Linear>(c.hidden, c.vocab_size, g));
    drop_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  }

  Tensor logits(const data::Batch& batch) override {
    WeightPackScope pack_scope;  // the recurrent weights serve every time step: pack their panels once
    Encoded enc = encode(batch.src, batch.src_len);
    const Tensor emb = drop_->forward(tgt_embed_->forward(batch.tgt_in), gen_);  // [B, T, E]
    if (!attention_) {
      // The whole target in one call: the decoder's only view of the source is enc.states.
      const Tensor h = decoder_->forward(emb, {}, &enc.states, gen_);
      return out_proj_->forward(drop_->forward(h, gen_));
    }
    const int64_t B = batch.batch_size(), T = batch.tgt_in.size(1), E = config_.d_model, H = config_.hidden;
    std::vector<Tensor> outs, maps;
    Tensor feed = Tensor::zeros({B, H}, emb.dtype());
    // Layer 0's input is [embedding; feed]: its projection splits into the embedding half, one GEMM
    // for all T steps, and the feed half, the only part that has to wait for the previous step.
    const nn::RnnCell& cell0 = *decoder_->cells[0];
    const Tensor emb_proj = linear(emb, narrow(cell0.w_ih, 1, 0, E), cell0.b_ih);  // [B, T, G*H]
    const Tensor w_feed = contiguous(narrow(cell0.w_ih, 1, E, H));                  // [G*H, H], once
    for (int64_t t = 0; t < T; ++t) {
      const Tensor xe = reshape(narrow(emb_proj, 1, t, 1), {B, -1});  // a view
      const Tensor xp0 = t == 0 ? xe : add(xe, linear(feed, w_feed));  // feed is 0 at t = 0
      Tensor w;
      feed = attend(decoder_->step_projected(xp0, enc.states, gen_), enc, keep_ ? &w : nullptr);
      outs.push_back(feed);
      if (keep_) maps.push_back(w.detach());
    }
    if (keep_) last_map_ = stack(maps, 1);
    return out_proj_->forward(drop_->forward(stack(outs, 1), gen_));
  }

  Tensor encoder_states(const Tensor& src, const std::vector<int64_t>& src_len) override {
    return encode(src, src_len).outputs;
  }

  std::vector<std::vector<int32_t>> greedy_decode(const Tensor& src, const std::vector<int64_t>& src_len,
                                                  int64_t max_len) override {
    NoGrad no_grad;
    WeightPackScope pack_scope;
    const int64_t B = src.size(0);
    Encoded enc = encode(src, src_len);
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
    std::vector<bool> finished(static_cast<size_t>(B), false);
    std::vector<int32_t> prev(static_cast<size_t>(B), data::kBos);
    Tensor feed = Tensor::zeros({B, config_.hidden}, out_proj_->weight.dtype());
    std::vector<Tensor> maps;
    for (int64_t t = 0; t < max_len; ++t) {
      const Tensor emb = tgt_embed_->forward(Tensor::from_ids(prev, {B}));
      Tensor h;
      if (attention_) {
        Tensor w;
        feed = attend(decoder_->step(concat({emb, feed}, 1), enc.states, gen_), enc, keep_ ? &w : nullptr);
        if (keep_) maps.push_back(w);
        h = feed;
      } else {
        h = decoder_->step(emb, enc.states, gen_);
      }
      const std::vector<int32_t> next = argmax_rows(out_proj_->forward(h));
      bool all = true;
      for (int64_t b = 0; b < B; ++b) {
        if (!finished[size_t(b)]) {
          if (next[size_t(b)] == data::kEos) finished[size_t(b)] = true;
          else out[size_t(b)].push_back(next[size_t(b)]);
        }
        prev[size_t(b)] = next[size_t(b)];
        all = all && finished[size_t(b)];
      }
      if (all) break;
    }
    if (keep_ && !maps.empty()) last_map_ = stack(maps, 1);
    return out;
  }

  Tensor next_token_log_probs(const std::vector<int32_t>& src,
                              const std::vector<std::vector<int32_t>>& prefixes) override {
    // Re-runs the teacher-forced decoder over each prefix: simple, and cheap at these lengths.
    NoGrad no_grad;
    const int64_t N = int64_t(prefixes.size()), len = int64_t(prefixes[0].size());
    std::vector<data::Example> ex;
    for (const auto& p : prefixes) ex.push_back({src, std::vector<int32_t>(p.begin() + 1, p.end())});
    const data::Batch batch = data::make_batch(ex);
    const Tensor lg = logits(batch);  // [N, len, V]: position len-1 predicts the next token
    return log_softmax(reshape(narrow(lg, 1, len - 1, 1), {N, config_.vocab_size}));
  }

  void keep_attention(bool on) override { keep_ = on; }

  std::vector<std::pair<std::string, Tensor>> attention_head_maps() const override {
    if (!last_map_.defined()) return {};
    const Shape& shape = last_map_.shape();  // [B, T, S] -> one head: [B, 1, T, S]
    return {{"decoder.attention", reshape(last_map_, {shape[0], 1, shape[1], shape[2]})}};
  }

 private:
  struct Encoded {
    Tensor outputs, keys, mask;  // [B, S, H], attention's projected keys, additive [B, S]
    std::vector<nn::RnnState> states;
  };

  Encoded encode(const Tensor& src, const std::vector<int64_t>& src_len) {
    Encoded e;
    const Tensor emb = drop_->forward(src_embed_->forward(src), gen_);
    e.outputs = encoder_->forward(emb, src_len, &e.states, gen_);
    if (attention_) {
      e.keys = attn_->precompute(e.outputs);
      const Tensor mask = padding_mask_if_any(src, e.outputs.dtype());
      if (mask.defined()) e.mask = reshape(mask, {src.size(0), src.size(1)});
    }
    return e;
  }

  // tanh(W_c [h; context(h)])
  Tensor attend(const Tensor& h, const Encoded& enc, Tensor* weights) {
    const Tensor ctx = attn_->forward(h, enc.outputs, enc.keys, enc.mask, weights);
    return tanh(combine_->forward(concat({h, ctx}, 1)));
  }

  bool attention_;
  bool keep_ = false;
  Tensor last_map_;
  std::shared_ptr<nn::Embedding> src_embed_, tgt_embed_;
  std::shared_ptr<nn::RnnStack> encoder_, decoder_;
  std::shared_ptr<nn::SeqAttention> attn_;
  std::shared_ptr<nn::Linear> combine_, out_proj_;
  std::shared_ptr<nn::Dropout> drop_;
};

}  // namespace

std::unique_ptr<Seq2Seq> make_rnn_seq2seq(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<RnnSeq2Seq>(config, seed);
}

}  // namespace tapegrad::models
