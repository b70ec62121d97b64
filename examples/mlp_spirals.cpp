// Example: a small MLP learns to tell two interleaved spirals apart.
//
// The data set is generated here, seeded: two spiral arms of 2-D points, one the other rotated by half a
// turn, each point nudged by Gaussian noise; class 0 is one arm, class 1 the other. No straight line
// separates them, so the hidden layers must bend the plane. The program trains on one draw of points
// and reports accuracy on a second, held-out draw it never trained on.
//
// What it shows: a model as an nn::Module with registered sub-modules, a forward pass built from
// differentiable ops, cross-entropy, backward(), an optimizer step, evaluation under NoGrad, and
// nn::save / nn::load: the trained model saved to a .safetensors file and loaded into a fresh one,
// which then gives exactly the same outputs.
//
//   build/examples/mlp_spirals [STEPS]      (default 600 full-batch Adam steps, well under a second)
//
// Exits 1 when the held-out accuracy is below 90% or the loaded model's outputs differ.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numbers>
#include <tapegrad/nn/layers.hpp>
#include <tapegrad/optim.hpp>
#include <tapegrad/tapegrad.hpp>
#include <vector>

using namespace tapegrad;

namespace {

// A labelled set of points: x [N, 2] float32, y int32 [N] holding the class (0 or 1).
struct Points {
  Tensor x, y;
};

// `per_class` points on each arm. A point at fraction r in (0, 1] of the way out lies at radius r and
// angle 3 pi r (one and a half turns), plus pi for class 1; noise moves it by about 2% of the radius.
Points make_spirals(int per_class, Generator& gen) {
  std::vector<double> xs;
  std::vector<int32_t> ys;
  for (int i = 0; i < per_class; ++i)
    for (int32_t c = 0; c < 2; ++c) {
      const double r = 0.05 + 0.95 * gen.uniform();
      const double angle = 3 * std::numbers::pi * r + std::numbers::pi * c;
      xs.push_back(r * std::cos(angle) + 0.02 * gen.normal());
      xs.push_back(r * std::sin(angle) + 0.02 * gen.normal());
      ys.push_back(c);
    }
  const int n = 2 * per_class;
  return {Tensor::from_vector(xs, {n, 2}), Tensor::from_ids(ys, {n})};
}

// 2 -> 64 -> 64 -> 2: two tanh hidden layers and a linear layer giving one logit per class.
// Registering the layers makes their weights the module's parameters ("fc1.weight", ...).
class Mlp : public nn::Module {
 public:
  explicit Mlp(Generator& gen)
      : fc1(register_module("fc1", std::make_shared<nn::Linear>(2, 64, gen))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(64, 64, gen))),
        out(register_module("out", std::make_shared<nn::Linear>(64, 2, gen))) {}

  // x [N, 2] -> logits [N, 2]. Every op here appends an entry to the tape while recording is on.
  Tensor forward(const Tensor& x) const { return out->forward(tanh(fc2->forward(tanh(fc1->forward(x))))); }

 private:
  std::shared_ptr<nn::Linear> fc1, fc2, out;
};

// The fraction of points whose larger logit is their class. No gradient needed: NoGrad keeps the
// forward pass off the tape.
double accuracy(const Mlp& model, const Points& data) {
  NoGrad no_grad;
  const std::vector<double> logits = model.forward(data.x).to_vector();  // row-major [N, 2]
  const std::vector<double> labels = data.y.to_vector();
  int correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int predicted = logits[2 * i + 1] > logits[2 * i] ? 1 : 0;
    correct += predicted == int(labels[i]);
  }
  return double(correct) / double(labels.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 600;
  if (steps < 1) {
    std::fprintf(stderr, "usage: %s [STEPS >= 1]\n", argv[0]);
    return 2;
  }
  Generator gen(42);  // one seed for data and weights: every run prints the same numbers
  const Points train = make_spirals(200, gen), held_out = make_spirals(200, gen);
  Mlp model(gen);
  optim::Adam optimizer(model.named_parameters(), {.lr = 0.01});
  std::printf("two spirals: %lld training points, %lld held out; MLP 2-64-64-2 with %lld parameters\n",
              (long long)train.x.size(0), (long long)held_out.x.size(0), (long long)model.parameter_count());

  double first_loss = 0, loss_value = 0;
  for (int step = 1; step <= steps; ++step) {
    // Forward: the ops are recorded on the tape. Backward: walk it in reverse, filling each
    // parameter's .grad with d(loss)/d(parameter). Then the optimizer moves every parameter against
    // its gradient, and zero_grad clears the gradients for the next step (they would accumulate).
    const Tensor loss = cross_entropy(model.forward(train.x), train.y);
    backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    loss_value = loss.item();
    if (step == 1) first_loss = loss_value;
    if (step == 1 || step % 50 == 0 || step == steps)
      std::printf("step %4d  loss %.4f  train accuracy %.3f\n", step, loss_value, accuracy(model, train));
  }

  const double train_acc = accuracy(model, train), held_out_acc = accuracy(model, held_out);
  std::printf("loss %.4f -> %.4f\n", first_loss, loss_value);
  std::printf("final accuracy: train %.3f, held-out %.3f\n", train_acc, held_out_acc);
  if (held_out_acc < 0.9) {
    std::printf("FAILED: held-out accuracy %.3f is below 0.90\n", held_out_acc);
    return 1;
  }

  // Save the parameters (named fc1.weight, ...), load them into a model with other initial weights,
  // and compare the two models' logits on the held-out points, bit for bit.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mlp_spirals-" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  nn::save(model, path);
  Generator other(7);
  Mlp loaded(other);
  nn::load(loaded, path);
  std::filesystem::remove(path);
  NoGrad no_grad;
  const std::vector<double> want = model.forward(held_out.x).to_vector(), got = loaded.forward(held_out.x).to_vector();
  size_t same = 0;
  for (size_t i = 0; i < want.size(); ++i) same += want[i] == got[i];
  std::printf("saved and loaded into a fresh model: %zu of %zu held-out logits identical\n", same, want.size());
  if (same != want.size()) {
    std::printf("FAILED: the loaded model's outputs differ\n");
    return 1;
  }
  return 0;
}
