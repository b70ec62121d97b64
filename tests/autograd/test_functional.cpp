// The functional transforms against closed forms (a quadratic's Hessian, log-sum-exp's Hessian, a linear
// layer's Jacobian) and against finite differences on a small network; jvp against the Jacobian; inputs'
// .grad and the caller's tape untouched; create_graph results differentiable again.
#include <catch2/catch.hpp>
#include <cmath>

#include "tapegrad/functional.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {
using Inputs = const std::vector<Tensor>&;

void check_close(const Tensor& a, const Tensor& b, double tol) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i);
    CHECK(x[i] == Approx(y[i]).margin(tol));
  }
}

Tensor eye(int64_t n) {
  std::vector<double> v(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i * n + i)] = 1.0;
  return Tensor::from_vector(v, {n, n}, DType::f64);
}

// A small network with two tanh layers, scalar output: the finite-difference tests' function.
Tensor net(Inputs in) {
  const Tensor h = tanh(linear(in[0], in[1], in[2]));
  return sum(mul(tanh(linear(h, in[3])), h.narrow(1, 0, 2)));
}
}  // namespace

TEST_CASE("hessian of a quadratic is A + A^T; of log-sum-exp diag(p) - p p^T", "[functional]") {
  Generator gen(11);
  const Tensor a = Tensor::randn({4, 4}, gen, DType::f64);
  const Tensor x = Tensor::randn({4}, gen, DType::f64);
  const Tensor h = hessian([&](const Tensor& t) { return sum(mul(t, matmul(a, t))); }, x);
  check_close(h, add(a, transpose(a, 0, 1)), 1e-12);

  const Tensor z = Tensor::randn({5}, gen, DType::f64);
  const Tensor hz = hessian([](const Tensor& t) { return log(sum(exp(t))); }, z);
  const Tensor p = softmax(z.reshape({1, 5})).reshape({5});
  const Tensor expected = sub(mul(eye(5), p.reshape({1, 5})), mul(p.reshape({5, 1}), p.reshape({1, 5})));
  check_close(hz, expected, 1e-12);
}

TEST_CASE("a linear layer's Jacobian is its weight; jvp and vjp agree with it", "[functional]") {
  Generator gen(12);
  const Tensor w = Tensor::randn({3, 5}, gen, DType::f64), b = Tensor::randn({3}, gen, DType::f64);
  const Tensor x = Tensor::randn({5}, gen, DType::f64);
  const auto layer = [&](const Tensor& t) { return linear(t.reshape({1, 5}), w, b).reshape({3}); };
  const Tensor j = jacobian(layer, x);
  check_close(j, w, 1e-14);
  const Tensor t = Tensor::randn({5}, gen, DType::f64), v = Tensor::randn({3}, gen, DType::f64);
  const auto f = [&](Inputs in) { return tanh(layer(in[0])); };  // not linear, so J depends on x
  const Tensor jt = jacobian([&](const Tensor& s) { return f({s}); }, x);
  const JvpResult fwd = jvp(f, {x}, {t});
  check_close(fwd.tangent, matmul(jt, t), 1e-12);
  check_close(fwd.output, f({x}), 0);
  const VjpResult rev = vjp(f, {x}, v);
  check_close(rev.grads[0], matmul(v, jt), 1e-12);
}

TEST_CASE("hvp on a small network matches finite differences of its gradient", "[functional]") {
  Generator gen(13);
  std::vector<Tensor> in = {Tensor::randn({2, 3}, gen, DType::f64), Tensor::randn({4, 3}, gen, DType::f64),
                            Tensor::randn({4}, gen, DType::f64), Tensor::randn({4, 4}, gen, DType::f64)};
  std::vector<Tensor> v;
  for (const Tensor& t : in) v.push_back(Tensor::randn(t.shape(), gen, DType::f64));
  const HvpResult r = hvp(net, in, v);
  // (g(x + e v) - g(x - e v)) / 2e -> H v
  const double e = 1e-5;
  auto gradient_at = [&](double s) {
    std::vector<Tensor> moved;
    for (size_t i = 0; i < in.size(); ++i) moved.push_back(add(in[i], mul(v[i], s)));
    return vjp(net, moved, Tensor::ones({}, DType::f64)).grads;
  };
  const std::vector<Tensor> gp = gradient_at(e), gm = gradient_at(-e);
  for (size_t i = 0; i < in.size(); ++i) {
    CAPTURE(i);
    check_close(r.hvp[i], mul(sub(gp[i], gm[i]), 1 / (2 * e)), 1e-6);
  }
  // The full Hessian's blocks times v give the same product.
  const std::vector<std::vector<Tensor>> h = hessian(net, in);
  for (size_t i = 0; i < in.size(); ++i) {
    Tensor acc = Tensor::zeros(in[i].shape(), DType::f64);
    for (size_t j = 0; j < in.size(); ++j) {
      const int64_t ni = in[i].numel(), nj = in[j].numel();
      acc = add(acc, matmul(h[i][j].reshape({ni, nj}), v[j].reshape({nj})).reshape(in[i].shape()));
    }
    check_close(r.hvp[i], acc, 1e-10);
  }
}

TEST_CASE("transforms leave the inputs' gradients and the caller's tape alone", "[functional]") {
  Tape tape;
  TapeScope scope(tape);
  Tensor x = Tensor::from_vector({0.5, -1.0}, {2}, DType::f64).requires_grad_();
  const Tensor y = sum(mul(x, x));  // on the caller's tape
  const size_t entries = tape.size();
  (void)hessian([](const Tensor& t) { return sum(exp(t)); }, x);
  (void)jvp([](Inputs in) { return exp(in[0]); }, {x}, {Tensor::ones({2}, DType::f64)});
  CHECK(tape.size() == entries);
  CHECK_FALSE(x.grad().defined());
  backward(y);
  CHECK(x.grad().to_vector() == std::vector<double>{1.0, -2.0});
}

TEST_CASE("with create_graph the result is differentiable with respect to the inputs", "[functional]") {
  Tensor x = Tensor::from_vector({0.3, 0.8}, {2}, DType::f64).requires_grad_();
  // vjp of sum(x^3) is 3 x^2 (v = 1); its own gradient, summed, is 6 x.
  const VjpResult r = vjp([](Inputs in) { return sum(mul(mul(in[0], in[0]), in[0])); }, {x},
                          Tensor::ones({}, DType::f64), {.create_graph = true});
  REQUIRE(r.grads[0].requires_grad());
  backward(sum(r.grads[0]));
  check_close(x.grad(), mul(x.detach(), 6.0), 1e-12);
}

TEST_CASE("functional transforms: bad arguments", "[functional]") {
  const Tensor x = Tensor::ones({3}, DType::f64);
  CHECK_THROWS_WITH(hessian([](const Tensor& t) { return exp(t); }, x), Catch::Contains("scalar"));
  CHECK_THROWS_WITH(vjp([](Inputs in) { return exp(in[0]); }, {x}, Tensor::ones({2}, DType::f64)),
                    Catch::Contains("vjp: v"));
  CHECK_THROWS_WITH(jvp([](Inputs in) { return exp(in[0]); }, {x}, {}),
                    Catch::Contains("0 tangents for 1 inputs"));
  CHECK_THROWS_WITH(jvp([](Inputs in) { return exp(in[0]); }, {Tensor::from_ids({1}, {1})}, {Tensor()}),
                    Catch::Contains("no floating-point input"));
}
