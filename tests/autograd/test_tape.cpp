// The tape: recording rules, accumulation, freeing, error paths, deep chains.
#include <catch2/catch.hpp>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {
Tensor param(std::vector<double> v, Shape s) { return Tensor::from_vector(v, s, DType::f64).requires_grad_(); }
}  // namespace

TEST_CASE("backward accumulates every use of a tensor", "[autograd]") {
  Tensor x = param({3.0}, {1});
  // y = x*x + x  -> dy/dx = 2x + 1 = 7
  backward(sum(add(mul(x, x), x)));
  CHECK(x.grad().item() == Approx(7.0));
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd]") {
  Tensor x = param({2.0}, {1});
  backward(sum(mul(x, 3.0)));
  backward(sum(mul(x, 3.0)));
  CHECK(x.grad().item() == Approx(6.0));
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  backward(sum(mul(x, 3.0)));
  CHECK(x.grad().item() == Approx(3.0));
}

TEST_CASE("only ops with an input that requires grad are recorded", "[autograd]") {
  Tape tape;
  TapeScope scope(tape);
  const Tensor c = Tensor::ones({3});
  const Tensor d = exp(c);
  CHECK(tape.size() == 0);
  CHECK_FALSE(d.requires_grad());
  Tensor w = Tensor::ones({3}).requires_grad_();
  const Tensor e = mul(d, w);
  CHECK(tape.size() == 1);
  CHECK(e.requires_grad());
  CHECK_FALSE(e.is_leaf());
  {
    NoGrad ng;
    const Tensor f = mul(e, w);
    CHECK_FALSE(f.requires_grad());
    CHECK(tape.size() == 1);
  }
  CHECK_THAT(tape.dump(), Catch::Contains("mul(f32[3], f32[3]) -> f32[3]"));
}

TEST_CASE("the tape is freed after backward; a second backward is an error", "[autograd][errors]") {
  Tensor x = param({1.0, 2.0}, {2});
  const Tensor loss = sum(exp(x));
  backward(loss);
  CHECK(current_tape().size() == 0);
  CHECK_THROWS_AS(backward(loss), AutogradError);
  CHECK_THROWS_WITH(backward(loss), Catch::Contains("already freed") && Catch::Contains("retain_graph"));
  // The gradient was not double counted.
  CHECK(x.grad().to_vector()[1] == Approx(std::exp(2.0)));
}

TEST_CASE("retain_graph allows a second backward", "[autograd]") {
  Tensor x = param({1.0}, {1});
  const Tensor loss = sum(mul(x, x));
  backward(loss, {}, true);
  backward(loss);
  CHECK(x.grad().item() == Approx(4.0));
}

TEST_CASE("using a result whose tape was freed is an error", "[autograd][errors]") {
  Tensor x = param({1.0}, {1});
  const Tensor h = exp(x);
  backward(sum(h));
  CHECK_THROWS_WITH(mul(h, 2.0), Catch::Contains("mul_scalar") && Catch::Contains("freed"));
}

TEST_CASE("backward on a non-scalar needs a gradient of its shape", "[autograd][errors]") {
  Tensor x = param({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH(backward(y), Catch::Contains("backward") && Catch::Contains("f64[2,3]") &&
                                     Catch::Contains("not a scalar"));
  CHECK_THROWS_WITH(backward(y, Tensor::ones({3, 2}, DType::f64)), Catch::Contains("f64[3,2]"));
  backward(y, Tensor::ones({2, 3}, DType::f64));
  CHECK(x.grad().to_vector() == std::vector<double>(6, 2.0));
  CHECK_THROWS_AS(backward(Tensor::ones({1})), AutogradError);
}

TEST_CASE("a 10,000-step chain runs backward without recursion", "[autograd]") {
  Tensor x = param({0.5}, {1});
  Tensor h = x;
  for (int i = 0; i < 10000; ++i) h = add(mul(h, 1.0001), 0.0);
  backward(sum(h));
  CHECK(x.grad().item() == Approx(std::pow(1.0001, 10000)).epsilon(1e-9));
}

TEST_CASE("intermediate gradients are freed unless retained", "[autograd]") {
  Tensor x = param({1.0, 2.0}, {2});
  Tensor h = exp(x);
  Tensor k = mul(x, 3.0);
  k.retain_grad();
  backward(add(sum(h), sum(k)));
  CHECK_FALSE(h.grad().defined());
  REQUIRE(k.grad().defined());
  CHECK(k.grad().to_vector() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("every op kind has a name", "[autograd]") {
  for (int i = 0; i < kOpCount; ++i) CHECK(std::string(op_name(OpKind(i))).size() > 0);
}
