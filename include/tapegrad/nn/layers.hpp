/// @file
/// Basic layers: Linear, Embedding, LayerNorm, Dropout, positional encodings, position-wise
/// feed-forward. Shapes: B batch, T time, C = d_model features.
#pragma once

#include <string>

#include "tapegrad/nn/module.hpp"
#include "tapegrad/ops.hpp"

namespace tapegrad::nn {

/// y = x W^T + b; W [out, in] initialised uniform(+-1/sqrt(in)) like PyTorch's default.
/// The bias is initialised the same way.
class Linear : public Module {
 public:
  /// `in` input and `out` output features, drawn from `gen`; no bias parameter when `bias` is false.
  Linear(int64_t in, int64_t out, Generator& gen, bool bias = true);
  /// x [.., in] -> [.., out].
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  /// Parameters "weight" [out, in] and "bias" [out] (undefined without bias).
  /// @{
  Tensor weight, bias;
  /// @}
};

/// table [V, C] ~ N(0, std^2); forward(ids [..]) -> [.., C]
class Embedding : public Module {
 public:
  /// A `vocab` x `dim` table drawn from `gen`.
  Embedding(int64_t vocab, int64_t dim, Generator& gen, double std = 1.0);
  /// int32 ids [..] -> [.., C]; an id outside [0, V) throws IndexError.
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids); }
  Tensor weight;  ///< parameter "weight" [V, C]
};

/// Layer normalisation over the last axis with a learned scale and shift (init 1 and 0).
class LayerNorm : public Module {
 public:
  /// Normalises `dim` features; `eps` is added to the variance. Without `with_bias` there is no shift
  /// parameter (GPT-2 / nanoGPT's bias=False form): y = norm(x) * weight.
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool with_bias = true);
  /// x [.., C] -> [.., C].
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps_); }
  /// Parameters "weight" [C] (ones) and "bias" [C] (zeros; undefined without a bias).
  /// @{
  Tensor weight, bias;
  /// @}

 private:
  double eps_;
};

/// Seeded dropout that follows the module's train/eval mode. The generator is the model's, so a
/// checkpoint that saves it resumes with the same masks.
class Dropout : public Module {
 public:
  /// Drops each element with probability `p` in training.
  explicit Dropout(double p) : p_(p) {}
  /// dropout(x, p, training(), gen): x's shape; draws from `gen` only in training with p > 0.
  Tensor forward(const Tensor& x, Generator& gen) const { return dropout(x, p_, training(), gen); }
  double p() const { return p_; }  ///< The drop probability.

 private:
  double p_;
};

/// How PositionalEncoding adds positions.
enum class PositionalKind { sinusoidal, learned, none };
/// "sinusoidal", "learned" or "none".
const char* positional_name(PositionalKind k);
PositionalKind parse_positional(const std::string& name);  ///< "sinusoidal"|"sincos", "learned", "none"

/// Adds position information to x [B, T, C]: the fixed sin/cos table of "Attention Is All You Need"
/// (PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(...)), a learned table, or nothing.
class PositionalEncoding : public Module {
 public:
  /// A table for positions 0 .. max_len - 1 of width `dim` (learned: drawn from `gen`).
  PositionalEncoding(PositionalKind kind, int64_t max_len, int64_t dim, Generator& gen, DType dtype = DType::f32);
  /// x [B, T, C] + the encodings of positions offset .. offset + T - 1.
  /// Throws ShapeError if those positions exceed max_len.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  PositionalKind kind() const { return kind_; }  ///< Which encoding.

 private:
  PositionalKind kind_;
  int64_t max_len_;
  Tensor table_;  ///< [max_len, C]: a constant (sinusoidal) or a parameter (learned)
};

/// The feed-forward activation. GELU(x) = x * Phi(x) comes in two forms: gelu_tanh, the tanh
/// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's gelu(approximate="tanh")),
/// and gelu_exact, with the normal CDF Phi(x) = (1 + erf(x / sqrt(2))) / 2 (PyTorch's default gelu).
/// `gelu` is the older name of gelu_tanh, kept so existing code keeps its meaning.
enum class Activation { relu, gelu_tanh, gelu_exact, gelu = gelu_tanh };
/// "relu", "gelu-tanh" (or "gelu", its older name: the tanh approximation), "gelu-exact"; throws
/// Error naming the unknown value and the choices.
Activation parse_activation(const std::string& name);
/// The canonical name parse_activation reads back: "relu", "gelu-tanh" or "gelu-exact".
const char* activation_name(Activation a);

/// Position-wise feed-forward: linear2(dropout(act(linear1(x)))).
class FeedForward : public Module {
 public:
  /// dim -> hidden -> dim, dropout probability `dropout`, weights drawn from `gen`; both linears
  /// without a bias when `bias` is false.
  FeedForward(int64_t dim, int64_t hidden, Activation act, double dropout, Generator& gen, bool bias = true);
  /// x [B, T, C] -> [B, T, C]; dropout draws from `gen` in training.
  Tensor forward(const Tensor& x, Generator& gen) const;
  /// Children "linear1" (C -> hidden) and "linear2" (hidden -> C).
  /// @{
  std::shared_ptr<Linear> linear1, linear2;
  /// @}
  std::shared_ptr<Dropout> drop;  ///< child "dropout", after the activation

 private:
  Activation act_;
};

}  // namespace tapegrad::nn
