/// @file
/// A decoder-only language model, the GPT-2 / nanoGPT architecture, built from the Transformer's own
/// blocks (nn::EncoderLayer with causal self-attention and its KvCache, nn::FeedForward, nn::LayerNorm):
/// ```
///   x = tok_embed(ids) + pos_embed(positions)          learned positions, no sqrt(d) scaling
///   x = block_l(x), l = 0 .. L-1                        pre-LN: x + attn(ln1(x)), x + mlp(ln2(x))
///   logits = norm(x) E^T                                the token table is the output projection
/// ```
/// The MLP is 4 x d_model wide with the exact (erf) GELU; no linear or layer norm has a bias (nanoGPT's
/// bias=False Shakespeare configuration). The block size is the config's max_len. Weights start as in
/// nanoGPT's model.py: every matrix normal(0, 0.02), the two residual output projections of each block
/// (attention out_proj, MLP linear2) normal(0, 0.02 / sqrt(2 L)), norm scales 1.
///
/// As a Seq2Seq it trains on batches of text blocks: tgt_in = ids[o, o + N), tgt_out = ids[o + 1, o + N + 1)
/// (data::make_block_batch), with an empty source. Parameters: "tok_embed.weight", "pos_embed.weight",
/// "layers.L.*" (an EncoderLayer each), "norm.weight".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tapegrad/models/seq2seq.hpp"

namespace tapegrad::models {

/// The decoder-only model (see models/gpt.hpp). Build it with make_model (kind gpt).
class Gpt : public Seq2Seq {
 public:
  /// The architecture of `c` (kind gpt; d_ff, positional, norm_first, activation and tie_embeddings
  /// are fixed by the architecture and ignored), weights drawn from `seed` as nanoGPT draws them.
  Gpt(const ModelConfig& c, uint64_t seed);
  /// ids int32 [B, T] at positions offset .. offset + T - 1 (at most the block size) -> logits [B, T, V].
  /// caches: one per block for incremental decoding (NoGrad): T = 1, or a whole prefix while empty.
  Tensor forward(const Tensor& ids, std::vector<nn::KvCache>* caches = nullptr, int64_t offset = 0);
  int64_t block_size() const { return config_.max_len; }  ///< Longest context the positions cover.
  int64_t layers() const { return int64_t(blocks_.size()); }  ///< Blocks L.

  /// forward(batch.tgt_in); a batch with a source is refused (Error): text blocks have none.
  Tensor logits(const data::Batch& batch) override;
  /// Error: a decoder-only model has no encoder.
  Tensor encoder_states(const Tensor& src, const std::vector<int64_t>& src_len) override;
  /// Greedy continuation of each source (its real tokens, as the prompt), max_len tokens each.
  std::vector<std::vector<int32_t>> greedy_decode(const Tensor& src, const std::vector<int64_t>& src_len,
                                                  int64_t max_len) override;
  /// Next-token log-probabilities after src followed by each prefix (its leading `<bos>` dropped),
  /// cropped to the last block_size() tokens.
  Tensor next_token_log_probs(const std::vector<int32_t>& src,
                              const std::vector<std::vector<int32_t>>& prefixes) override;
  void keep_attention(bool on) override;  ///< Keeps every block's self-attention weights.
  /// "layers.L.self_attn" per block, [B, H, T, T].
  std::vector<std::pair<std::string, Tensor>> attention_head_maps() const override;

 private:
  std::shared_ptr<nn::Embedding> tok_embed_;
  std::shared_ptr<nn::PositionalEncoding> pos_embed_;
  std::vector<std::shared_ptr<nn::EncoderLayer>> blocks_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Dropout> drop_;
};

/// How generate picks each next token.
struct GenerateOptions {
  int64_t max_new_tokens = 100;  ///< tokens appended to the prompt
  /// Logits are divided by it before sampling; 0 means greedy (the most likely token).
  double temperature = 1.0;
  int64_t top_k = 0;  ///< sample among the k most likely tokens only (0: all; 1: greedy)
  uint64_t seed = 1;  ///< the sampling generator's seed: one seed, one text
  /// true: a KV cache per block, one position per new token while the text fits the block; false:
  /// the whole (cropped) context recomputed for every token.
  bool use_cache = true;
};

/// The prompt (ids, at least one) followed by options.max_new_tokens sampled tokens. The context of
/// each prediction is the last block_size() tokens, as nanoGPT crops it. With the cache, the prompt
/// (cropped) is prefilled in one pass and each new token costs one position; once the text outgrows
/// the block, every position of the window shifts by one with each token, so the cached keys and
/// values (computed at the old positions) no longer apply and the cache is refilled from the cropped
/// window: past the block size the cached path does what the uncached one does, and both give the
/// same tokens. Runs under NoGrad in eval mode (the mode is restored). Throws Error on an empty
/// prompt or a negative max_new_tokens, temperature or top_k.
std::vector<int32_t> generate(Gpt& model, const std::vector<int32_t>& prompt, const GenerateOptions& options);

}  // namespace tapegrad::models
