/// @file
/// The three sequence-to-sequence models of the path Vanilla Seq2Seq -> Attention Seq2Seq -> Transformer.
///
/// ```
///   rnn:           RNN encoder; the decoder starts from the encoder's final state and sees nothing else
///                  of the source (the bottleneck).
///   attention-rnn: the same, plus attention over all encoder states at every decoder step (Luong-style
///                  with input feeding; additive (Bahdanau), general or dot scoring).
///   transformer:   encoder-decoder Transformer: N layers each side, multi-head self-attention, masked
///                  decoder self-attention, cross-attention, sin/cos or learned positions.
///   gpt:           decoder-only language model (GPT-2 / nanoGPT) on the same blocks: see models/gpt.hpp.
/// ```
/// Each has a teacher-forced loss, greedy decoding and beam search. One vocabulary serves both sides.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tapegrad/data.hpp"
#include "tapegrad/nn/attention.hpp"
#include "tapegrad/nn/rnn.hpp"
#include "tapegrad/nn/transformer.hpp"

/// The seq2seq models (see models/seq2seq.hpp).
namespace tapegrad::models {

/// Which model (see models/seq2seq.hpp): the three seq2seq models, or the decoder-only gpt.
enum class ModelKind { rnn, attention_rnn, transformer, gpt };
/// "rnn", "attention-rnn", "transformer" or "gpt".
const char* model_name(ModelKind k);
/// "rnn" | "attention-rnn" | "transformer" | "gpt"; throws Error naming the choices for anything else.
ModelKind parse_model(const std::string& name);

/// How messages name a config's fields: as CLI options ("--d-model 0: ...") or as the fields of the
/// config JSON stored in checkpoints ("d_model 0: ...").
enum class ConfigNames { cli, json };

/// Longest sequence a model may be configured for (max_len): far beyond any real use, small enough
/// that position tables of any sane width fit in memory.
inline constexpr int64_t kMaxPositions = int64_t(1) << 20;

/// Everything that fixes a model's architecture; stored in checkpoints as JSON.
struct ModelConfig {
  ModelKind kind = ModelKind::transformer;  ///< which model
  int64_t vocab_size = 0;                   ///< V, shared by source and target (set from the data)
  int64_t d_model = 128;                    ///< embedding width (all models) and Transformer width
  int64_t layers = 2;                       ///< per side
  double dropout = 0.1;                     ///< everywhere the model has dropout, in [0, 1)
  // Transformer
  int64_t heads = 4;   ///< Transformer: attention heads, dividing d_model
  int64_t d_ff = 512;  ///< Transformer: feed-forward width
  nn::PositionalKind positional = nn::PositionalKind::sinusoidal;  ///< Transformer: position encoding
  bool norm_first = false;  ///< Transformer: pre-LN when true (post-LN, the paper's, otherwise)
  nn::Activation activation = nn::Activation::relu;  ///< Transformer: feed-forward activation
  int64_t max_len = 512;  ///< Transformer: positions the position tables hold; gpt: its block size
  /// Transformer only: one [V, d_model] table serves as source embedding, target embedding and the
  /// output projection's weight (logits = x E^T, no bias), as in "Attention Is All You Need"; source
  /// and target share one vocabulary here, so all three are tied. Off: two embeddings and an output
  /// projection with its own weight and bias.
  bool tie_embeddings = false;
  // RNN models
  nn::CellKind cell = nn::CellKind::gru;                    ///< RNN models: the recurrent cell
  int64_t hidden = 256;                                     ///< RNN models: hidden size H
  nn::AttentionScore score = nn::AttentionScore::additive;  ///< attention-rnn: the score function
  /// Transformer and gpt: each encoder layer, decoder layer and block runs under checkpoint()
  /// (functional.hpp), so training keeps only the layers' inputs and recomputes the rest in backward
  /// (dropout masks drawn again from the model's generator). Not architecture: it changes no result,
  /// only the memory and time of a training step; stored, and read as false when absent.
  bool checkpoint_layers = false;

