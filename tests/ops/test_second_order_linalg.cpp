// Higher-order derivatives through matmul and linear: a third derivative of sum((x A)^3) against its
// closed form (2-D, batched and a transposed A), and a Hessian-vector product through linear applied
// at several steps with its weight packed once (WeightPackScope, whose weight gradient is stacked),
// against differences of first-order gradients.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

// [rows, cols] row-major as plain numbers.
struct Mat {
  int64_t rows, cols;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[size_t(r * cols + c)]; }
};

Mat matrix(const Tensor& t, int64_t cols) {
  return {t.numel() / cols, cols, t.contiguous().to_vector()};
}

// p @ q
Mat product(const Mat& p, const Mat& q) {
  Mat r{p.rows, q.cols, std::vector<double>(size_t(p.rows * q.cols), 0.0)};
  for (int64_t i = 0; i < p.rows; ++i)
    for (int64_t k = 0; k < p.cols; ++k)
      for (int64_t j = 0; j < q.cols; ++j) r.v[size_t(i * q.cols + j)] += p.at(i, k) * q.at(k, j);
  return r;
}

// 6 (p o q) A^T (o elementwise), with p, q [rows, N] and A [K, N]: [rows, K].
Mat six_hadamard_times_at(const Mat& p, const Mat& q, const Mat& a) {
  Mat r{p.rows, a.rows, std::vector<double>(size_t(p.rows * a.rows), 0.0)};
  for (int64_t i = 0; i < p.rows; ++i)
    for (int64_t k = 0; k < a.rows; ++k)
      for (int64_t j = 0; j < p.cols; ++j)
        r.v[size_t(i * a.rows + k)] += 6 * p.at(i, j) * q.at(i, j) * a.at(k, j);
  return r;
}

void check_equal(const Tensor& got, const Mat& want) {
  REQUIRE(got.defined());
  const std::vector<double> g = got.contiguous().to_vector();
  REQUIRE(g.size() == want.v.size());
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(g[i] == Approx(want.v[i]).epsilon(1e-12).margin(1e-12));
  }
}

}  // namespace

TEST_CASE("third derivative of sum((x A)^3) through matmul equals 6 ((v A) o (w A)) A^T",
          "[ops][create_graph]") {
  // f = sum_ij y_ij^3 with y = x A:  df/dx = 3 (y o y) A^T,  d<df/dx, v>/dx = 6 ((v A) o y) A^T,
  // d<that, w>/dx = 6 ((v A) o (w A)) A^T, a constant.
  const auto [x_shape, transposed_a] = GENERATE(table<Shape, bool>({
      {Shape{3, 4}, false},     // one GEMM
      {Shape{2, 3, 4}, false},  // a batch folded into the rows
      {Shape{2, 3, 4}, true},   // A a transposed view
  }));
  CAPTURE(to_string(x_shape), transposed_a);
  Generator gen(7);
  const Tensor x = Tensor::randn(x_shape, gen, DType::f64).requires_grad_();
  const Tensor a_leaf =
      Tensor::randn(transposed_a ? Shape{5, 4} : Shape{4, 5}, gen, DType::f64).requires_grad_();
  const Tensor a = transposed_a ? transpose(a_leaf, 0, 1) : a_leaf;  // [4, 5] either way
  const Tensor v = Tensor::randn(x_shape, gen, DType::f64), w = Tensor::randn(x_shape, gen, DType::f64);

  const Tensor y = matmul(x, a);
  const Tensor d1 = grad({sum(pow(y, 3.0))}, {x}, {.create_graph = true})[0];
  REQUIRE(d1.requires_grad());
  const Tensor d2 = grad({sum(mul(d1, v))}, {x}, {.create_graph = true})[0];
  REQUIRE(d2.requires_grad());
  const Tensor d3 = grad({sum(mul(d2, w))}, {x})[0];

  const Mat am = matrix(a, 5), ym = matrix(y.detach(), 5);
  const Mat va = product(matrix(v, 4), am), wa = product(matrix(w, 4), am);
  Mat three_y2_at = six_hadamard_times_at(ym, ym, am);
  for (double& e : three_y2_at.v) e /= 2;
  check_equal(d1, three_y2_at);
  check_equal(d2, six_hadamard_times_at(va, ym, am));
  check_equal(d3, six_hadamard_times_at(va, wa, am));
}

TEST_CASE("second order through linear with its weight packed once and its gradient stacked",
          "[ops][create_graph]") {
  // L = sum(c o h3), h_t = tanh(linear(h_{t-1}, W, b)), h0 = x: three uses of W on 3 rows (stacked weight
  // gradient), 37 x 37 (packed panels with a short last one). The Hessian-vector product
  // d<dL/dW, V>/d(W, x, b), computed by a create_graph walk and a first-order walk over it, both inside
  // the scope, equals the directional difference along V of the first-order gradients (dL/dW, dL/dx, dL/db)
  // (mixed partials commute).
  Generator gen(11);
  const int64_t n = 37;
  const Tensor x = Tensor::randn({3, n}, gen, DType::f64).requires_grad_();
  const Tensor W = mul(Tensor::randn({n, n}, gen, DType::f64), 0.3).requires_grad_();
  const Tensor b = Tensor::randn({n}, gen, DType::f64).requires_grad_();
  const Tensor c = Tensor::randn({3, n}, gen, DType::f64);
  const Tensor V = Tensor::randn({n, n}, gen, DType::f64);
  auto loss = [&](const Tensor& weight) {
    Tensor h = x;
    for (int t = 0; t < 3; ++t) h = tanh(linear(h, weight, b));
    return sum(mul(c, h));
  };

  std::vector<Tensor> hv;
  {
    WeightPackScope scope;
    const Tensor gw = grad({loss(W)}, {W}, {.create_graph = true})[0];
    REQUIRE(gw.requires_grad());
    hv = grad({sum(mul(gw, V))}, {W, x, b});
  }

  const double eps = 1e-5;
  auto first_order = [&](double step) {
    WeightPackScope scope;
    const Tensor wp = add(W.detach(), mul(V, step)).requires_grad_();
    return grad({loss(wp)}, {wp, x, b});
  };
  const std::vector<Tensor> plus = first_order(eps), minus = first_order(-eps);
  for (size_t i = 0; i < hv.size(); ++i) {
    CAPTURE(i);
    const std::vector<double> got = hv[i].to_vector(), p = plus[i].to_vector(), m = minus[i].to_vector();
    REQUIRE(got.size() == p.size());
    double largest = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      CAPTURE(k);
      const double numeric = (p[k] - m[k]) / (2 * eps);
      largest = std::max(largest, std::abs(numeric));
      CHECK(got[k] == Approx(numeric).epsilon(1e-6).margin(1e-7));
    }
    CHECK(largest > 1e-2);  // not vacuous
  }
}
