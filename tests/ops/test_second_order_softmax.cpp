// Higher-order derivatives through the fused softmax family and layer_norm: the Hessian of log-sum-exp
// (through log_softmax, and through cross_entropy, whose Hessian in the logits is the same) against its
// closed form diag(p) - p p^T, and a third derivative through layer_norm against central differences of
// the second; softmax rows that see no key and -inf masks at second order.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

Tensor leaf(const std::vector<double>& v, const Shape& s) {
  return Tensor::from_vector(v, s, DType::f64).requires_grad_();
}

// Row i of the Hessian of f at x: d(grad f)_i / dx, grad f recorded once (create_graph) and walked again.
std::vector<std::vector<double>> hessian_by_grad_twice(const Tensor& f, const Tensor& x) {
  const Tensor g = grad({f}, {x}, {.create_graph = true})[0];
  const int64_t n = x.numel();
  std::vector<std::vector<double>> h;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> e(size_t(n), 0.0);
    e[size_t(i)] = 1.0;
    h.push_back(grad({g}, {x}, {.grad_outputs = {Tensor::from_vector(e, x.shape(), DType::f64)},
                                .retain_graph = true})[0]
                    .to_vector());
  }
  return h;
}

}  // namespace

TEST_CASE("the Hessian of log-sum-exp through grad twice is diag(p) - p p^T", "[ops][create_graph]") {
  const std::vector<double> xv = {0.3, -1.2, 2.0, 0.7, -0.4};
  const int64_t n = int64_t(xv.size());
  double z = 0;
  for (double v : xv) z += std::exp(v);
  std::vector<double> p;
  for (double v : xv) p.push_back(std::exp(v) / z);

  const std::string via = GENERATE(as<std::string>{}, "log_softmax", "cross_entropy");
  CAPTURE(via);
  Tensor x = leaf(xv, {n});
  // lse(x) = (sum(x) - sum(log_softmax(x))) / n;  cross_entropy(x, t) = lse(x) - x_t: the same Hessian
  const Tensor f = via == "log_softmax"
                       ? mul(sub(sum(x), sum(log_softmax(x))), 1.0 / double(n))
                       : cross_entropy(reshape(x, {1, n}), Tensor::from_ids({2}, {1}));
  const std::vector<std::vector<double>> h = hessian_by_grad_twice(f, x);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      CAPTURE(i, j);
      const double expected = (i == j ? p[size_t(i)] : 0.0) - p[size_t(i)] * p[size_t(j)];
      CHECK(h[size_t(i)][size_t(j)] == Approx(expected).margin(1e-14));
    }
}

TEST_CASE("a third derivative through layer_norm matches central differences of the second",
          "[ops][create_graph]") {
  const int64_t R = 2, C = 5;
  Generator gen(11);
  const Tensor x0 = Tensor::randn({R, C}, gen, DType::f64);
  const Tensor w = Tensor::randn({C}, gen, DType::f64).requires_grad_();
  const Tensor b = Tensor::randn({C}, gen, DType::f64).requires_grad_();
  const Tensor W = Tensor::randn({R, C}, gen, DType::f64);  // reduces the output to a scalar
  const Tensor u = Tensor::randn({R, C}, gen, DType::f64), v = Tensor::randn({R, C}, gen, DType::f64);

  // s(x) = sum_jk d^2 f / dx_j dx_k u_j v_k, with f = sum(layer_norm(x, w, b) * W)
  auto second = [&](const Tensor& x, bool create_graph) {
    const Tensor f = sum(mul(layer_norm(x, w, b), W));
    const Tensor g = grad({f}, {x}, {.create_graph = true})[0];
    const Tensor hu = grad({sum(mul(g, u))}, {x}, {.create_graph = create_graph})[0];
    return sum(mul(hu, v));
  };
  Tensor x = x0.clone().requires_grad_();
  const std::vector<double> third = grad({second(x, true)}, {x})[0].to_vector();

  const double h = 1e-5;
  const std::vector<double> base = x0.to_vector();
  double largest = 0;
  for (size_t k = 0; k < base.size(); ++k) {
    auto at = [&](double step) {
      std::vector<double> xs = base;
      xs[k] += step;
      return second(leaf(xs, {R, C}), false).item();
    };
    const double numeric = (at(h) - at(-h)) / (2 * h);
    CAPTURE(k, numeric, third[k]);
    CHECK(third[k] == Approx(numeric).epsilon(1e-5).margin(1e-6));
    largest = std::max(largest, std::abs(numeric));
  }
  CHECK(largest > 0.1);  // not vacuous
}

TEST_CASE("softmax's double backward: rows that see no key are zeros, and -inf key-padding masks",
          "[ops][create_graph]") {
  Generator gen(5);
  const std::vector<Tensor> x = {Tensor::randn({2, 4, 2}, gen, DType::f64).requires_grad_()};
  const double inf = std::numeric_limits<double>::infinity();
  // causal with Tq = 4 > Tk = 2: queries 0 and 1 see no key
  const GradcheckResult causal =
      gradgradcheck([](const std::vector<Tensor>& in) { return softmax(in[0], {0.7, {}, true}); }, x);
  CAPTURE(causal.message);
  CHECK(causal.ok);
  // key 1 of batch 0 padded with -inf; batch 1 sees both keys
  const Tensor pad = Tensor::from_vector({0.0, -inf, 0.0, 0.0}, {2, 1, 2}, DType::f64);
  const GradcheckResult padded =
      gradgradcheck([&](const std::vector<Tensor>& in) { return softmax(in[0], {1.0, pad, false}); }, x);
  CAPTURE(padded.message);
  CHECK(padded.ok);
}
