// Example: Newton's method with the Hessian from the tape, beside gradient descent.
//
// L2-regularised logistic regression on 400 synthetic points in 4 dimensions (plus a bias feature),
// labels y = +-1 drawn from a noisy linear rule, so the classes overlap a little (separable-ish):
//   L(w) = mean_i softplus(-y_i <x_i, w>) + (ridge / 2) |w|^2,   ridge = 0.01
// The ridge term keeps the Hessian
//   H(w) = mean_i s_i (1 - s_i) x_i x_i^T + ridge I,   s_i = sigmoid(y_i <x_i, w>)
// well conditioned. The program never writes H: hessian(L, w) differentiates the recorded gradient once
// per coordinate; the Newton step solves H d = grad L by a Cholesky factorisation written here.
//
// Both methods start from w = 0 and their distance to the minimiser w* (found by running Newton to
// round-off first) is printed per iteration: Newton's error roughly squares each step once it is
// close (quadratic convergence) and reaches 1e-10 in a handful of steps, while gradient descent with
// the safe step 1/L (L bounds the largest eigenvalue of H anywhere) shrinks it by a constant factor.
//
//   build/examples/newton_logistic [POINTS]      (default 400, well under a second)
//
// Exits 1 when Newton does not reach 1e-10 within 10 iterations.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <tapegrad/functional.hpp>
#include <tapegrad/tapegrad.hpp>
#include <vector>

using namespace tapegrad;

