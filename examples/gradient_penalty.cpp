// Example: training on a loss that contains a gradient (a gradient penalty, as in input-gradient
// regularisation and WGAN-GP).
//
// A 2-32-1 tanh MLP (float64) is fitted to y = sin(2 x1) cos(x2) + noise on 256 points with
//   total = loss + lambda * penalty,   loss = mean_i l_i,   l_i = (f(x_i) - y_i)^2,
//   penalty = mean_i |d l_i / d x_i|^2
// the squared norm of each example's loss gradient with respect to its input, which makes the fit
// flat around the data (less sensitive to input noise). The input gradient comes from
// grad({sum_i l_i}, {x}, {.create_graph = true}): row i of it is d l_i / d x_i (example i's loss does
// not depend on the other inputs), and it is a tensor on the tape like any other, so backward(total)
// differentiates through the recorded backward to the weights' .grad.
//
// The program checks that d(penalty)/d(weight) is right against central differences of the penalty for
// one entry of each weight, then trains with Adam and prints the loss and the penalty falling, and
// beside it the penalty the same model ends with when trained on the loss alone.
//
//   build/examples/gradient_penalty [STEPS]      (default 400 Adam steps, about a second)
//
// Exits 1 when a finite-difference check fails or the loss or the penalty does not fall.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tapegrad/optim.hpp>
#include <tapegrad/tapegrad.hpp>
#include <vector>

using namespace tapegrad;

namespace {

constexpr double kLambda = 0.5;

struct Data {
  Tensor x, y;  // x [N, 2], y [N, 1]
};
Data make_data(int n, Generator& gen) {
  std::vector<double> xs, ys;
  for (int i = 0; i < n; ++i) {
    const double a = -2 + 4 * gen.uniform(), b = -2 + 4 * gen.uniform();
    xs.push_back(a), xs.push_back(b);
    ys.push_back(std::sin(2 * a) * std::cos(b) + 0.05 * gen.normal());
  }
  return {Tensor::from_vector(xs, {n, 2}, DType::f64), Tensor::from_vector(ys, {n, 1}, DType::f64)};
}

// The model's weights: 2 -> 32 (tanh) -> 1.
struct Weights {
  Tensor w1, b1, w2, b2;
  optim::ParamList named() const { return {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}}; }
};
Weights make_weights(Generator& gen) {
  auto leaf = [&](Shape s, double std) { return Tensor::randn(s, gen, DType::f64, 0.0, std).requires_grad_(); };
  return {leaf({32, 2}, 0.7), leaf({32}, 0.7), leaf({1, 32}, 0.18), leaf({1}, 0.0)};
}

struct Terms {
  Tensor loss, penalty;
};

// The loss and the penalty. With `differentiable` the input gradient is recorded (create_graph), so
// the penalty can be backpropagated; without it, it is only a value (for finite differences).
Terms terms(const Weights& w, const Data& d, bool differentiable) {
  const Tensor x = d.x.detach().requires_grad_();  // a leaf of its own: we want d/dx
  const Tensor f = linear(tanh(linear(x, w.w1, w.b1)), w.w2, w.b2);
  const Tensor diff = sub(f, d.y);
  const Tensor per_example = mul(diff, diff);  // l_i, [N, 1]
  // Kept on the tape either way: the loss is backpropagated after it.
  const Tensor gx = grad({sum(per_example)}, {x}, {.retain_graph = true, .create_graph = differentiable})[0];  // [N, 2]
  return {mean(per_example), mean(sum(mul(gx, gx), 1))};
}

// The penalty with one entry of one weight moved by `delta` (the others as they are).
double penalty_moved(const Weights& w, const Data& d, Tensor Weights::*which, int64_t index, double delta) {
  Weights moved{w.w1.detach(), w.b1.detach(), w.w2.detach(), w.b2.detach()};
  std::vector<double> values = (w.*which).to_vector();
  values[size_t(index)] += delta;
  moved.*which = Tensor::from_vector(values, (w.*which).shape(), DType::f64);
  return terms(moved, d, false).penalty.item();
}

