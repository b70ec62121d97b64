// Example: your own op. A differentiable function defined outside the library, with its forward and
// its backward written side by side, recorded on the tape like any built-in op, checked against
// finite differences with gradcheck, then used in a model that trains.
//
// The op is Swish with a learnable slope (Ramachandran et al., "Searching for activation functions"):
//   y = x * s,  s = sigmoid(beta * x)
//   dy/dx    = s + beta * x * s * (1 - s)
//   dy/dbeta = x^2 * s * (1 - s)
// with one beta per channel: x [.., C], beta [C]. beta = 1 is SiLU; a large beta approaches ReLU and
// beta = 0 gives x / 2, so the network picks the shape of its own nonlinearity.
//
// How an op joins the tape (the library's own ops in src/ops do exactly this):
//   1. compute the output under NoGrad, so the ops used inside leave no entries of their own;
//   2. if should_record(inputs), call record_custom with a backward closure. The closure receives
//      d(loss)/d(output) and adds d(loss)/d(input) to each input that requires grad with
//      accumulate_grad. It captures what the derivative needs (here x, beta and s), nothing more.
//
//   build/examples/custom_op [STEPS]      (default 400 Adam steps, well under a second)
//
// Exits 1 when the gradient check fails, when it fails to catch a deliberately wrong backward, or
// when the model does not train.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numbers>
#include <tapegrad/nn/layers.hpp>
#include <tapegrad/optim.hpp>
#include <tapegrad/tapegrad.hpp>
#include <vector>

using namespace tapegrad;

namespace {

// x [.., C], beta [C] -> y [.., C]. `wrong_backward` leaves the beta * x * s * (1 - s) term out of
// dy/dx, a plausible slip, to show that gradcheck notices.
Tensor swish(const Tensor& x, const Tensor& beta, bool wrong_backward = false) {
  if (beta.ndim() != 1 || x.ndim() < 1 || x.size(-1) != beta.size(0))
    throw ShapeError("swish: expected x [.., C] and beta [C], got " + x.describe() + " and " +
                     beta.describe());
  Tensor s, y;
  {
    NoGrad no_grad;
    s = sigmoid(mul(x, beta));  // beta broadcasts over the leading dimensions
    y = mul(x, s);              // y = x * s
  }
  if (should_record({&x, &beta}))
    record_custom("swish", {x, beta}, y, [x, beta, s, wrong_backward](const Tensor& grad_y) {
      // grad_y = d(loss)/dy, the same shape as y. By the chain rule d(loss)/dx = grad_y * dy/dx,
      // element by element. Backward runs with recording off, so these ops are plain arithmetic.
      const Tensor ds = mul(s, 1.0 - s);  // sigmoid' = s (1 - s)
      if (x.requires_grad()) {
        const Tensor local =
            wrong_backward ? s : add(s, mul(mul(beta, x), ds));  // dy/dx = s + beta x s (1 - s)
        accumulate_grad(x, mul(grad_y, local));
      }
      if (beta.requires_grad()) {
        // dy/dbeta = x^2 s (1 - s) per element; beta was broadcast over the leading dimensions, so its
        // gradient is the sum over all of them.
        const Tensor per_element = mul(grad_y, mul(mul(x, x), ds));
        accumulate_grad(beta, sum(reshape(per_element, {-1, beta.size(0)}), 0));
      }
    });
  return y;
}

// Compares swish's backward with central differences in float64, for both inputs at once.
bool check_gradients() {
  Generator gen(7);
  const Tensor x = Tensor::randn({4, 5}, gen, DType::f64).requires_grad_();
  const Tensor beta = Tensor::rand({5}, gen, DType::f64, 0.5, 2.0).requires_grad_();
  const GradcheckResult right =
      gradcheck([](const std::vector<Tensor>& in) { return swish(in[0], in[1]); }, {x, beta}, {}, "swish");
  std::printf("gradcheck swish, x [4,5] and beta [5], float64: %s (max abs error %.1e, max rel error %.1e)\n",
              right.ok ? "passed" : "FAILED", right.max_abs_error, right.max_rel_error);
  if (!right.ok) std::printf("  %s\n", right.message.c_str());
  // The same check with beta held constant: the closure must skip inputs that do not require grad.
  const Tensor fixed_beta = beta.detach();
  const GradcheckResult x_only =
      gradcheck([&](const std::vector<Tensor>& in) { return swish(in[0], fixed_beta); }, {x}, {},
                "swish (beta constant)");
  std::printf("gradcheck swish, beta constant, float64: %s\n", x_only.ok ? "passed" : "FAILED");
  const GradcheckResult wrong =
      gradcheck([](const std::vector<Tensor>& in) { return swish(in[0], in[1], /*wrong_backward=*/true); },
                {x, beta}, {}, "swish with a wrong dy/dx");
  std::printf("gradcheck of a deliberately wrong backward (dy/dx = s): %s\n  %s\n",
              wrong.ok ? "passed, which it must not" : "caught, as it should be", wrong.message.c_str());
  return right.ok && x_only.ok && !wrong.ok;
}

// A regression MLP 1 -> 32 -> 32 -> 1 with swish after each hidden layer, each hidden unit with its
// own learnable beta (registered as parameters, so the optimizer trains them with the weights).
class SwishMlp : public nn::Module {
 public:
  explicit SwishMlp(Generator& gen)
      : fc1(register_module("fc1", std::make_shared<nn::Linear>(1, 32, gen))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(32, 32, gen))),
        out(register_module("out", std::make_shared<nn::Linear>(32, 1, gen))),
        beta1(register_parameter("beta1", Tensor::ones({32}))),
        beta2(register_parameter("beta2", Tensor::ones({32}))) {}
  Tensor forward(const Tensor& x) const {
    return out->forward(swish(fc2->forward(swish(fc1->forward(x), beta1)), beta2));
  }
  std::shared_ptr<nn::Linear> fc1, fc2, out;
  Tensor beta1, beta2;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 400;
  if (steps < 1) {
    std::fprintf(stderr, "usage: %s [STEPS >= 1]\n", argv[0]);
    return 2;
  }
  const bool gradients_ok = check_gradients();

