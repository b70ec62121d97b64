// Basic layers: Linear, Embedding, LayerNorm, positional encodings, feed-forward.
#include "tapegrad/nn/layers.hpp"

#include <cmath>

#include "tapegrad/checked.hpp"

namespace tapegrad::nn {

Linear::Linear(int64_t in, int64_t out, Generator& gen, bool with_bias) {
  const double bound = 1.0 / std::sqrt(double(std::max<int64_t>(in, 1)));
  weight = register_parameter("weight", Tensor::rand({out, in}, gen, DType::f32, -bound, bound));
  if (with_bias) bias = register_parameter("bias", Tensor::rand({out}, gen, DType::f32, -bound, bound));
}

Embedding::Embedding(int64_t vocab, int64_t dim, Generator& gen, double std) {
  weight = register_parameter("weight", Tensor::randn({vocab, dim}, gen, DType::f32, 0.0, std));
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool with_bias) : eps_(eps) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({dim}));
}

const char* positional_name(PositionalKind k) {
  switch (k) {
    case PositionalKind::sinusoidal: return "sinusoidal";
    case PositionalKind::learned: return "learned";
    case PositionalKind::none: return "none";
  }
  return "?";
}

PositionalKind parse_positional(const std::string& name) {
  if (name == "sinusoidal" || name == "sincos" || name == "sin") return PositionalKind::sinusoidal;
  if (name == "learned") return PositionalKind::learned;
  if (name == "none") return PositionalKind::none;
  throw Error("positional encoding: unknown kind '" + name + "' (expected sinusoidal, learned or none)");
}

PositionalEncoding::PositionalEncoding(PositionalKind kind, int64_t max_len, int64_t dim, Generator& gen, DType dtype)
    : kind_(kind), max_len_(max_len) {
  if (kind == PositionalKind::sinusoidal) {
    // Filled in float64 (tensor storage, so a table too large is OutOfMemory naming its shape).
    (void)checked_mul(max_len, dim, "positional encoding table max_len x d_model");
    Tensor pe = Tensor::empty({max_len, dim}, DType::f64);
    double* p = pe.data<double>();
    for (int64_t t = 0; t < max_len; ++t)
      for (int64_t i = 0; i < dim; ++i) {
        const double angle = double(t) / std::pow(10000.0, double(2 * (i / 2)) / double(dim));
        p[t * dim + i] = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
    table_ = register_buffer(dtype == DType::f64 ? pe : pe.to(dtype));
  } else if (kind == PositionalKind::learned) {
    table_ = register_parameter("weight", Tensor::randn({max_len, dim}, gen, dtype, 0.0, 0.02));
  }
}

Tensor PositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  if (kind_ == PositionalKind::none) return x;
  const int64_t T = x.size(1);
  if (offset < 0 || offset + T > max_len_)
    throw ShapeError("positional encoding: positions " + std::to_string(offset) + ".." + std::to_string(offset + T - 1) +
                     " exceed max_len " + std::to_string(max_len_) + " for x=" + to_string(x.shape()));
  return add(x, narrow(table_, 0, offset, T));  // [B, T, C] + [T, C]
}

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::relu;
  // "gelu": the name of the tanh form before gelu-exact existed, in older checkpoints and commands
  if (name == "gelu-tanh" || name == "gelu") return Activation::gelu_tanh;
  if (name == "gelu-exact") return Activation::gelu_exact;
  throw Error("activation: unknown '" + name + "' (expected relu, gelu-tanh (alias gelu) or gelu-exact)");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu_tanh: return "gelu-tanh";
    case Activation::gelu_exact: return "gelu-exact";
  }
  return "?";
}

FeedForward::FeedForward(int64_t dim, int64_t hidden, Activation act, double p, Generator& gen, bool bias)
    : act_(act) {
  linear1 = register_module("linear1", std::make_shared<Linear>(dim, hidden, gen, bias));
  linear2 = register_module("linear2", std::make_shared<Linear>(hidden, dim, gen, bias));
  drop = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor FeedForward::forward(const Tensor& x, Generator& gen) const {
  if (act_ == Activation::relu) {  // one op, the same values and the same draw from gen as below
    const bool dropping = drop->training() && drop->p() > 0;
    const uint64_t seed = dropping ? gen.next_u64() : 0;
    return feed_forward_relu(x, linear1->weight, linear1->bias, linear2->weight, linear2->bias,
                             dropping ? drop->p() : 0.0, seed);
  }
  const Tensor h = linear1->forward(x);
  const Tensor a = gelu(h, act_ == Activation::gelu_exact ? GeluApprox::exact : GeluApprox::tanh);
  return linear2->forward(drop->forward(a, gen));
}

}  // namespace tapegrad::nn
