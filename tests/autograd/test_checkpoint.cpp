// checkpoint(): bitwise-equal gradients with recomputation, the random state restored, captured
// parameters, nesting, and its errors.
#include <catch2/catch.hpp>

#include "tapegrad/nn/transformer.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {
enum class Mode { plain, checkpointed, nested };

// The input's and every parameter's gradient, raw, after one backward of sum((layer(1.5x) + 1.5x)^2)
// with dropout on, then the generator's next draw (it must go on from where the forward left it).
std::vector<std::vector<double>> layer_grads(DType dtype, Mode mode) {
  Generator init(7);
  nn::TransformerLayerOptions o{.dim = 16, .heads = 4, .ff_dim = 32, .dropout = 0.3};
  nn::EncoderLayer layer(o, init);
  layer.to(dtype);
  layer.train();
  Generator data(11), drop(3);
  Tensor x = Tensor::randn({2, 5, 16}, data, dtype).requires_grad_();
  // The layer's parameters are captured by the closure, not passed as inputs.
  CheckpointFn block = [&](const std::vector<Tensor>& in) { return layer.forward(in[0], Tensor(), drop); };
  CheckpointFn outer = [&](const std::vector<Tensor>& in) { return checkpoint(block, {in[0]}, {&drop}); };
  Tensor h = mul(x, 1.5);  // used twice: inside the block and after it
  Tensor y =
      mode == Mode::plain ? block({h}) : checkpoint(mode == Mode::nested ? outer : block, {h}, {&drop});
  Tensor z = add(y, h);
  backward(sum(mul(z, z)));
  std::vector<std::vector<double>> out{x.grad().to_vector()};
  for (const Tensor& p : layer.parameters()) out.push_back(p.grad().to_vector());
  out.push_back({drop.uniform()});
  return out;
}
}  // namespace

TEST_CASE("checkpoint gives bitwise the plain gradients of a Transformer layer with dropout", "[autograd]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const auto plain = layer_grads(dtype, Mode::plain);
    CHECK(plain.size() > 10);
    CHECK(layer_grads(dtype, Mode::checkpointed) == plain);
    CHECK(layer_grads(dtype, Mode::nested) == plain);
  }
}

TEST_CASE("checkpoint keeps one tape entry holding only the inputs", "[autograd]") {
  Tensor x = Tensor::from_vector({1.0, 2.0}, {2}, DType::f64).requires_grad_();
  Tensor y = checkpoint([](const std::vector<Tensor>& in) { return exp(mul(in[0], in[0])); }, {x});
  REQUIRE(current_tape().size() == 1);
  CHECK(current_tape().entries()[0].inputs.size() == 1);
  backward(sum(y));
  CHECK(x.grad().to_vector()[0] == Approx(2 * std::exp(1.0)));
}

TEST_CASE("checkpoint reaches parameters the closure captured even when no input requires grad",
          "[autograd]") {
  Tensor w = Tensor::from_vector({3.0}, {1}, DType::f64).requires_grad_();
  Tensor x = Tensor::from_vector({2.0}, {1}, DType::f64);
  Tensor y = checkpoint([&](const std::vector<Tensor>& in) { return mul(in[0], w); }, {x});
  REQUIRE(y.requires_grad());
  backward(sum(y));
  CHECK(w.grad().item() == 2.0);
}

TEST_CASE("checkpoint refuses an output that does not depend on its inputs", "[autograd]") {
  Tensor w = Tensor::from_vector({3.0}, {1}, DType::f64).requires_grad_();
  Tensor x = Tensor::from_vector({2.0}, {1}, DType::f64).requires_grad_();
  CHECK_THROWS_WITH(checkpoint([&](const std::vector<Tensor>&) { return mul(w, 2.0); }, {x}),
                    Catch::Contains("does not depend on any of its inputs"));
  CHECK_THROWS_WITH(checkpoint([](const std::vector<Tensor>&) { return Tensor(); }, {x}),
                    Catch::Contains("undefined"));
}

TEST_CASE("checkpoint refuses a recomputation that differs from the first call", "[autograd]") {
  Tensor x = Tensor::from_vector({1.0, 2.0}, {2}, DType::f64).requires_grad_();
  int calls = 0;
  Tensor y = checkpoint(
      [&](const std::vector<Tensor>& in) { return ++calls == 1 ? mul(in[0], 2.0) : sum(in[0]); }, {x});
  CHECK_THROWS_WITH(backward(sum(y)), Catch::Contains("same thing every call"));
  current_tape().clear();
}
