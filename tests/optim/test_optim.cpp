// The optim layer on its own: each optimizer's update against its formula written out in the test (in
// float64, over several steps, with the gradients chosen by a linear loss), AdamW's decoupled decay
// against Adam's L2 decay, parameters without a gradient left alone, the state round trip that resume
// relies on, gradient clipping by global norm, and the learning-rate schedules' closed forms.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "tapegrad/autograd.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/optim.hpp"

using namespace tapegrad;

namespace {

// A float64 parameter holding `values`.
Tensor parameter(const std::vector<double>& values) {
  Tensor w = Tensor::from_vector(values, {int64_t(values.size())}, DType::f64);
  w.requires_grad_(true);
  return w;
}

// Sets w's gradient to `g` through the loss sum(w * g): d(loss)/dw = g.
void set_grad(const Tensor& w, const std::vector<double>& g) {
  Tensor wt = w;
  wt.zero_grad();
  backward(sum(mul(w, Tensor::from_vector(g, w.shape(), DType::f64))));
}

// The gradients of three steps, different in sign and size per element.
const std::vector<std::vector<double>> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 0.75, 1.5}, {1.0, 0.1, -3.0}};
const std::vector<double> kStart = {1.0, -2.0, 0.5};

}  // namespace

TEST_CASE("SGD with momentum and L2 decay follows v = momentum v + g + wd w; w -= lr v", "[optim]") {
  const double lr = 0.1, momentum = 0.9, wd = 0.01;
  Tensor w = parameter(kStart);
  optim::Sgd sgd({{"w", w}}, {.lr = lr, .momentum = momentum, .weight_decay = wd});
  std::vector<double> ref = kStart, vel(3, 0.0);
  for (const auto& g : kGrads) {
    set_grad(w, g);
    sgd.step();
    for (size_t k = 0; k < 3; ++k) {
      vel[k] = momentum * vel[k] + g[k] + wd * ref[k];
      ref[k] -= lr * vel[k];
    }
    const auto got = w.to_vector();
    for (size_t k = 0; k < 3; ++k) CHECK(got[k] == Approx(ref[k]).epsilon(1e-14));
  }
  CHECK(sgd.steps() == 3);
}

