// A small end-to-end training demo: a 2-layer MLP learns to classify points of three interleaved
// spirals (a built-in, seeded task) with SGD + momentum, printing the loss as it goes down.
// `tools/run train` runs this until the sequence models land.
#include <cmath>
#include <cstdio>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

int main() {
  constexpr int kClasses = 3, kPerClass = 200, kHidden = 64, kSteps = 600;
  Generator gen(1);
  // Spiral data: class c's points lie on an arm rotated by 2*pi*c/3, with noise.
  std::vector<double> xs;
  std::vector<int32_t> ys;
  for (int c = 0; c < kClasses; ++c)
    for (int i = 0; i < kPerClass; ++i) {
      const double r = double(i) / kPerClass, t = 4.0 * r + 2.0 * M_PI * c / kClasses + 0.2 * gen.normal();
      xs.push_back(r * std::sin(t));
      xs.push_back(r * std::cos(t));
      ys.push_back(c);
    }
  const int n = kClasses * kPerClass;
  const Tensor x = Tensor::from_vector(xs, {n, 2});
  const Tensor y = Tensor::from_ids(ys, {n});

  std::vector<Tensor> params = {
      Tensor::randn({kHidden, 2}, gen, DType::f32, 0, 1.0).requires_grad_(), Tensor::zeros({kHidden}).requires_grad_(),
      Tensor::randn({kClasses, kHidden}, gen, DType::f32, 0, 1.0 / std::sqrt(kHidden)).requires_grad_(),
      Tensor::zeros({kClasses}).requires_grad_()};
  std::vector<Tensor> velocity;
  for (const Tensor& p : params) velocity.push_back(Tensor::zeros(p.shape()));

  for (int step = 1; step <= kSteps; ++step) {
    const Tensor logits = linear(relu(linear(x, params[0], params[1])), params[2], params[3]);
    const Tensor loss = cross_entropy(logits, y);
    backward(loss);
    {
      NoGrad no_grad;  // v = 0.9 v + g;  p -= 0.5 v
      for (size_t i = 0; i < params.size(); ++i) {
        velocity[i].copy_from(add(mul(velocity[i], 0.9), params[i].grad()));
        params[i].copy_from(sub(params[i], mul(velocity[i], 0.5)));
        params[i].zero_grad();
      }
    }
    if (step == 1 || step % 50 == 0) {
      NoGrad no_grad;
      const std::vector<double> pred = max(logits, 1).to_vector();
      const std::vector<double> lv = logits.to_vector();
      int correct = 0;
      for (int i = 0; i < n; ++i) correct += lv[size_t(i * kClasses + ys[size_t(i)])] == pred[size_t(i)];
      std::printf("step %4d  loss %.4f  train accuracy %.3f\n", step, loss.item(), double(correct) / n);
      std::fflush(stdout);
    }
  }
  return 0;
}