  /// The JSON version to_json writes ("version"). Version 1 (no "version" field) stored the general
  /// attention score as "dot" and had no "tie_embeddings" field (read as false).
  static constexpr int64_t kJsonVersion = 2;
  /// The config as a JSON object, one field per member (what from_json reads).
  std::string to_json() const;
  /// Parses and validate()s; throws Error naming the bad field.
  static ModelConfig from_json(const std::string& json);
  /// The rules every config obeys, without building anything: sizes positive, d_model divisible by
  /// heads (transformer), dropout in [0, 1), max_len at most kMaxPositions, tie_embeddings only for
  /// the transformer, checkpoint_layers only for the transformer and gpt. Throws Error naming the
  /// field as `names` says.
  void validate(ConfigNames names = ConfigNames::json) const;
};

/// Parameters of make_model(config), in closed form (nothing is allocated); validates first. Throws
/// Error naming the field that makes the count overflow 64 bits.
int64_t parameter_count(const ModelConfig& config, ConfigNames names = ConfigNames::cli);
/// parameter_count x 4 (parameters are float32).
int64_t parameter_bytes(const ModelConfig& config, ConfigNames names = ConfigNames::cli);
/// Peak bytes of the constant tensors make_model builds besides parameters (sinusoidal position tables).
int64_t buffer_bytes(const ModelConfig& config, ConfigNames names = ConfigNames::cli);
/// validate(), then refuses a model whose parameters and tables exceed what this machine can hold
/// (memory::machine_limit_bytes: physical memory or ulimit -v), with OutOfMemory naming the field
/// that makes it large: "--d-model 1000000000: the model would need 56.0 GB of parameters, more than
/// the 15.6 GB this machine can hold". make_model calls it; call it earlier to refuse before other work.
void check_config(const ModelConfig& config, ConfigNames names = ConfigNames::cli);

/// The interface the three models share: a teacher-forced loss for training and decoding for
/// inference. Build one with make_model. Sources and targets are ids of one vocabulary (data::Vocab).
class Seq2Seq : public nn::Module {
 public:
  /// For subclasses: keeps `c` and seeds the model's generator with `seed`.
  explicit Seq2Seq(const ModelConfig& c, uint64_t seed) : config_(c), gen_(seed) {}
  /// Teacher-forced logits [B, T, V] for predicting batch.tgt_out from batch.tgt_in.
  virtual Tensor logits(const data::Batch& batch) = 0;
  /// Mean cross-entropy over the non-pad target tokens.
  Tensor loss(const data::Batch& batch, double label_smoothing = 0.0);
  /// The encoder's output for src [B, S] (`<pad>`-padded, real lengths src_len): [B, S, C], the states the
  /// decoder attends over (Transformer: after the final norm when pre-LN; RNN models: the top layer's).
  virtual Tensor encoder_states(const Tensor& src, const std::vector<int64_t>& src_len) = 0;
  /// Greedy decoding of src [B, S] (lengths src_len): up to max_len tokens each, stopping at `<eos>`.
  virtual std::vector<std::vector<int32_t>> greedy_decode(const Tensor& src, const std::vector<int64_t>& src_len,
                                                          int64_t max_len) = 0;
  /// Beam search for one source sequence; returns the best hypothesis (without `<bos>`/`<eos>`).
  /// Keeps the `beam` most probable prefixes each step and stops when `beam` hypotheses have ended
  /// (or after max_len tokens); the ended and the live ones are then ranked by the length-normalised
  /// score log P(y) / max(|y|, 1)^alpha, where |y| counts the generated tokens including `<eos>`.
  /// alpha = 0 ranks by log-probability alone, which favours short outputs; alpha = 1 by the mean
  /// log-probability per token; values in between (the default 0.6) trade the two.
  std::vector<int32_t> beam_search(const std::vector<int32_t>& src, int64_t beam, int64_t max_len,
                                   double alpha = 0.6);
  /// Log-probabilities of the next token for each prefix in `prefixes` (all of one length, starting
  /// with `<bos>`) given the same source: [N, V]. Used by beam search.
  virtual Tensor next_token_log_probs(const std::vector<int32_t>& src,
                                      const std::vector<std::vector<int32_t>>& prefixes) = 0;
  /// Attention weights of the last forward pass (for heatmaps), when kept: see keep_attention.
  /// Off by default; training never stores them.
  virtual void keep_attention(bool on) = 0;
  /// Named attention maps per head, each [B, H, Tq, Tk] (H = 1 for the attention RNN's single attention).
  virtual std::vector<std::pair<std::string, Tensor>> attention_head_maps() const = 0;
  /// The same maps averaged over heads, each [B, Tq, Tk].
  std::vector<std::pair<std::string, Tensor>> attention_maps() const;

  const ModelConfig& config() const { return config_; }  ///< As built.
  /// The model's own generator (dropout masks), saved in checkpoints so a resume is exact.
  Generator& generator() { return gen_; }

 protected:
  ModelConfig config_;  ///< the architecture, as given
  Generator gen_;       ///< dropout's generator, seeded at construction
};

/// Builds the model `config` describes (check_config first: Error or OutOfMemory naming the field),
/// weights drawn from `seed`. Returned in training mode.
std::unique_ptr<Seq2Seq> make_model(const ModelConfig& config, uint64_t seed);

}  // namespace tapegrad::models
