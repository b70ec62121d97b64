// linear's weight gradient when one weight is applied many times to a few rows (an RNN's time
// steps): the uses' dy and x rows are stacked and summed by one GEMM. Checked against the sum of
// the per-use products dW = sum_u dy_u^T x_u computed here in float64, for every way the uses can
// reach the loss: all of them, some off the path to the output, a second backward over a retained
// tape, uses of many rows (not stacked) mixed in, and a recurrence where each use feeds the next
// (short, and longer than one stack holds).
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

// dW = sum over (dy, x) pairs of dy^T x, dy [rows, out], x [rows, in], in float64.
std::vector<double> sum_of_products(const std::vector<std::pair<Tensor, Tensor>>& uses, int64_t out,
                                    int64_t in) {
  std::vector<double> dw(size_t(out * in), 0.0);
  for (const auto& [dy, x] : uses) {
    const std::vector<double> d = dy.to_vector(), xv = x.to_vector();
    const int64_t rows = dy.numel() / out;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
          dw[size_t(o * in + i)] += d[size_t(r * out + o)] * xv[size_t(r * in + i)];
  }
  return dw;
}

void check_close(const Tensor& grad, const std::vector<double>& expected) {
  REQUIRE(grad.defined());
  const std::vector<double> g = grad.to_vector();
  REQUIRE(g.size() == expected.size());
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(g[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-12));
  }
}

}  // namespace

TEST_CASE("linear: a weight used at many steps gets the sum of every use's gradient", "[ops][linear]") {
  Generator gen(11);
  const int64_t in = 5, out = 4;
  Tensor w = Tensor::randn({out, in}, gen, DType::f64).requires_grad_(true);
  std::vector<Tensor> xs, ws;  // inputs and the loss weights of each use's output
  Tensor loss;
  const std::vector<int64_t> rows = {3, 1, 7, 300, 2};  // 300: a use with many rows, not stacked
  const bool on_path[] = {true, false, true, true, true};
  std::vector<std::pair<Tensor, Tensor>> expected_uses;
  for (size_t u = 0; u < rows.size(); ++u) {
    xs.push_back(Tensor::randn({rows[u], in}, gen, DType::f64));
    ws.push_back(Tensor::randn({rows[u], out}, gen, DType::f64));
    const Tensor y = linear(xs.back(), w);
    if (!on_path[u]) continue;  // recorded, but its entry never runs in backward
    const Tensor term = sum(mul(y, ws.back()));
    loss = loss.defined() ? add(loss, term) : term;
    expected_uses.push_back({ws.back(), xs.back()});  // d(loss)/dy = the loss weights
  }
  const std::vector<double> once = sum_of_products(expected_uses, out, in);

  SECTION("one backward") {
    backward(loss);
    check_close(w.grad(), once);
  }
  SECTION("a second backward over the retained tape adds the same again") {
    backward(loss, {}, true);
    check_close(w.grad(), once);
    backward(loss);
    std::vector<double> twice = once;
    for (double& v : twice) v *= 2;
    check_close(w.grad(), twice);
  }
}

TEST_CASE("linear: a recurrence h = tanh(h W^T) matches the per-step products", "[ops][linear]") {
  Generator gen(5);
  // 9 steps fit one stack; 200 steps of 3 rows overflow its 512 rows, so it is summed in parts.
  const int64_t batch = 3, dim = 6, steps = GENERATE(9, 200);
  Tensor w = mul(Tensor::randn({dim, dim}, gen, DType::f64), 0.5).requires_grad_(true);
  Tensor h = Tensor::randn({batch, dim}, gen, DType::f64);
  std::vector<Tensor> hs = {h}, pre;
  for (int64_t t = 0; t < steps; ++t) {
    pre.push_back(linear(hs.back(), w));
    hs.push_back(tanh(pre.back()));
  }
  const Tensor target = Tensor::randn({batch, dim}, gen, DType::f64);
  backward(sum(mul(hs.back(), target)));
  // Reverse the recurrence by hand: dh_T = target; dpre_t = dh_t (1 - h_t^2); dh_{t-1} = dpre_t W.
  const std::vector<double> wv = w.detach().to_vector();
  std::vector<double> dh = target.to_vector();
  std::vector<std::pair<Tensor, Tensor>> uses;
  for (int64_t t = steps; t-- > 0;) {
    const std::vector<double> ht = hs[size_t(t + 1)].to_vector();
    std::vector<double> dpre(dh.size()), dprev(dh.size(), 0.0);
    for (size_t i = 0; i < dh.size(); ++i) dpre[i] = dh[i] * (1 - ht[i] * ht[i]);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t o = 0; o < dim; ++o)
        for (int64_t i = 0; i < dim; ++i)
          dprev[size_t(b * dim + i)] += dpre[size_t(b * dim + o)] * wv[size_t(o * dim + i)];
    uses.push_back({Tensor::from_vector(dpre, {batch, dim}, DType::f64), hs[size_t(t)]});
    dh = dprev;
  }
  check_close(w.grad(), sum_of_products(uses, dim, dim));
}