  // The task: fit f(x) = sin(3 x) + x^2 / 2 on 256 points of [-2, 2].
  std::vector<double> xs, ys;
  for (int i = 0; i < 256; ++i) {
    const double x = -2.0 + 4.0 * i / 255.0;
    xs.push_back(x);
    ys.push_back(std::sin(3 * x) + 0.5 * x * x);
  }
  const Tensor x = Tensor::from_vector(xs, {256, 1}), target = Tensor::from_vector(ys, {256, 1});
  Generator gen(3);
  SwishMlp model(gen);
  optim::Adam optimizer(model.named_parameters(), {.lr = 0.01});

  {  // What the tape holds after one forward pass: the custom op sits among the library's ops.
    Tape tape;
    TapeScope scope(tape);
    model.forward(x);
    std::printf("the tape of one forward pass:\n%s", tape.dump().c_str());
  }

  double first = 0, last = 0;
  std::printf("fitting sin(3x) + x^2/2 on [-2, 2] with a 1-32-32-1 swish MLP\n");
  for (int step = 1; step <= steps; ++step) {
    const Tensor diff = sub(model.forward(x), target);
    const Tensor loss = mean(mul(diff, diff));  // mean squared error
    backward(loss);                             // runs swish's closure twice, once per layer
    optimizer.step();
    optimizer.zero_grad();
    last = loss.item();
    if (step == 1) first = last;
    if (step == 1 || step % 50 == 0 || step == steps) std::printf("step %4d  mse %.5f\n", step, last);
  }
  const std::vector<double> b1 = model.beta1.to_vector(), b2 = model.beta2.to_vector();
  std::printf("learned beta: layer 1 in [%.2f, %.2f], layer 2 in [%.2f, %.2f] (all started at 1)\n",
              *std::min_element(b1.begin(), b1.end()), *std::max_element(b1.begin(), b1.end()),
              *std::min_element(b2.begin(), b2.end()), *std::max_element(b2.begin(), b2.end()));
  std::printf("mse %.5f -> %.5f\n", first, last);

  const bool trained = last < 0.02 * first;
  if (!trained) std::printf("FAILED: the mean squared error did not fall below 2%% of its first value\n");
  if (!gradients_ok) std::printf("FAILED: gradient check\n");
  return gradients_ok && trained ? 0 : 1;
}
