// A program outside tapegrad's tree, built against the installed library (pkg-config) or against
// tapegrad as a Meson subproject by tests/outside/test_outside.cpp. It uses the public headers only
// and touches what crosses the library's boundary: classes with vtables (nn::Module, optim::Adam),
// an exception thrown inside the library and caught here, the run-time settings, backward and
// gradcheck. Prints "consumer ok" and exits 0, or names the first check that failed and exits 1.
#include <cmath>
#include <cstdio>
#include <string>

#include "tapegrad/nn/layers.hpp"
#include "tapegrad/optim.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {
int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}
}  // namespace

int main() {
  runtime::set_num_threads(1);
  expect(runtime::num_threads() == 1, "runtime::set_num_threads(1) holds");

  // d/dw sum(w * w) = 2 w, element by element.
  Tensor w = Tensor::from_vector({0.5, -1.25, 3.0}, {3}).requires_grad_();
  backward(sum(mul(w, w)));
  const std::vector<double> g = w.grad().to_vector(), wv = w.to_vector();
  for (size_t i = 0; i < wv.size(); ++i) expect(g[i] == 2 * wv[i], "gradient of sum(w*w) is 2w");

  // The analytic gradient of a small network agrees with central differences (float64).
  Generator gen(7);
  const Tensor x = Tensor::randn({4, 3}, gen, DType::f64);
  const Tensor w1 = Tensor::randn({5, 3}, gen, DType::f64).requires_grad_();
  const Tensor b1 = Tensor::randn({5}, gen, DType::f64).requires_grad_();
  const GradcheckResult check =
      gradcheck([&](const std::vector<Tensor>& in) { return tanh(linear(x, in[0], in[1])); }, {w1, b1});
  expect(check.ok, "gradcheck of tanh(linear(x, w, b)): " + check.message);

  // A few Adam steps on a linear classifier lower its loss.
  nn::Linear layer(3, 2, gen);
  optim::Adam adam(layer.named_parameters(), {.lr = 0.05});
  const Tensor inputs = Tensor::randn({8, 3}, gen);
  const Tensor targets = Tensor::from_ids({0, 1, 1, 0, 1, 0, 0, 1}, {8});
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    adam.zero_grad();
    const Tensor loss = cross_entropy(layer.forward(inputs), targets);
    backward(loss);
    adam.step();
    (step == 0 ? first : last) = loss.item();
  }
  expect(std::isfinite(first) && last < first, "five Adam steps lower the loss");

  // A shape error thrown inside the library is a tapegrad::ShapeError here.
  bool caught = false;
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}));
  } catch (const ShapeError&) {
    caught = true;
  }
  expect(caught, "matmul of [2,3] by [2,3] throws tapegrad::ShapeError");

  if (failures != 0) return 1;
  std::printf("consumer ok: tapegrad %s, loss %.4f -> %.4f\n", version(), first, last);
  return 0;
}
