// What every model shares: the loss, and beam search on top of next_token_log_probs.
#include <algorithm>
#include <cmath>

#include "src/models/models_internal.hpp"
#include "tapegrad/autograd.hpp"

namespace tapegrad::models {

std::vector<int32_t> argmax_rows(const Tensor& x) {
  const Tensor c = x.contiguous();
  const int64_t V = c.size(-1), N = c.numel() / V;
  std::vector<int32_t> out(static_cast<size_t>(N));
  const std::vector<double> v = c.to_vector();
  for (int64_t n = 0; n < N; ++n)
    out[size_t(n)] = int32_t(std::max_element(v.begin() + n * V, v.begin() + (n + 1) * V) - (v.begin() + n * V));
  return out;
}

Tensor padding_mask_if_any(const Tensor& ids, DType dtype) {
  const Tensor c = ids.contiguous();
  const int32_t* p = c.data<int32_t>();
  for (int64_t i = 0, n = c.numel(); i < n; ++i)
    if (p[i] == data::kPad) return nn::key_padding_mask(ids, dtype);
  return {};
}

Tensor Seq2Seq::loss(const data::Batch& batch, double label_smoothing) {
  return cross_entropy(logits(batch), batch.tgt_out, data::kPad, label_smoothing);
}

std::vector<std::pair<std::string, Tensor>> Seq2Seq::attention_maps() const {
  std::vector<std::pair<std::string, Tensor>> maps = attention_head_maps();
  for (auto& [name, weights] : maps) weights = mean(weights, 1);  // [B, H, Tq, Tk] -> [B, Tq, Tk]
  return maps;
}

std::vector<int32_t> Seq2Seq::beam_search(const std::vector<int32_t>& src, int64_t beam, int64_t max_len, double alpha) {
  NoGrad no_grad;
  struct Hyp {
    std::vector<int32_t> tokens;  // starts with <bos>
    double logp = 0;
  };
  // The length-normalised score of seq2seq.hpp: |y| counts the tokens after <bos> (<eos> included).
  auto score = [alpha](const Hyp& h) {
    const double len = double(h.tokens.size() - 1);
    return h.logp / std::pow(std::max(len, 1.0), alpha);
  };
  std::vector<Hyp> live{{{data::kBos}, 0.0}};
  std::vector<Hyp> done;
  for (int64_t t = 0; t < max_len && !live.empty(); ++t) {
    std::vector<std::vector<int32_t>> prefixes;
    for (const Hyp& h : live) prefixes.push_back(h.tokens);
    const std::vector<double> lp = next_token_log_probs(src, prefixes).to_vector();
    const int64_t V = int64_t(lp.size() / live.size());
    std::vector<Hyp> cand;
    for (size_t i = 0; i < live.size(); ++i)
      for (int64_t v = 0; v < V; ++v) {
        if (v == data::kPad || v == data::kBos) continue;
        Hyp h = live[i];
        h.tokens.push_back(int32_t(v));
        h.logp += lp[i * size_t(V) + size_t(v)];
        cand.push_back(std::move(h));
      }
    std::sort(cand.begin(), cand.end(), [](const Hyp& a, const Hyp& b) { return a.logp > b.logp; });
    live.clear();
    for (Hyp& h : cand) {
      if (int64_t(live.size()) >= beam) break;
      if (h.tokens.back() == data::kEos) done.push_back(std::move(h));
      else live.push_back(std::move(h));
    }
    if (int64_t(done.size()) >= beam) break;
  }
  for (Hyp& h : live) done.push_back(std::move(h));
  const Hyp* best = nullptr;
  for (const Hyp& h : done)
    if (!best || score(h) > score(*best)) best = &h;
  std::vector<int32_t> out;
  if (best)
    for (size_t i = 1; i < best->tokens.size() && best->tokens[i] != data::kEos; ++i) out.push_back(best->tokens[i]);
  return out;
}

}  // namespace tapegrad::models
