// The decoder-only language model (include/tapegrad/models/gpt.hpp): token and learned position
// embeddings, pre-LN causal EncoderLayer blocks, a final norm and the tied output projection; and
// sampling from it with or without the blocks' KV caches.
#include "tapegrad/models/gpt.hpp"

#include <algorithm>
#include <cmath>

#include "src/models/models_internal.hpp"
#include "tapegrad/autograd.hpp"

namespace tapegrad::models {

Gpt::Gpt(const ModelConfig& c, uint64_t seed) : Seq2Seq(c, seed) {
  Generator& g = gen_;
  tok_embed_ = register_module("tok_embed", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model, g));
  pos_embed_ = register_module(
      "pos_embed", std::make_shared<nn::PositionalEncoding>(nn::PositionalKind::learned, c.max_len, c.d_model, g));
  const nn::TransformerLayerOptions o{.dim = c.d_model,
                                      .heads = c.heads,
                                      .ff_dim = 4 * c.d_model,
                                      .dropout = c.dropout,
                                      .activation = nn::Activation::gelu_exact,
                                      .norm_first = true,
                                      .bias = false};
  for (int64_t l = 0; l < c.layers; ++l)
    blocks_.push_back(register_module("layers." + std::to_string(l), std::make_shared<nn::EncoderLayer>(o, g)));
  norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(c.d_model, 1e-5, false));
  drop_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  // nanoGPT's initialisation, drawn again over what the layers drew (in registration order): matrices
  // normal(0, 0.02); the projections that write into the residual stream scaled down by sqrt(2 L),
  // since 2 L of them add up along it. Norm scales stay 1.
  const double residual_std = 0.02 / std::sqrt(2.0 * double(c.layers));
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  NoGrad no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p.ndim() < 2) continue;
    const bool residual = ends_with(name, "self_attn.out_proj.weight") || ends_with(name, "ff.linear2.weight");
    Tensor t = p;
    t.copy_from(Tensor::randn(p.shape(), g, p.dtype(), 0.0, residual ? residual_std : 0.02));
  }
}

Tensor Gpt::forward(const Tensor& ids, std::vector<nn::KvCache>* caches, int64_t offset) {
  Tensor x = drop_->forward(pos_embed_->forward(tok_embed_->forward(ids), offset), gen_);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    nn::KvCache* cache = caches ? &(*caches)[l] : nullptr;
    x = run_layer(config_.checkpoint_layers && !cache, gen_,
                  [block = blocks_[l], cache, gen = &gen_](const std::vector<Tensor>& in) {
                    return block->forward(in[0], {}, *gen, /*causal=*/true, cache);
                  },
                  {x});
  }
  return linear(norm_->forward(x), tok_embed_->weight, Tensor());
}

Tensor Gpt::logits(const data::Batch& batch) {
  for (int64_t len : batch.src_len)
    if (len > 0)
      throw Error("gpt: a batch with a source (" + std::to_string(len) +
                  " tokens); a language model trains on text blocks (train --text FILE)");
  return forward(batch.tgt_in);
}

Tensor Gpt::encoder_states(const Tensor&, const std::vector<int64_t>&) {
  throw Error("gpt: a decoder-only model has no encoder states");
}

namespace {

// The last `n` tokens of `ids` (all of them when fewer).
std::vector<int32_t> last_tokens(const std::vector<int32_t>& ids, int64_t n) {
  return {ids.end() - std::min<int64_t>(n, int64_t(ids.size())), ids.end()};
}

// The next-token logits of the last position of logits [1, T, V], as doubles; the specials (<pad>,
// <bos>, <eos>, <unk>) never occur in text, so they are never generated.
std::vector<double> last_row(const Tensor& logits) {
  const int64_t T = logits.size(1), V = logits.size(2);
  std::vector<double> row = reshape(narrow(logits, 1, T - 1, 1), {V}).to_vector();
  for (int32_t special = 0; special <= data::kUnk && special < V; ++special) row[size_t(special)] = -INFINITY;
  return row;
}

// nanoGPT's sampling: logits / temperature, all but the top_k largest set to -inf (ties with the k-th
// kept), softmax, one draw. Greedy (the first largest) for temperature 0 or top_k 1.
int32_t pick(std::vector<double> logits, const GenerateOptions& o, Generator& gen) {
  const auto largest = std::max_element(logits.begin(), logits.end());  // a real token: V > 4
  if (o.temperature == 0 || o.top_k == 1) return int32_t(largest - logits.begin());
  const int64_t V = int64_t(logits.size());
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(o.top_k - 1)];
    for (double& l : logits)
      if (l < kth) l = -INFINITY;
  }
  const double top = *largest / o.temperature;
  double total = 0;
  for (double& l : logits) total += (l = std::isinf(l) ? 0.0 : std::exp(l / o.temperature - top));
  double u = gen.uniform() * total;
  for (int64_t v = 0; v < V; ++v)
    if ((u -= logits[size_t(v)]) < 0 && logits[size_t(v)] > 0) return int32_t(v);
  for (int64_t v = V - 1; v >= 0; --v)  // rounding left u just above 0: the last token with mass
    if (logits[size_t(v)] > 0) return int32_t(v);
  return int32_t(largest - logits.begin());
}

}  // namespace

