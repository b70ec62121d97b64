// Example: a meta-gradient, differentiating through SGD steps to tune the learning rate.
//
// A 1-16-1 tanh MLP (float64) fits y = sin(3 x) + 0.3 x from 32 noisy training points; 32 other
// points are the validation set. One inner SGD step is
//   w' = w - a * grad_w L_train(w)
// and with grad(..., {.create_graph = true}) that gradient is a recorded tensor, so w' is a function
// of a and of w on the tape, and so is L_val(w'). Its derivatives
//   d L_val(w') / d a   and   d L_val(w') / d w
// (the second through the Hessian of L_train, as w' depends on w twice) come from one more backward.
//
// The program checks them:
//   - for one step, d L_val(w') / d a against the closed form -<grad L_val(w'), grad L_train(w)>;
//   - through 3 unrolled steps, against central differences of the whole procedure in a and in one
//     weight;
// then tunes the learning rate, from a = 0.01 (far too small), by gradient descent on log a (Adam, 20
// outer steps) for the validation loss after 5 inner steps, each outer step one differentiated unroll.
//
//   build/examples/meta_gradient [OUTER_STEPS]      (default 20, about a second)
//
// Exits 1 when a check fails or the tuned learning rate does not lower the validation loss.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tapegrad/optim.hpp>
#include <tapegrad/tapegrad.hpp>
#include <vector>

using namespace tapegrad;

namespace {

struct Data {
  Tensor x, y;  // [N, 1] each
};
// n points of [-1.5, 1.5]; `offset` shifts the grid so the validation points fall between training ones.
Data make_data(int n, double offset, Generator& gen) {
  std::vector<double> xs, ys;
  for (int i = 0; i < n; ++i) {
    const double x = -1.5 + 3.0 * (i + offset) / n;
    xs.push_back(x);
    ys.push_back(std::sin(3 * x) + 0.3 * x + 0.05 * gen.normal());
  }
  return {Tensor::from_vector(xs, {n, 1}, DType::f64), Tensor::from_vector(ys, {n, 1}, DType::f64)};
}

// w = {W1 [16, 1], b1 [16], W2 [1, 16], b2 [1]}.
using Weights = std::vector<Tensor>;

Tensor mse(const Weights& w, const Data& d) {
  const Tensor diff = sub(linear(tanh(linear(d.x, w[0], w[1])), w[2], w[3]), d.y);
  return mean(mul(diff, diff));
}

Weights initial_weights() {
  Generator gen(21);
  auto leaf = [&](Shape s, double std) { return Tensor::randn(s, gen, DType::f64, 0.0, std).requires_grad_(); };
  return {leaf({16, 1}, 1.0), leaf({16}, 1.0), leaf({1, 16}, 0.25), leaf({1}, 0.0)};
}

// `steps` SGD steps w <- w - a * grad L_train(w) from w. With `differentiable` each gradient is
// recorded (create_graph), so the result is a function of a and of w on the tape; without, the steps
// are plain arithmetic (for finite differences).
Weights unroll(Weights w, const Tensor& a, const Data& train, int steps, bool differentiable) {
  for (int s = 0; s < steps; ++s) {
    const std::vector<Tensor> g = grad({mse(w, train)}, w, {.create_graph = differentiable});
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = sub(w[i], mul(g[i], a));
      if (!differentiable) w[i] = w[i].detach().requires_grad_();  // the next step's inputs
    }
  }
  return w;
}

Tensor scalar(double v) { return Tensor::from_vector({v}, {1}, DType::f64); }

// L_val after `steps` plain steps with rate a from w0, with w0's entry `index` of tensor `which` moved by `delta`.
double val_after(const Weights& w0, double a, const Data& train, const Data& val, int steps, size_t which = 0,
                 int64_t index = 0, double delta = 0) {
  Weights w;
  for (const Tensor& t : w0) w.push_back(t.detach().clone());
  std::vector<double> moved = w[which].to_vector();
  moved[size_t(index)] += delta;
  w[which] = Tensor::from_vector(moved, w[which].shape(), DType::f64);
  for (Tensor& t : w) t.requires_grad_();
  const Weights end = unroll(w, scalar(a), train, steps, false);
  NoGrad no_grad;
  return mse(end, val).item();
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

}  // namespace

