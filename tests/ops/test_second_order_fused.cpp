// The composites the fused ops' double backward goes through (gru_cell, additive_score,
// scaled_dot_product_attention, feed_forward_relu: src/ops/fused.cpp, src/ops/attention.cpp,
// src/ops/matmul.cpp) against the fused kernels, in float64 on the op registry's shapes: the same
// output (dropout's mask included), and under create_graph the same first derivatives as the
// kernels' backward. (The second derivatives are checked by gradgradcheck on the registry's rows:
// tapegrad gradcheck --order 2.)
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "src/ops/op_util.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

using Inputs = const std::vector<Tensor>&;
using Fn = std::function<Tensor(Inputs)>;

// One fused op on the inputs, and its composite on the same inputs.
struct Case {
  std::string name;
  std::vector<Shape> shapes;
  Fn fused, composite;
};

// An AttentionSpec with every field given.
AttentionSpec spec(double scale, Tensor mask = {}, bool causal = false, double dropout = 0,
                   uint64_t seed = 0) {
  AttentionSpec s;
  s.scale = scale, s.mask = std::move(mask), s.causal = causal, s.dropout = dropout, s.dropout_seed = seed;
  return s;
}

// q, k, v of a registry row's attention, as given or narrowed off one projection [2, 3, 24].
Tensor part(const Tensor& x, int i) {
  return narrow(x, 2, 8 * i, 8).reshape({2, 3, 2, 4});
}

std::vector<Case> cases() {
  Generator gen(11);
  // A key padding mask [2,1,1,5]: 0 or -1e9, keys 3.. of batch 1 masked; a random mask [3,4].
  const Tensor padding = Tensor::from_vector({0, 0, 0, 0, 0, 0, 0, 0, -1e9, -1e9}, {2, 1, 1, 5}, DType::f64);
  const Tensor full = Tensor::randn({3, 4}, gen, DType::f64);
  auto sdpa = [](AttentionSpec s) -> std::pair<Fn, Fn> {
    return {[=](Inputs x) { return scaled_dot_product_attention(x[0], x[1], x[2], s); },
            [=](Inputs x) { return detail::scaled_dot_product_attention_composite(x[0], x[1], x[2], s); }};
  };
  auto attention = [&](std::string name, std::vector<Shape> shapes, AttentionSpec s) {
    auto [f, c] = sdpa(s);
    return Case{"scaled_dot_product_attention " + name, std::move(shapes), f, c};
  };
  const Shape q3{2, 3, 2, 4}, kv5{2, 5, 2, 4};
  auto gru_strided = [](Inputs x) { return reshape(narrow(x[0], 1, 1, 1), {2, 15}); };
  return {
      {"gru_cell xp[3,12] hp[3,12] h[3,4]",
       {{3, 12}, {3, 12}, {3, 4}},
       [](Inputs x) { return gru_cell(x[0], x[1], x[2]); },
       [](Inputs x) { return detail::gru_cell_composite(x[0], x[1], x[2]); }},
      {"gru_cell xp=[2,3,15][:,1] (strided rows) hp[2,15] h[2,5]",
       {{2, 3, 15}, {2, 15}, {2, 5}},
       [=](Inputs x) { return gru_cell(gru_strided(x), x[1], x[2]); },
       [=](Inputs x) { return detail::gru_cell_composite(gru_strided(x), x[1], x[2]); }},
      {"additive_score k[2,3,5] q[2,5] v[5]",
       {{2, 3, 5}, {2, 5}, {5}},
       [](Inputs x) { return additive_score(x[0], x[1], x[2]); },
       [](Inputs x) { return detail::additive_score_composite(x[0], x[1], x[2]); }},
      {"additive_score k[5,7,100] q[5,100] v[100]",
       {{5, 7, 100}, {5, 100}, {100}},
       [](Inputs x) { return additive_score(x[0], x[1], x[2]); },
       [](Inputs x) { return detail::additive_score_composite(x[0], x[1], x[2]); }},
      {"additive_score k[1,1,1] q[1,1] v[1]",
       {{1, 1, 1}, {1, 1}, {1}},
       [](Inputs x) { return additive_score(x[0], x[1], x[2]); },
       [](Inputs x) { return detail::additive_score_composite(x[0], x[1], x[2]); }},
      attention("scale 0.5, dv 3", {q3, kv5, {2, 5, 2, 3}}, spec(0.5)),
      attention("causal Tq < Tk", {{1, 3, 2, 4}, {1, 5, 2, 4}, {1, 5, 2, 4}}, spec(0.5, {}, true)),
      attention("causal Tq > Tk (rows with no key)", {{1, 4, 1, 3}, {1, 2, 1, 3}, {1, 2, 1, 3}},
                spec(0.7, {}, true)),
      attention("key padding mask[2,1,1,5]", {q3, kv5, kv5}, spec(0.5, padding)),
      attention("mask[3,4] causal", {q3, {2, 4, 2, 4}, {2, 4, 2, 4}}, spec(0.5, full, true)),
      attention("dropout 0.3 seed 5", {q3, kv5, kv5}, spec(0.5, {}, false, 0.3, 5)),
      attention("dropout 0.5 seed 9, mask[3,4] causal", {q3, {2, 4, 2, 4}, {2, 4, 2, 4}},
                spec(0.5, full, true, 0.5, 9)),
      // Under tanh, so that every input's derivative depends on the inputs (b2's would not: sum of dy).
      {"tanh(feed_forward_relu) x[2,3,4] w1[70,4] b1[70] w2[5,70] b2[5]",
       {{2, 3, 4}, {70, 4}, {70}, {5, 70}, {5}},
       [](Inputs x) { return tanh(feed_forward_relu(x[0], x[1], x[2], x[3], x[4])); },
       [](Inputs x) {
         return tanh(detail::feed_forward_relu_composite(x[0], x[1], x[2], x[3], x[4], 0, 0));
       }},
      {"tanh(feed_forward_relu) x[3,5] w1[70,5] w2[4,70], no biases, dropout 0.3 seed 9",
       {{3, 5}, {70, 5}, {4, 70}},
       [](Inputs x) { return tanh(feed_forward_relu(x[0], x[1], Tensor(), x[2], Tensor(), 0.3, 9)); },
       [](Inputs x) {
         return tanh(detail::feed_forward_relu_composite(x[0], x[1], Tensor(), x[2], Tensor(), 0.3, 9));
       }},
      {"scaled_dot_product_attention_stacked qkv[2,3,24] heads 2",
       {{2, 3, 24}},
       [](Inputs x) { return scaled_dot_product_attention_stacked(x[0], {}, 2, spec(0.5)); },
       [](Inputs x) {
         return detail::scaled_dot_product_attention_composite(part(x[0], 0), part(x[0], 1), part(x[0], 2),
                                                               spec(0.5));
       }},
      {"scaled_dot_product_attention q,k,v narrowed from x[2,3,24] (strided views)",
       {{2, 3, 24}},
       [](Inputs x) {
         return scaled_dot_product_attention(part(x[0], 0), part(x[0], 1), part(x[0], 2), spec(0.5));
       },
       [](Inputs x) {
         return detail::scaled_dot_product_attention_composite(part(x[0], 0), part(x[0], 1), part(x[0], 2),
                                                               spec(0.5));
       }},
  };
}

