// Multi-head scaled dot-product attention and the additive / general / dot attention of RNN seq2seq.
#include "tapegrad/nn/attention.hpp"

#include <cmath>

#include "tapegrad/autograd.hpp"
#include "tapegrad/data.hpp"

namespace tapegrad::nn {

Tensor key_padding_mask(const Tensor& ids, DType dtype) {
  if (ids.dtype() != DType::i32 || ids.ndim() != 2)
    throw ShapeError("key_padding_mask: expected int32 ids [B, S], got " + ids.describe());
  const Tensor c = ids.contiguous();
  const int32_t* p = c.data<int32_t>();
  std::vector<double> m(size_t(c.numel()));
  for (size_t i = 0; i < m.size(); ++i) m[i] = p[i] == data::kPad ? -1e9 : 0.0;
  return Tensor::from_vector(m, {ids.size(0), 1, 1, ids.size(1)}, dtype);
}

MultiHeadAttention::MultiHeadAttention(int64_t dim, int64_t heads, double dropout, Generator& gen, bool bias)
    : dim_(dim), heads_(heads) {
  if (heads <= 0 || dim % heads != 0)
    throw ShapeError("MultiHeadAttention: d_model " + std::to_string(dim) + " is not divisible by heads " +
                     std::to_string(heads));
  q_proj = register_module("q_proj", std::make_shared<Linear>(dim, dim, gen, bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(dim, dim, gen, bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(dim, dim, gen, bias));
  out_proj = register_module("out_proj", std::make_shared<Linear>(dim, dim, gen, bias));
  drop_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

namespace {

// Appends the keys ([B, H, dk, n]) and values ([B, H, n, dk]) of positions cache.len .. cache.len + n - 1
// to the cache buffers.
template <class T>
void append_kv(KvCache& cache, const Tensor& kt_new, const Tensor& v_new) {
  const Tensor kn = kt_new.contiguous(), vn = v_new.contiguous();
  const int64_t BH = kn.size(0) * kn.size(1), dk = kn.size(2), n = kn.size(3), cap = cache.capacity,
                t = cache.len;
  const T *k = kn.data<T>(), *v = vn.data<T>();
  T *kd = cache.kt.data<T>(), *vd = cache.v.data<T>();
  for (int64_t i = 0; i < BH; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = 0; d < dk; ++d) {
        kd[(i * dk + d) * cap + t + j] = k[(i * dk + d) * n + j];
        vd[(i * cap + t + j) * dk + d] = v[(i * n + j) * dk + d];
      }
}

}  // namespace

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& memory, const Tensor& mask, bool causal,
                                   Generator& gen, KvCache* cache) {
  if (query.ndim() != 3 || memory.ndim() != 3 || query.size(2) != dim_ || memory.size(2) != dim_ ||
      query.size(0) != memory.size(0))
    throw ShapeError("MultiHeadAttention: expected query [B,Tq," + std::to_string(dim_) +
                     "] and memory [B,Tk," + std::to_string(dim_) +
                     "], got query=" + to_string(query.shape()) + " memory=" + to_string(memory.shape()));
  const int64_t B = query.size(0), Tq = query.size(1), Tk = memory.size(1), H = heads_, dk = dim_ / heads_;
  // Projections that read the same input share one GEMM (Q, K, V for self-attention; K, V for
  // cross-attention): the weights are stacked ([nC, C], a cheap copy per forward) and each
  // projection is a column range of the [B, T, nC] result. Parameters stay separate, so checkpoints
  // and names are unchanged. Views only below: heads split off the feature axis, [B, T, H, dk].
  const bool biased = q_proj->bias.defined() && k_proj->bias.defined() && v_proj->bias.defined();
  // Stacking needs all three biased or none (GPT-2's bias-free form).
  const bool stack = biased || (!q_proj->bias.defined() && !k_proj->bias.defined() && !v_proj->bias.defined());
  auto project = [&](const Tensor& x, std::initializer_list<const Linear*> ps) {
    std::vector<Tensor> ws, bs;
    for (const Linear* p : ps) ws.push_back(p->weight), bs.push_back(p->bias);
    return linear(x, concat(ws, 0), biased ? concat(bs, 0) : Tensor());
  };
  auto part = [&](const Tensor& y, int i, int64_t T) {
    return narrow(y, 2, i * dim_, dim_).reshape({B, T, H, dk});
  };
  auto split_heads = [&](const Tensor& y, int64_t T) { return y.reshape({B, T, H, dk}); };
  const bool self = query.same(memory);
  if (cache && (grad_enabled() || (self && Tq != 1 && cache->len != 0)))
    throw Error(
        "MultiHeadAttention: a KV cache is for inference (NoGrad) one position at a time, got query=" +
        to_string(query.shape()));
  const double scale = 1.0 / std::sqrt(double(dk));
  Tensor q, k, v;  // [B, T, H, dk] views of the projections (k, v undefined when the cache holds them)
  // The stacked projections: qkv [B,T,3C] (stacked_kv undefined), or q [B,Tq,C] and kv [B,Tk,2C].
  Tensor stacked_q, stacked_kv;
  if (cache && !self && cache->len > 0) {  // cross-attention: memory's keys and values from the first step
    q = split_heads(q_proj->forward(query), Tq);
  } else if (self && stack) {
    stacked_q = project(query, {q_proj.get(), k_proj.get(), v_proj.get()});
  } else if (stack) {
    stacked_q = q_proj->forward(query), stacked_kv = project(memory, {k_proj.get(), v_proj.get()});
  } else {
    q = split_heads(q_proj->forward(query), Tq);
    k = split_heads(k_proj->forward(memory), Tk), v = split_heads(v_proj->forward(memory), Tk);
  }
  // The fused op takes the stacked projections themselves; the unfused ops (and inspection) take
  // views of them, made only then.
  auto split_stacked = [&] {
    if (!stacked_q.defined()) return;
    if (stacked_kv.defined())
      q = split_heads(stacked_q, Tq), k = part(stacked_kv, 0, Tk), v = part(stacked_kv, 1, Tk);
    else
      q = part(stacked_q, 0, Tq), k = part(stacked_q, 1, Tk), v = part(stacked_q, 2, Tk);
  };
  const bool dropping = drop_->training() && drop_->p() > 0;
  const bool fused = !cache && path_ != AttentionPath::unfused;
  if (fused) {  // the rule: AttentionPath (attention.hpp)
    // The fused op reads the heads in place, keeps no [B,H,Tq,Tk] weights for backward and draws
    // the dropout mask the unfused path would (same generator draw, same counter-based mask over the
    // [B,H,Tq,Tk] weights), so both paths compute the same thing. On stacked projections its
    // backward writes the gradients into the stacked tensors' directly.
    const AttentionSpec spec{scale, mask, causal, dropping ? drop_->p() : 0.0, dropping ? gen.next_u64() : 0};
    const Tensor o = stacked_q.defined()
                         ? scaled_dot_product_attention_stacked(stacked_q, stacked_kv, H, spec)
                         : scaled_dot_product_attention(q, k, v, spec);  // [B,Tq,H,dk]
    if (keep_weights_) {  // inspection: the weights (before dropout) recomputed, off the tape
      NoGrad no_grad;
      split_stacked();
      last_weights_ =
          softmax(matmul(q.permute({0, 2, 1, 3}), k.permute({0, 2, 3, 1})), {scale, mask, causal});
    }
    return out_proj->forward(o.reshape({B, Tq, dim_}));
  }
  split_stacked();
  // Unfused: heads to dim 1 as views, k as k^T so GEMM reads it transposed. The KV cache holds the
  // same layouts, k^T [B,H,dk,T] and v [B,H,T,dk].
  Tensor qh = q.permute({0, 2, 1, 3}), kt, vh;  // [B,H,Tq,dk]
  if (k.defined()) kt = k.permute({0, 2, 3, 1}), vh = v.permute({0, 2, 1, 3});
  if (cache && self) {  // append this position, attend over all so far (causality holds by construction)
    if (cache->len == 0) {
      cache->kt = Tensor::zeros({B, H, dk, cache->capacity}, query.dtype());
      cache->v = Tensor::zeros({B, H, cache->capacity, dk}, query.dtype());
    }
    if (cache->len + Tq > cache->capacity || cache->kt.size(0) != B)
      throw ShapeError("MultiHeadAttention: KV cache of " + std::to_string(cache->capacity) +
                       " positions for batch " + std::to_string(cache->kt.size(0)) +
                       " is full or of another batch (query=" + to_string(query.shape()) + ")");
    if (query.dtype() == DType::f64)
      append_kv<double>(*cache, kt, vh);
    else
      append_kv<float>(*cache, kt, vh);
    cache->len += Tq;
    kt = narrow(cache->kt, 3, 0, cache->len);
    vh = narrow(cache->v, 2, 0, cache->len);
    causal = Tq > 1;  // a prefill (the cache was empty): queries and keys are the same positions
  } else if (cache && cache->len == 0) {
    cache->kt = kt.contiguous(), cache->v = vh.contiguous(), cache->len = Tk;
  } else if (cache) {
    kt = cache->kt, vh = cache->v;
  }
  const Tensor weights = softmax(matmul(qh, kt), {scale, mask, causal});  // [B,H,Tq,Tk]
  if (keep_weights_) last_weights_ = weights.detach().clone();
  const Tensor o = matmul(drop_->forward(weights, gen), vh);  // [B,H,Tq,dk]
  return out_proj->forward(o.permute({0, 2, 1, 3}).reshape({B, Tq, dim_}));
}

const char* score_name(AttentionScore s) {
  switch (s) {
    case AttentionScore::additive: return "additive";
    case AttentionScore::general: return "general";
    case AttentionScore::dot: return "dot";
  }
  return "?";
}

AttentionScore parse_score(const std::string& name) {
  if (name == "additive" || name == "bahdanau") return AttentionScore::additive;
  if (name == "general" || name == "luong") return AttentionScore::general;
  if (name == "dot") return AttentionScore::dot;
  throw Error("attention: unknown scoring '" + name + "' (expected additive, general or dot)");
}

SeqAttention::SeqAttention(AttentionScore score, int64_t query_dim, int64_t key_dim, int64_t attn_dim,
                           Generator& gen)
    : score_(score) {
  if (score == AttentionScore::additive) {
    query_proj_ = register_module("query_proj", std::make_shared<Linear>(query_dim, attn_dim, gen, false));
    key_proj_ = register_module("key_proj", std::make_shared<Linear>(key_dim, attn_dim, gen));
    const double bound = 1.0 / std::sqrt(double(attn_dim));
    v_ = register_parameter("v", Tensor::rand({attn_dim}, gen, DType::f32, -bound, bound));
  } else if (score == AttentionScore::general) {
    key_proj_ = register_module("key_proj", std::make_shared<Linear>(key_dim, query_dim, gen, false));
  } else if (query_dim != key_dim) {
    throw ShapeError("attention dot: scoring s^T h_j needs the query size (" + std::to_string(query_dim) +
                     ") to equal the key size (" + std::to_string(key_dim) + "); use general or additive");
  }
}

Tensor SeqAttention::precompute(const Tensor& keys) const {
  return key_proj_ ? key_proj_->forward(keys) : keys;
}

Tensor SeqAttention::forward(const Tensor& query, const Tensor& keys, const Tensor& projected,
                             const Tensor& mask, Tensor* weights_out) const {
  const int64_t B = keys.size(0), S = keys.size(1);
  Tensor scores;  // [B, S]
  if (score_ == AttentionScore::additive) {
    // e_j = v^T tanh(W_q s + W_k h_j)
    scores = additive_score(projected, query_proj_->forward(query), v_);  // fused: no [B, S, A] kept
  } else {
    // general: e_j = (W h_j)^T s; dot: e_j = h_j^T s (projected is keys)
    scores = matmul(projected, query.reshape({B, -1, 1})).reshape({B, S});
  }
  const Tensor w = softmax(scores, {1.0, mask, false});
  if (weights_out) *weights_out = w;
  return matmul(w.reshape({B, 1, S}), keys).reshape({B, -1});
}

}  // namespace tapegrad::nn