namespace {

constexpr int kDim = 5;  // 4 features and a constant 1 (the bias)
constexpr double kRidge = 0.01;

// x [N, kDim] (last column 1) and y [N] in {-1, +1}: y = sign(<x, w_true> + noise).
struct Data {
  Tensor x, y;
};
Data make_data(int n, Generator& gen) {
  const double w_true[kDim] = {1.5, -2.0, 1.0, 0.5, 0.3};
  std::vector<double> xs, ys;
  for (int i = 0; i < n; ++i) {
    double z = 0;
    for (int j = 0; j < kDim; ++j) {
      const double v = j + 1 < kDim ? gen.normal() : 1.0;
      xs.push_back(v);
      z += w_true[j] * v;
    }
    ys.push_back(z + 0.8 * gen.normal() >= 0 ? 1.0 : -1.0);
  }
  return {Tensor::from_vector(xs, {n, kDim}, DType::f64), Tensor::from_vector(ys, {n}, DType::f64)};
}

// L(w) for w [kDim].
Tensor loss(const Data& d, const Tensor& w) {
  const Tensor margin = mul(d.y, sum(mul(d.x, w), 1));  // y_i <x_i, w>, [N]
  return add(mean(softplus(neg(margin))), mul(sum(mul(w, w)), kRidge / 2));
}

Tensor vec(const std::vector<double>& w) { return Tensor::from_vector(w, {kDim}, DType::f64); }

std::vector<double> gradient(const Data& d, const std::vector<double>& w) {
  const Tensor p = vec(w).requires_grad_();
  return grad({loss(d, p)}, {p})[0].to_vector();
}

// Solves a x = b for a symmetric positive definite n x n a (row-major): a = L L^T, then two triangular
// solves.
std::vector<double> cholesky_solve(const std::vector<double>& a, std::vector<double> b, int n) {
  std::vector<double> l(size_t(n * n), 0.0);
  for (int j = 0; j < n; ++j) {
    double diag = a[size_t(j * n + j)];
    for (int k = 0; k < j; ++k) diag -= l[size_t(j * n + k)] * l[size_t(j * n + k)];
    if (diag <= 0) throw std::runtime_error("cholesky_solve: the matrix is not positive definite");
    l[size_t(j * n + j)] = std::sqrt(diag);
    for (int i = j + 1; i < n; ++i) {
      double s = a[size_t(i * n + j)];
      for (int k = 0; k < j; ++k) s -= l[size_t(i * n + k)] * l[size_t(j * n + k)];
      l[size_t(i * n + j)] = s / l[size_t(j * n + j)];
    }
  }
  for (int i = 0; i < n; ++i) {  // L z = b
    for (int k = 0; k < i; ++k) b[size_t(i)] -= l[size_t(i * n + k)] * b[size_t(k)];
    b[size_t(i)] /= l[size_t(i * n + i)];
  }
  for (int i = n - 1; i >= 0; --i) {  // L^T x = z
    for (int k = i + 1; k < n; ++k) b[size_t(i)] -= l[size_t(k * n + i)] * b[size_t(k)];
    b[size_t(i)] /= l[size_t(i * n + i)];
  }
  return b;
}

// The Hessian of L at w as a row-major kDim x kDim matrix, from the tape.
std::vector<double> hessian_at(const Data& d, const std::vector<double>& w) {
  return hessian([&](const Tensor& p) { return loss(d, p); }, vec(w)).to_vector();
}

// One Newton step: w - H(w)^-1 grad L(w).
std::vector<double> newton_step(const Data& d, std::vector<double> w) {
  const std::vector<double> step = cholesky_solve(hessian_at(d, w), gradient(d, w), kDim);
  for (int j = 0; j < kDim; ++j) w[size_t(j)] -= step[size_t(j)];
  return w;
}

double distance(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 400;
  if (n < 10) {
    std::fprintf(stderr, "usage: %s [POINTS >= 10]\n", argv[0]);
    return 2;
  }
  Generator gen(1);
  const Data data = make_data(n, gen);
  const std::vector<double> zero(kDim, 0.0);

  // The minimiser, to round-off: Newton run well past convergence.
  std::vector<double> w_star = zero;
  for (int k = 0; k < 30; ++k) w_star = newton_step(data, w_star);
  std::printf("logistic regression, %d points, %d weights (bias included), ridge %g\n", n, kDim, kRidge);
  std::printf("w* = [");
  for (int j = 0; j < kDim; ++j) std::printf("%s%.6f", j ? ", " : "", w_star[size_t(j)]);
  std::printf("], |grad L(w*)| = %.1e\n", distance(gradient(data, w_star), zero));

  // Gradient descent's step: s(1 - s) <= 1/4, with equality at w = 0, so H(w) <= H(0) for every w and
  // the largest row sum of |H(0)| (a bound on its largest eigenvalue) bounds the curvature anywhere.
  const std::vector<double> h0 = hessian_at(data, zero);
  double curvature = 0;
  for (int i = 0; i < kDim; ++i) {
    double row = 0;
    for (int j = 0; j < kDim; ++j) row += std::abs(h0[size_t(i * kDim + j)]);
    curvature = std::max(curvature, row);
  }
  const double lr = 1 / curvature;
  std::printf("gradient descent step 1/L = %.4f (L = %.4f bounds the Hessian's largest eigenvalue)\n", lr, curvature);

  std::vector<double> wn = zero, wg = zero;
  int newton_reached = -1;
  for (int k = 0; k <= 12; ++k) {
    const double en = distance(wn, w_star), eg = distance(wg, w_star);
    std::printf("iteration %2d  newton %.3e  gd %.3e\n", k, en, eg);
    if (newton_reached < 0 && en < 1e-10) newton_reached = k;
    wn = newton_step(data, wn);
    const std::vector<double> g = gradient(data, wg);
    for (int j = 0; j < kDim; ++j) wg[size_t(j)] -= lr * g[size_t(j)];
  }
  int gd_steps = 13;
  for (; gd_steps < 100000 && distance(wg, w_star) >= 1e-10; ++gd_steps) {
    const std::vector<double> g = gradient(data, wg);
    for (int j = 0; j < kDim; ++j) wg[size_t(j)] -= lr * g[size_t(j)];
  }
  std::printf("newton reached |w - w*| < 1e-10 at iteration %d; gradient descent needed %d iterations\n",
              newton_reached, gd_steps);
  const bool ok = newton_reached >= 0 && newton_reached < 10;
  if (!ok) std::printf("FAILED: Newton did not reach 1e-10 within 10 iterations\n");
  return ok ? 0 : 1;
}