std::vector<int32_t> generate(Gpt& model, const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  if (prompt.empty()) throw Error("generate: the prompt is empty (it needs at least one token)");
  if (o.max_new_tokens < 0 || !(o.temperature >= 0) || o.top_k < 0)
    throw Error("generate: max_new_tokens, temperature and top_k must not be negative");
  NoGrad no_grad;
  const bool was_training = model.training();
  model.eval();
  const int64_t block = model.block_size();
  Generator gen(o.seed);
  std::vector<int32_t> ids = prompt;
  std::vector<nn::KvCache> caches(size_t(model.layers()));
  int64_t window = 0;  // ids[window ..] is the context the cache holds
  // A fresh pass over the last `block` tokens (refilling the caches when they are in use).
  auto whole_window = [&] {
    const std::vector<int32_t> ctx = last_tokens(ids, block);
    window = int64_t(ids.size() - ctx.size());
    for (auto& c : caches) c = nn::KvCache{block, 0, {}, {}};
    return model.forward(Tensor::from_ids(ctx, {1, int64_t(ctx.size())}), o.use_cache ? &caches : nullptr);
  };
  Tensor logits = whole_window();
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int32_t next = pick(last_row(logits), o, gen);
    ids.push_back(next);
    if (n + 1 == o.max_new_tokens) break;
    if (o.use_cache && int64_t(ids.size()) - window <= block)
      logits = model.forward(Tensor::from_ids({next}, {1, 1}), &caches, int64_t(ids.size()) - 1 - window);
    else
      logits = whole_window();
  }
  model.train(was_training);
  return ids;
}

std::vector<std::vector<int32_t>> Gpt::greedy_decode(const Tensor& src, const std::vector<int64_t>& src_len,
                                                     int64_t max_len) {
  const Tensor c = src.contiguous();
  const int32_t* p = c.data<int32_t>();
  std::vector<std::vector<int32_t>> out;
  for (int64_t b = 0; b < src.size(0); ++b) {
    std::vector<int32_t> prompt(p + b * src.size(1), p + b * src.size(1) + src_len[size_t(b)]);
    if (prompt.empty()) prompt.push_back(data::kBos);
    const std::vector<int32_t> ids = generate(*this, prompt, {.max_new_tokens = max_len, .temperature = 0});
    out.emplace_back(ids.begin() + int64_t(prompt.size()), ids.end());
  }
  return out;
}

Tensor Gpt::next_token_log_probs(const std::vector<int32_t>& src, const std::vector<std::vector<int32_t>>& prefixes) {
  NoGrad no_grad;
  std::vector<int32_t> flat;
  int64_t len = 0;
  for (const auto& prefix : prefixes) {
    std::vector<int32_t> ctx = src;
    ctx.insert(ctx.end(), prefix.begin() + (prefix.empty() || prefix[0] != data::kBos ? 0 : 1), prefix.end());
    if (ctx.empty()) ctx.push_back(data::kBos);
    ctx = last_tokens(ctx, block_size());
    len = int64_t(ctx.size());
    flat.insert(flat.end(), ctx.begin(), ctx.end());
  }
  const int64_t N = int64_t(prefixes.size());
  const Tensor lg = forward(Tensor::from_ids(flat, {N, len}));
  return log_softmax(reshape(narrow(lg, 1, len - 1, 1), {N, config_.vocab_size}));
}

void Gpt::keep_attention(bool on) {
  for (auto& b : blocks_) b->self_attn->keep_weights(on);
}

std::vector<std::pair<std::string, Tensor>> Gpt::attention_head_maps() const {
  std::vector<std::pair<std::string, Tensor>> maps;
  for (size_t l = 0; l < blocks_.size(); ++l)
    if (blocks_[l]->self_attn->last_weights().defined())
      maps.emplace_back("layers." + std::to_string(l) + ".self_attn", blocks_[l]->self_attn->last_weights());
  return maps;
}

}  // namespace tapegrad::models
