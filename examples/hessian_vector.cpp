// Example: second derivatives of a neural network's loss, without forming the Hessian.
//
// A 1-16-16-1 tanh MLP (321 parameters, float64) is fitted to sin(2x) on 64 points. Its parameters are
// one flat vector theta, so the loss L(theta) is a function of one tensor and its Hessian
// H = d^2 L / d theta^2 is a 321 x 321 matrix. The program never builds it: hvp(f, {theta}, {v}) gives
// H v from one recorded backward (create_graph: the gradient is itself on the tape) and one backward
// of <gradient, v>. Then:
//
//   1. H v is checked against central differences of the gradient, (g(theta + e v) - g(theta - e v)) / 2e;
//   2. the top eigenvalue of H (the sharpness of the minimum) is found by power iteration,
//      v <- H v / |H v|, each iterate's Rayleigh quotient v^T H v printed;
//   3. on a tiny 1-3-3-1 net (22 parameters) the same power iteration is compared with the largest
//      eigenvalue of the full matrix from hessian(), found by a Jacobi eigen-solver written here.
//
//   build/examples/hessian_vector [ITERATIONS]      (default at most 300 power iterations, about a second)
//
// Exits 1 when a check fails or the power iteration does not converge.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tapegrad/functional.hpp>
#include <tapegrad/optim.hpp>
#include <tapegrad/tapegrad.hpp>
#include <vector>

using namespace tapegrad;

namespace {

// A 1-h-h-1 tanh MLP whose weights are read out of one flat parameter vector, in this order:
// W1 [h, 1], b1 [h], W2 [h, h], b2 [h], W3 [1, h], b3 [1].
struct FlatMlp {
  int64_t h;
  int64_t size() const { return h * h + 4 * h + 1; }