std::vector<Tensor> random_leaves(const std::vector<Shape>& shapes, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> xs;
  for (const Shape& s : shapes) xs.push_back(Tensor::randn(s, gen, DType::f64).requires_grad_());
  return xs;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace

TEST_CASE("each fused op's composite computes the fused output (float64, 1e-12), dropout's mask included",
          "[ops][create_graph]") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const std::vector<Tensor> x = random_leaves(c.shapes, 3);
    const Tensor fused = c.fused(x), composite = c.composite(x);
    CHECK(max_abs_diff(fused, composite) <= 1e-12);
    CHECK(composite.requires_grad());  // recorded: the tape can differentiate it
  }
}

TEST_CASE("the attention composite's dropout drops weights: it differs from the same spec without dropout",
          "[ops][create_graph]") {
  const std::vector<Tensor> x = random_leaves({{2, 3, 2, 4}, {2, 5, 2, 4}, {2, 5, 2, 4}}, 4);
  const Tensor dropped =
      detail::scaled_dot_product_attention_composite(x[0], x[1], x[2], spec(0.5, {}, false, 0.3, 5));
  const Tensor kept = detail::scaled_dot_product_attention_composite(x[0], x[1], x[2], spec(0.5));
  CHECK(max_abs_diff(dropped, kept) > 0.1);
}

TEST_CASE(
    "under create_graph each fused op's first derivatives equal its kernel backward's, and are recorded",
    "[ops][create_graph]") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const std::vector<Tensor> x = random_leaves(c.shapes, 5);
    Generator gen(6);
    const Tensor y = c.fused(x);
    const Tensor w = Tensor::randn(y.shape(), gen, DType::f64);
    const std::vector<Tensor> kernel = grad({y}, x, {.grad_outputs = {w}, .retain_graph = true});
    const std::vector<Tensor> recorded = grad({y}, x, {.grad_outputs = {w}, .create_graph = true});
    for (size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      CHECK_FALSE(kernel[i].requires_grad());
      CHECK(recorded[i].requires_grad());
      CHECK(max_abs_diff(kernel[i], recorded[i]) <= 1e-12);
    }
  }
}
