// Basic layers: Linear, Embedding, LayerNorm, Dropout, positional encodings, position-wise
// feed-forward. Shapes: B batch, T time, C = d_model features.
#pragma once

#include <string>

#include "tapegrad/nn/module.hpp"
#include "tapegrad/ops.hpp"

namespace tapegrad::nn {

// y = x W^T + b; W [out, in] initialised uniform(+-1/sqrt(in)) like PyTorch's default.
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  Tensor weight, bias;
};

// table [V, C] ~ N(0, std^2); forward(ids [..]) -> [.., C]
class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim, Generator& gen, double std = 1.0);
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids); }
  Tensor weight;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps_); }
  Tensor weight, bias;

 private:
  double eps_;
};

// Seeded dropout that follows the module's train/eval mode. The generator is the model's, so a
// checkpoint that saves it resumes with the same masks.
class Dropout : public Module {
 public:
  explicit Dropout(double p) : p_(p) {}
  Tensor forward(const Tensor& x, Generator& gen) const { return dropout(x, p_, training(), gen); }
  double p() const { return p_; }

 private:
  double p_;
};

enum class PositionalKind { sinusoidal, learned, none };
const char* positional_name(PositionalKind k);
PositionalKind parse_positional(const std::string& name);  // "sinusoidal"|"sincos", "learned", "none"

// Adds position information to x [B, T, C]: the fixed sin/cos table of "Attention Is All You Need"
// (PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(...)), a learned table, or nothing.
class PositionalEncoding : public Module {
 public:
  PositionalEncoding(PositionalKind kind, int64_t max_len, int64_t dim, Generator& gen, DType dtype = DType::f32);
  // x [B, T, C] + the encodings of positions offset .. offset + T - 1.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  PositionalKind kind() const { return kind_; }

 private:
  PositionalKind kind_;
  int64_t max_len_;
  Tensor table_;  // [max_len, C]: a constant (sinusoidal) or a parameter (learned)
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

// Position-wise feed-forward: linear2(dropout(act(linear1(x)))).
class FeedForward : public Module {
 public:
  FeedForward(int64_t dim, int64_t hidden, Activation act, double dropout, Generator& gen);
  Tensor forward(const Tensor& x, Generator& gen) const;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> drop;

 private:
  Activation act_;
};

}  // namespace tapegrad::nn