int main(int argc, char** argv) {
  const int outer_steps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (outer_steps < 1) {
    std::fprintf(stderr, "usage: %s [OUTER_STEPS >= 1]\n", argv[0]);
    return 2;
  }
  Generator gen(8);
  const Data train = make_data(32, 0.0, gen), val = make_data(32, 0.5, gen);
  const Weights w0 = initial_weights();
  const double a0 = 0.05;
  bool checks_ok = true;

  {  // One step: the meta-gradient against its closed form.
    const Tensor a = scalar(a0).requires_grad_();
    const std::vector<Tensor> g_train = grad({mse(w0, train)}, w0);  // plain: for the closed form
    const Weights w1 = unroll(w0, a, train, 1, true);
    const Tensor val_loss = mse(w1, val);
    const double meta = grad({val_loss}, {a})[0].item();
    // The closed form needs grad L_val at w' as a point of its own.
    Weights w1_point;
    for (const Tensor& t : w1) w1_point.push_back(t.detach().requires_grad_());
    const std::vector<Tensor> g_val = grad({mse(w1_point, val)}, w1_point);
    double closed = 0;
    for (size_t i = 0; i < w0.size(); ++i) closed -= sum(mul(g_val[i], g_train[i])).item();
    const double err = relative(meta, closed);
    std::printf("one step, a = %.2f: d L_val(w')/d a = %+.12e; -<grad L_val(w'), grad L_train(w)> = %+.12e; "
                "relative error %.1e\n",
                a0, meta, closed, err);
    checks_ok = checks_ok && err < 1e-10;
  }

  {  // Three unrolled steps: the meta-gradients in a and in one weight against central differences.
    const int steps = 3;
    const Tensor a = scalar(a0).requires_grad_();
    const Weights w3 = unroll(w0, a, train, steps, true);
    const std::vector<Tensor> g = grad({mse(w3, val)}, {a, w0[0]});
    const double eps = 1e-6;
    const double da = g[0].item();
    const double da_fd = (val_after(w0, a0 + eps, train, val, steps) - val_after(w0, a0 - eps, train, val, steps)) / (2 * eps);
    const double dw = g[1].to_vector()[4];
    const double dw_fd = (val_after(w0, a0, train, val, steps, 0, 4, eps) - val_after(w0, a0, train, val, steps, 0, 4, -eps)) / (2 * eps);
    std::printf("3 unrolled steps: d L_val/d a       backprop %+.10e, central differences %+.10e, relative error %.1e\n",
                da, da_fd, relative(da, da_fd));
    std::printf("3 unrolled steps: d L_val/d W1[4,0] backprop %+.10e, central differences %+.10e, relative error %.1e\n",
                dw, dw_fd, relative(dw, dw_fd));
    checks_ok = checks_ok && relative(da, da_fd) < 1e-6 && relative(dw, dw_fd) < 1e-6;
  }

  // Tuning the learning rate: log a by Adam on L_val after 5 differentiated inner steps from w0.
  const int inner = 5;
  const double a_start = 0.01;  // far too small: 5 steps at this rate barely move the weights
  Tensor log_a = scalar(std::log(a_start)).requires_grad_();
  optim::AdamOptions options;
  options.lr = 0.15;
  optim::Adam adam({{"log_a", log_a}}, options);
  std::printf("tuning the inner learning rate for L_val after %d SGD steps (Adam on log lr):\n", inner);
  for (int step = 1; step <= outer_steps; ++step) {
    const Tensor a = exp(log_a);
    const Tensor val_loss = mse(unroll(w0, a, train, inner, true), val);
    backward(val_loss);  // d(val loss)/d(log lr) into log_a's .grad (and the unused d/d w0 into w0's)
    const double meta = log_a.grad().item();
    std::printf("outer %2d  lr %.4f  val loss %.5f  d(val loss)/d(log lr) %+.3e\n", step, a.item(), val_loss.item(),
                meta);
    adam.step();
    adam.zero_grad();
    for (Tensor t : w0) t.zero_grad();
  }
  const double a_end = std::exp(log_a.item());
  const double val_start = val_after(w0, a_start, train, val, inner), val_end = val_after(w0, a_end, train, val, inner);
  std::printf("lr %.4f -> %.4f: val loss after %d steps %.5f -> %.5f\n", a_start, a_end, inner, val_start, val_end);
  const bool tuned = val_end < 0.8 * val_start;
  if (!tuned) std::printf("FAILED: the tuned learning rate did not lower the validation loss by 20%%\n");
  if (!checks_ok) std::printf("FAILED: a meta-gradient differs from its check\n");
  return checks_ok && tuned ? 0 : 1;
}