// d(penalty)/d(one entry of each weight): backpropagated through the recorded input gradient, and by
// central differences. Returns the largest relative error.
double check_penalty_gradient(const Weights& w, const Data& d) {
  for (auto [name, t] : w.named()) t.zero_grad();
  backward(terms(w, d, true).penalty);
  struct Probe {
    const char* name;
    Tensor Weights::*which;
    int64_t index;
  };
  const Probe probes[] = {{"w1[3,1]", &Weights::w1, 3 * 2 + 1}, {"b1[7]", &Weights::b1, 7},
                          {"w2[0,5]", &Weights::w2, 5}, {"b2[0]", &Weights::b2, 0}};
  double worst = 0;
  const double eps = 1e-6;
  for (const Probe& p : probes) {
    const double backprop = (w.*p.which).grad().to_vector()[size_t(p.index)];
    const double fd = (penalty_moved(w, d, p.which, p.index, eps) - penalty_moved(w, d, p.which, p.index, -eps)) / (2 * eps);
    const double rel = std::abs(backprop - fd) / std::max(std::abs(fd), 1e-12);
    worst = std::max(worst, rel);
    std::printf("d(penalty)/d %-8s backprop %+.10e, central differences %+.10e, relative error %.1e\n", p.name,
                backprop, fd, rel);
  }
  for (auto [name, t] : w.named()) t.zero_grad();
  return worst;
}

// `steps` Adam steps on loss + lambda * penalty; prints the two terms as they fall. Returns the first
// and last (loss, penalty).
std::pair<Terms, Terms> train_with_penalty(const Weights& w, const Data& d, int steps, double lambda, bool print) {
  optim::AdamOptions options;
  options.lr = 0.01;
  optim::Adam adam(w.named(), options);
  std::pair<Terms, Terms> ends;
  for (int step = 1; step <= steps; ++step) {
    const Terms t = terms(w, d, lambda > 0);
    backward(lambda > 0 ? add(t.loss, mul(t.penalty, lambda)) : t.loss);
    adam.step();
    adam.zero_grad();
    const Terms values{t.loss.detach(), t.penalty.detach()};
    if (step == 1) ends.first = values;
    ends.second = values;
    if (print && (step == 1 || step % 50 == 0 || step == steps))
      std::printf("step %4d  loss %.5f  penalty %.5f\n", step, values.loss.item(), values.penalty.item());
  }
  return ends;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  if (steps < 1) {
    std::fprintf(stderr, "usage: %s [STEPS >= 1]\n", argv[0]);
    return 2;
  }
  Generator gen(4);
  const Data data = make_data(256, gen);
  Generator init(9);
  const Weights weights = make_weights(init);
  Generator init_again(9);
  const Weights plain_weights = make_weights(init_again);  // the same start, for the comparison

  std::printf("gradient of the penalty (through the recorded input gradient) at the initial weights:\n");
  const double worst = check_penalty_gradient(weights, data);

  std::printf("training a 2-32-1 tanh MLP on loss + %.1f * penalty, penalty = mean_i |d l_i / d x_i|^2:\n", kLambda);
  const auto [first, last] = train_with_penalty(weights, data, steps, kLambda, true);
  const double l0 = first.loss.item(), l1 = last.loss.item(), p0 = first.penalty.item(), p1 = last.penalty.item();
  std::printf("loss %.5f -> %.5f, penalty %.5f -> %.5f\n", l0, l1, p0, p1);
  const auto [plain_first, plain_last] = train_with_penalty(plain_weights, data, steps, 0.0, false);
  std::printf("trained on the loss alone instead: loss %.5f, penalty %.5f\n", plain_last.loss.item(),
              plain_last.penalty.item());

  bool ok = true;
  if (!(worst < 1e-6)) ok = false, std::printf("FAILED: d(penalty)/d(weight) differs from finite differences\n");
  if (!(l1 < 0.3 * l0 && p1 < 0.3 * p0)) ok = false, std::printf("FAILED: the loss or the penalty did not fall\n");
  return ok ? 0 : 1;
}
