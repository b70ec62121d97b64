// Gradients of gradients: grad() returns without touching .grad, create_graph puts the backward on the
// tape (to any order), a first-order walk never writes into a gradient that has history, ops without a
// double backward refuse by name, and gradgradcheck catches a wrong double backward.
#include <catch2/catch.hpp>
#include <cmath>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {
Tensor param(std::vector<double> v) {
  const Shape s{int64_t(v.size())};
  return Tensor::from_vector(v, s, DType::f64).requires_grad_();
}
}  // namespace

TEST_CASE("grad returns d(outputs)/d(inputs) and changes no .grad", "[autograd][create_graph]") {
  Tensor x = param({1.0, -2.0, 0.5});
  Tensor w = param({3.0, 1.0, 2.0});
  backward(sum(mul(x, w)));  // x.grad = w, w.grad = x: grad() must leave both as they are
  const Tensor y = sum(mul(mul(x, x), w));
  const std::vector<Tensor> g = grad({y}, {x});
  REQUIRE(g.size() == 1);
  CHECK(g[0].to_vector() == std::vector<double>{6.0, -4.0, 2.0});  // 2 x w
  CHECK_FALSE(g[0].requires_grad());
  CHECK(x.grad().to_vector() == std::vector<double>{3.0, 1.0, 2.0});
  CHECK(w.grad().to_vector() == std::vector<double>{1.0, -2.0, 0.5});
}

TEST_CASE("grad with respect to an intermediate result, and unused inputs", "[autograd][create_graph]") {
  Tensor x = param({2.0, 3.0});
  Tensor unused = param({1.0});
  const Tensor h = mul(x, x);
  const Tensor y = sum(mul(h, 5.0));
  const std::vector<Tensor> g = grad({y}, {h, x, unused}, {.retain_graph = true, .unused = Unused::zeros});
  CHECK(g[0].to_vector() == std::vector<double>{5.0, 5.0});
  CHECK(g[1].to_vector() == std::vector<double>{20.0, 30.0});
  CHECK(g[2].to_vector() == std::vector<double>{0.0});
  CHECK_FALSE(grad({y}, {unused}, {.retain_graph = true, .unused = Unused::undefined})[0].defined());
  CHECK_THROWS_WITH(grad({y}, {unused}), Catch::Contains("input 0") && Catch::Contains("not used"));
}

TEST_CASE("create_graph: derivatives of x^3 to the third order", "[autograd][create_graph]") {
  Tensor x = param({0.5, -1.5, 2.0});
  const Tensor y = sum(mul(mul(x, x), x));
  const Tensor d1 = grad({y}, {x}, {.create_graph = true})[0];  // 3 x^2
  REQUIRE(d1.requires_grad());
  const Tensor d2 = grad({sum(d1)}, {x}, {.create_graph = true})[0];  // 6 x
  const Tensor d3 = grad({sum(d2)}, {x})[0];                          // 6
  const std::vector<double> xv = x.to_vector(), v1 = d1.to_vector(), v2 = d2.to_vector(), v3 = d3.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    CHECK(v1[i] == Approx(3 * xv[i] * xv[i]));
    CHECK(v2[i] == Approx(6 * xv[i]));
    CHECK(v3[i] == Approx(6.0));
  }
}

TEST_CASE("create_graph through unary functions: tanh'' and a Hessian-vector product",
          "[autograd][create_graph]") {
  Tensor x = param({0.3, -0.7});
  const Tensor g = grad({sum(tanh(x))}, {x}, {.create_graph = true})[0];  // 1 - t^2
  const Tensor h = grad({sum(g)}, {x})[0];                                // -2 t (1 - t^2)
  for (size_t i = 0; i < 2; ++i) {
    const double t = std::tanh(x.to_vector()[i]);
    CHECK(g.to_vector()[i] == Approx(1 - t * t));
    CHECK(h.to_vector()[i] == Approx(-2 * t * (1 - t * t)));
  }
}

TEST_CASE("backward with create_graph: .grad has history, and a later walk does not write into it",
          "[autograd][create_graph]") {
  Tensor x = param({1.0, 2.0});
  backward(sum(mul(mul(x, x), x)), {}, BackwardOptions{.create_graph = true});
  const Tensor first = x.grad();  // 3 x^2, on the tape
  REQUIRE(first.requires_grad());
  CHECK(first.to_vector() == std::vector<double>{3.0, 12.0});
  backward(sum(first));  // adds 6 x into x.grad, PyTorch's semantics
  CHECK(x.grad().to_vector() == std::vector<double>{9.0, 24.0});
  CHECK(first.to_vector() == std::vector<double>{3.0, 12.0});  // untouched: the walk wrote into a copy
}

TEST_CASE("create_graph refuses an op whose backward is not recorded, naming it",
          "[autograd][create_graph]") {
  Tensor x = param({1.0, 2.0});
  // A custom op: its backward writes raw values, which cannot be differentiated again.
  const Tensor y = [&] {
    Tensor out;
    {
      NoGrad off;
      out = mul(x, 2.0);
    }
    record_custom("twice", {x}, out, [x](const Tensor& dy) { accumulate_grad(x, mul(dy, 2.0)); });
    return out;
  }();
  CHECK_THROWS_WITH(grad({sum(y)}, {x}, {.create_graph = true}),
                    Catch::Contains("twice") && Catch::Contains("create_graph"));
  // An op whose closure writes its gradient with a kernel into a buffer refuses too, by its name.
  Tensor z = mul(x, 1.0);
  Tensor out = Tensor::zeros({2}, DType::f64);
  record(OpKind::relu, {z}, out, [z](const Tensor&) { grad_buffer_zeroed(z); });
  CHECK_THROWS_WITH(grad({sum(out)}, {x}, {.create_graph = true}),
                    Catch::Contains("relu") && Catch::Contains("double backward"));
}

TEST_CASE("gradgradcheck passes a right double backward and fails a wrong one", "[autograd][create_graph]") {
  Generator gen(5);
  Tensor x = Tensor::randn({4}, gen, DType::f64).requires_grad_();
  const auto cube = [](const std::vector<Tensor>& in) { return mul(mul(in[0], in[0]), in[0]); };
  CHECK(gradgradcheck(cube, {x}).ok);
  // y = x^2 whose first-order backward is right (2 x dy) but whose create_graph branch forgets the 2:
  // the recorded gradient's own derivative (dy) disagrees with differences of the true one (2 dy).
  const auto wrong = [](const std::vector<Tensor>& in) {
    const Tensor& a = in[0];
    Tensor y;
    {
      NoGrad off;
      y = mul(a, a);
    }
    if (should_record({&a}))
      record(OpKind::pow_scalar, {a}, y, [a](const Tensor& dy) {
        if (creating_graph()) return accumulate_grad(a, mul(dy, a));
        NoGrad off;
        accumulate_grad(a, mul(mul(dy, a), 2.0));
      });
    return y;
  };
  const GradcheckResult r = gradgradcheck(wrong, {x});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("analytic") && Catch::Contains("numeric"));
}