  Tensor forward(const Tensor& theta, const Tensor& x) const {
    int64_t at = 0;
    auto take = [&](Shape shape) {  // the next block of theta, as a [rows, cols] or [n] tensor
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      const Tensor block = reshape(narrow(theta, 0, at, n), shape);
      at += n;
      return block;
    };
    const Tensor w1 = take({h, 1}), b1 = take({h}), w2 = take({h, h}), b2 = take({h}), w3 = take({1, h}),
                 b3 = take({1});
    return linear(tanh(linear(tanh(linear(x, w1, b1)), w2, b2)), w3, b3);
  }
};

// The toy regression: y = sin(2 x) on 64 evenly spaced points of [-2, 2].
struct Data {
  Tensor x, y;
};
Data make_data() {
  std::vector<double> xs, ys;
  for (int i = 0; i < 64; ++i) {
    const double x = -2.0 + 4.0 * i / 63.0;
    xs.push_back(x);
    ys.push_back(std::sin(2 * x));
  }
  return {Tensor::from_vector(xs, {64, 1}, DType::f64), Tensor::from_vector(ys, {64, 1}, DType::f64)};
}

// The loss as the functional API takes it: a function of its inputs, here {theta}.
TensorFn loss_of(const FlatMlp& net, const Data& d) {
  return [net, d](const std::vector<Tensor>& in) {
    const Tensor diff = sub(net.forward(in[0], d.x), d.y);
    return mean(mul(diff, diff));  // mean squared error
  };
}

// theta drawn at the scale of a usual initialisation, then `steps` Adam steps on the loss.
Tensor trained_theta(const FlatMlp& net, const Data& d, int steps, uint64_t seed) {
  Generator gen(seed);
  Tensor theta = Tensor::randn({net.size()}, gen, DType::f64, 0.0, 0.7).requires_grad_();
  optim::AdamOptions options;
  options.lr = 0.01;
  optim::Adam adam({{"theta", theta}}, options);
  const TensorFn loss = loss_of(net, d);
  for (int step = 0; step < steps; ++step) {
    backward(loss({theta}));
    adam.step();
    adam.zero_grad();
  }
  return theta;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> normalized(std::vector<double> v) {
  const double n = std::sqrt(dot(v, v));
  for (double& x : v) x /= n;
  return v;
}

// H v for the loss at theta.
std::vector<double> hessian_times(const TensorFn& loss, const Tensor& theta, const std::vector<double>& v) {
  return hvp(loss, {theta}, {Tensor::from_vector(v, theta.shape(), DType::f64)}).hvp[0].to_vector();
}

// The gradient of the loss at a plain point (a fresh leaf, so nothing is added to theta's .grad).
std::vector<double> gradient_at(const TensorFn& loss, const std::vector<double>& point) {
  const Tensor p = Tensor::from_vector(point, {int64_t(point.size())}, DType::f64).requires_grad_();
  return grad({loss({p})}, {p})[0].to_vector();
}

// Power iteration on H from a fixed start: returns the last Rayleigh quotient v^T H v (|v| = 1) and
// whether two successive ones agreed to `tol` (relative) within `max_iter` products.
struct PowerResult {
  double eigenvalue = 0;
  int iterations = 0;
  bool converged = false;
};
PowerResult power_iteration(const TensorFn& loss, const Tensor& theta, int max_iter, double tol, bool print) {
  Generator gen(11);
  std::vector<double> v = normalized(Tensor::randn(theta.shape(), gen, DType::f64).to_vector());
  PowerResult r;
  for (int k = 1; k <= max_iter; ++k) {
    const std::vector<double> hv = hessian_times(loss, theta, v);
    const double rayleigh = dot(v, hv);  // v^T H v with |v| = 1
    if (print) std::printf("iteration %3d  rayleigh %.12f\n", k, rayleigh);
    const bool settled = k > 1 && std::abs(rayleigh - r.eigenvalue) <= tol * std::abs(rayleigh);
    r.eigenvalue = rayleigh, r.iterations = k;
    if (settled) {
      r.converged = true;
      break;
    }
    v = normalized(hv);
  }
  return r;
}

// Every eigenvalue of the symmetric n x n matrix `a` (row-major) by cyclic Jacobi rotations: each
// rotation zeroes one off-diagonal pair; sweeps repeat until the off-diagonal part vanishes.
std::vector<double> jacobi_eigenvalues(std::vector<double> a, int n) {
  auto at = [&](int i, int j) -> double& { return a[size_t(i) * size_t(n) + size_t(j)]; };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) off += at(i, j) * at(i, j);
    if (off < 1e-30) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        if (at(p, q) == 0) continue;
        // The angle that zeroes a[p][q]: t = tan(angle) is the smaller root of t^2 + 2 theta t - 1 = 0.
        const double theta = (at(q, q) - at(p, p)) / (2 * at(p, q));
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // a <- a J (columns p and q)
          const double kp = at(k, p), kq = at(k, q);
          at(k, p) = c * kp - s * kq, at(k, q) = s * kp + c * kq;
        }
        for (int k = 0; k < n; ++k) {  // a <- J^T a (rows p and q)
          const double pk = at(p, k), qk = at(q, k);
          at(p, k) = c * pk - s * qk, at(q, k) = s * pk + c * qk;
        }
      }
  }
  std::vector<double> eig(size_t(n), 0.0);
  for (int i = 0; i < n; ++i) eig[size_t(i)] = at(i, i);
  return eig;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_iter = argc > 1 ? std::atoi(argv[1]) : 300;
  if (max_iter < 2) {
    std::fprintf(stderr, "usage: %s [ITERATIONS >= 2]\n", argv[0]);
    return 2;
  }
  const Data data = make_data();
  const FlatMlp net{16};
  const TensorFn loss = loss_of(net, data);
  const Tensor theta = trained_theta(net, data, 300, 5);
  std::printf("a 1-16-16-1 tanh MLP, %lld parameters, fitted to sin(2x) on 64 points: mse %.6f after 300 Adam steps\n",
              (long long)net.size(), loss({theta}).item());

  // 1. H v against central differences of the gradient along v.
  Generator gen(3);
  const std::vector<double> v = normalized(Tensor::randn(theta.shape(), gen, DType::f64).to_vector());
  const std::vector<double> hv = hessian_times(loss, theta, v);
  const double eps = 1e-5;
  std::vector<double> plus = theta.to_vector(), minus = plus;
  for (size_t i = 0; i < v.size(); ++i) plus[i] += eps * v[i], minus[i] -= eps * v[i];
  const std::vector<double> g_plus = gradient_at(loss, plus), g_minus = gradient_at(loss, minus);
  double max_diff = 0, max_hv = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(hv[i] - (g_plus[i] - g_minus[i]) / (2 * eps)));
    max_hv = std::max(max_hv, std::abs(hv[i]));
  }
  const double hvp_error = max_diff / max_hv;
  std::printf("hvp vs central differences of the gradient (step %.0e): max relative error %.2e (|H v|_max %.4f)\n",
              eps, hvp_error, max_hv);

  // 2. The top eigenvalue of the 321 x 321 Hessian from Hessian-vector products alone.
  std::printf("power iteration on the Hessian (one hvp per iteration):\n");
  const PowerResult big = power_iteration(loss, theta, max_iter, 1e-10, /*print=*/true);
  std::printf("top eigenvalue: %.10f after %d iterations (%s)\n", big.eigenvalue, big.iterations,
              big.converged ? "converged" : "NOT converged");

  // 3. A net small enough for the full Hessian: power iteration against a dense eigen-solver.
  const FlatMlp tiny{3};
  const TensorFn tiny_loss = loss_of(tiny, data);
  const Tensor tiny_theta = trained_theta(tiny, data, 300, 2);
  const int n = int(tiny.size());
  const Tensor h = hessian([&](const Tensor& t) { return tiny_loss({t}); }, tiny_theta.detach());
  const std::vector<double> hm = h.to_vector();
  double asymmetry = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) asymmetry = std::max(asymmetry, std::abs(hm[size_t(i * n + j)] - hm[size_t(j * n + i)]));
  const std::vector<double> eig = jacobi_eigenvalues(hm, n);
  // Power iteration finds the eigenvalue of largest magnitude.
  const double dominant = *std::max_element(eig.begin(), eig.end(), [](double a, double b) { return std::abs(a) < std::abs(b); });
  const PowerResult small = power_iteration(tiny_loss, tiny_theta, 5000, 1e-13, /*print=*/false);
  const double agreement = std::abs(small.eigenvalue - dominant) / std::abs(dominant);
  std::printf("tiny 1-3-3-1 net (%d parameters): hessian() is %s, symmetric to %.1e; eigenvalues from %.6f to %.6f\n", n,
              to_string(h.shape()).c_str(), asymmetry, *std::min_element(eig.begin(), eig.end()),
              *std::max_element(eig.begin(), eig.end()));
  std::printf("tiny net top eigenvalue: power iteration %.10f (%d iterations, %s), Jacobi on hessian() %.10f, "
              "relative difference %.2e\n",
              small.eigenvalue, small.iterations, small.converged ? "converged" : "NOT converged", dominant, agreement);

  bool ok = true;
  if (!(hvp_error < 1e-6)) ok = false, std::printf("FAILED: hvp differs from finite differences\n");
  if (!big.converged || !small.converged) ok = false, std::printf("FAILED: power iteration did not converge\n");
  if (!(agreement < 1e-6)) ok = false, std::printf("FAILED: power iteration and the dense eigen-solver disagree\n");
  return ok ? 0 : 1;
}