TEST_CASE("Adam and AdamW follow their bias-corrected update; only AdamW decays the weight directly",
          "[optim]") {
  const double lr = 0.01, b1 = 0.9, b2 = 0.98, eps = 1e-9, wd = 0.1;
  for (const bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    Tensor w = parameter(kStart);
    const optim::AdamOptions options{.lr = lr, .betas = {b1, b2}, .eps = eps, .weight_decay = wd};
    optim::Adam plain({{"w", w}}, options);
    optim::AdamW adamw({{"w", w}}, options);
    optim::Adam& adam = decoupled ? adamw : plain;
    std::vector<double> ref = kStart, m(3, 0.0), v(3, 0.0);
    int step = 0;
    for (const auto& grad : kGrads) {
      set_grad(w, grad);
      adam.step();
      ++step;
      for (size_t k = 0; k < 3; ++k) {
        double g = grad[k];
        if (decoupled)
          ref[k] -= lr * wd * ref[k];  // AdamW: w shrinks by lr * wd * w whatever the gradient
        else
          g += wd * ref[k];  // Adam: the decay is part of the gradient, so it enters the moments
        m[k] = b1 * m[k] + (1 - b1) * g;
        v[k] = b2 * v[k] + (1 - b2) * g * g;
        const double mhat = m[k] / (1 - std::pow(b1, step)), vhat = v[k] / (1 - std::pow(b2, step));
        ref[k] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      const auto got = w.to_vector();
      for (size_t k = 0; k < 3; ++k) CHECK(got[k] == Approx(ref[k]).epsilon(1e-13));
    }
  }
}

TEST_CASE("Adam's first step moves every weight by lr against its gradient's sign", "[optim]") {
  // With m and v both bias-corrected, mhat / sqrt(vhat) = g / |g| at step 1: the step is lr per weight.
  Tensor w = parameter(kStart);
  optim::Adam adam({{"w", w}}, {.lr = 0.01, .eps = 1e-12});
  set_grad(w, kGrads[0]);
  adam.step();
  const auto got = w.to_vector();
  for (size_t k = 0; k < 3; ++k) CHECK(got[k] - kStart[k] == Approx(kGrads[0][k] > 0 ? -0.01 : 0.01).epsilon(1e-9));
}

TEST_CASE("a parameter without a gradient is left as it is", "[optim]") {
  Tensor used = parameter(kStart), unused = parameter({3.0, 4.0});
  optim::Adam adam({{"used", used}, {"unused", unused}}, {.lr = 0.1});
  set_grad(used, kGrads[0]);
  adam.step();
  CHECK(unused.to_vector() == std::vector<double>{3.0, 4.0});
  CHECK(used.to_vector() != kStart);
}

TEST_CASE("an optimizer restored from its state tensors takes the same next step, bit for bit", "[optim]") {
  Tensor a = parameter(kStart), b = parameter(kStart);
  optim::AdamW first({{"w", a}}, {.lr = 0.05, .betas = {0.9, 0.98}, .eps = 1e-9, .weight_decay = 0.01});
  for (const auto& g : kGrads) set_grad(a, g), first.step();
  b.copy_from(a);
  optim::AdamW second({{"w", b}}, {.lr = 0.05, .betas = {0.9, 0.98}, .eps = 1e-9, .weight_decay = 0.01});
  second.load_state_tensors(first.state_tensors());
  CHECK(second.steps() == first.steps());
  set_grad(a, kGrads[1]), first.step();
  set_grad(b, kGrads[1]), second.step();
  CHECK(a.to_vector() == b.to_vector());
}

TEST_CASE("state tensors that do not match the parameters are refused by name", "[optim][errors]") {
  Tensor w = parameter(kStart), other = parameter({1.0, 2.0});
  optim::Sgd sgd({{"w", w}}, {.lr = 0.1, .momentum = 0.9});
  optim::Sgd wrong_shape({{"w", other}}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH(sgd.load_state_tensors(wrong_shape.state_tensors()),
                    Catch::Contains("velocity.w") && Catch::Contains("expected"));
  CHECK_THROWS_WITH(sgd.load_state_tensors({}), Catch::Contains("missing tensor velocity.w"));
}

TEST_CASE("clip_grad_norm returns the global norm and scales the gradients down to the limit only",
          "[optim]") {
  Tensor a = parameter({3.0, 0.0}), b = parameter({0.0});
  set_grad(a, {3.0, 0.0});
  set_grad(b, {4.0});  // global norm sqrt(9 + 16) = 5
  CHECK(optim::clip_grad_norm({{"a", a}, {"b", b}}, 10.0) == Approx(5.0));
  CHECK(a.grad().to_vector() == std::vector<double>{3.0, 0.0});  // below the limit: untouched
  CHECK(optim::clip_grad_norm({{"a", a}, {"b", b}}, 1.0) == Approx(5.0));
  CHECK(a.grad().to_vector()[0] == Approx(0.6).epsilon(1e-6));
  CHECK(b.grad().to_vector()[0] == Approx(0.8).epsilon(1e-6));
  CHECK(optim::clip_grad_norm({{"a", a}, {"b", b}}, 0.0) == Approx(1.0).epsilon(1e-6));  // 0: measure only
}

TEST_CASE("learning-rate schedules follow their closed forms", "[optim]") {
  using optim::Schedule;
  using optim::learning_rate;
  // Linear warm-up to the peak, for every schedule with a warm-up.
  CHECK(learning_rate(Schedule::constant, 1.0, 5, 10, 100) == Approx(0.5));
  CHECK(learning_rate(Schedule::cosine, 1.0, 5, 10, 100) == Approx(0.5));
  CHECK(learning_rate(Schedule::inverse_sqrt, 1.0, 5, 10, 100) == Approx(0.5));
  CHECK(learning_rate(Schedule::constant, 1.0, 50, 10, 100) == 1.0);
  CHECK(learning_rate(Schedule::constant, 1.0, 1, 0, 100) == 1.0);  // no warm-up: the peak at once
  // inverse_sqrt: the peak at the end of the warm-up, then base * sqrt(warmup / step).
  CHECK(learning_rate(Schedule::inverse_sqrt, 1.0, 10, 10, 100) == Approx(1.0));
  CHECK(learning_rate(Schedule::inverse_sqrt, 1.0, 40, 10, 100) == Approx(0.5));
  // cosine: half way through the decay it is half way down; at the last step, min_ratio * base.
  CHECK(learning_rate(Schedule::cosine, 2.0, 55, 10, 100) == Approx(1.0));
  CHECK(learning_rate(Schedule::cosine, 2.0, 100, 10, 100, 0.1) == Approx(0.2));
  CHECK(optim::parse_schedule("noam") == Schedule::inverse_sqrt);
  CHECK_THROWS_WITH(optim::parse_schedule("linear"), Catch::Contains("expected constant, inverse_sqrt or cosine"));
}
