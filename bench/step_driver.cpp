// The C++ side of bench/python_step.py: the same training step that script drives from Python, written
// against the public API, so the two differ only in who makes the calls. Models and data (identical in
// both programs, so their first losses agree):
//   gpt  nn.GPT / models::Gpt: vocabulary 65, d_model 128, 4 layers, 4 heads, block 64, batch 12, dropout 0
//        (nanoGPT's CPU recipe); ids[i] = (7919 i + 13) mod 65 over a [12, 65] block, input the first 64
//        columns, targets the last 64; loss cross_entropy(logits [B, T, V], targets [B, T]).
//   mlp  three nn.Linear (784 -> 512 -> 512 -> 10, seeds 1, 2, 3) with exact GELU between, batch 64;
//        x[i] = ((37 i) mod 101) / 101 - 0.5, labels i mod 10.
// A step is forward, loss, backward, AdamW(lr 1e-3, weight decay 0.01) step, zero_grad. Threads come from
// TAPEGRAD_THREADS, as for the Python module. Prints one JSON object: the model, threads, the loss of the
// first step and each timed step's wall time in ms (after --warmup untimed steps, the first included).
//   build/bench/step_driver --model gpt|mlp [--steps N] [--warmup N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/autograd.hpp"
#include "tapegrad/models/gpt.hpp"
#include "tapegrad/nn/layers.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/optim.hpp"
#include "tapegrad/runtime.hpp"

namespace {

using namespace tapegrad;

// One model with its data: step() runs a whole training step and returns the loss.
struct Workload {
  virtual ~Workload() = default;
  virtual double step() = 0;
};

optim::AdamOptions adamw_options() {
  optim::AdamOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  return o;
}

struct GptWorkload : Workload {
  static constexpr int64_t kVocab = 65, kBatch = 12, kBlock = 64;
  std::shared_ptr<models::Gpt> model;
  std::unique_ptr<optim::AdamW> opt;
  Tensor ids, targets;

  GptWorkload() {
    models::ModelConfig c;
    c.kind = models::ModelKind::gpt;
    c.vocab_size = kVocab;
    c.d_model = 128;
    c.layers = 4;
    c.heads = 4;
    c.d_ff = 512;
    c.max_len = kBlock;
    c.dropout = 0.0;
    c.norm_first = true;
    c.validate();
    model = std::make_shared<models::Gpt>(c, 0);
    model->train();
    opt = std::make_unique<optim::AdamW>(model->named_parameters(), adamw_options());
    std::vector<int32_t> in, out;
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t <= kBlock; ++t) {
        const auto id = int32_t((7919 * (b * (kBlock + 1) + t) + 13) % kVocab);
        if (t < kBlock) in.push_back(id);
        if (t > 0) out.push_back(id);
      }
    ids = Tensor::from_ids(in, {kBatch, kBlock});
    targets = Tensor::from_ids(out, {kBatch, kBlock});
  }

  double step() override {
    const Tensor loss = cross_entropy(model->forward(ids), targets);
    backward(loss);
    opt->step();
    opt->zero_grad();
    return loss.item();
  }
};

struct MlpWorkload : Workload {
  static constexpr int64_t kBatch = 64, kIn = 784, kHidden = 512, kClasses = 10;
  std::vector<std::unique_ptr<nn::Linear>> layers;
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, labels;

  MlpWorkload() {
    const int64_t widths[] = {kIn, kHidden, kHidden, kClasses};
    nn::ParamList params;
    for (int l = 0; l < 3; ++l) {
      Generator gen(uint64_t(l + 1));
      layers.push_back(std::make_unique<nn::Linear>(widths[l], widths[l + 1], gen));
      for (const Tensor& p : {layers.back()->weight, layers.back()->bias})
        params.emplace_back("param" + std::to_string(params.size()), p);
    }
    opt = std::make_unique<optim::AdamW>(params, adamw_options());
    std::vector<double> xs(static_cast<size_t>(kBatch * kIn));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = double((37 * i) % 101) / 101.0 - 0.5;
    x = Tensor::from_vector(xs, {kBatch, kIn});
    std::vector<int32_t> ys(static_cast<size_t>(kBatch));
    for (size_t i = 0; i < ys.size(); ++i) ys[i] = int32_t(i % kClasses);
    labels = Tensor::from_ids(ys, {kBatch});
  }

  double step() override {
    Tensor h = x;
    for (size_t l = 0; l < layers.size(); ++l) {
      h = layers[l]->forward(h);
      if (l + 1 < layers.size()) h = gelu(h, GeluApprox::exact);
    }
    const Tensor loss = cross_entropy(h, labels);
    backward(loss);
    opt->step();
    opt->zero_grad();
    return loss.item();
  }
};

int usage() {
  std::fprintf(stderr, "usage: step_driver --model gpt|mlp [--steps N] [--warmup N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int steps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage();
    if (arg == "--model")
      model = argv[++i];
    else if (arg == "--steps")
      steps = std::atoi(argv[++i]);
    else if (arg == "--warmup")
      warmup = std::atoi(argv[++i]);
    else
      return usage();
  }
  std::unique_ptr<Workload> w;
  if (model == "gpt")
    w = std::make_unique<GptWorkload>();
  else if (model == "mlp")
    w = std::make_unique<MlpWorkload>();
  else
    return usage();
  if (steps < 1 || warmup < 1) return usage();  // the first step (its loss printed) is never timed

  const double first_loss = w->step();
  for (int i = 1; i < warmup; ++i) w->step();
  std::string times;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    w->step();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    times += (i ? ", " : "") + std::to_string(ms);
  }
  std::printf("{\"model\": \"%s\", \"threads\": %d, \"first_loss\": %.9g, \"step_ms\": [%s]}\n", model.c_str(),
              runtime::num_threads(), first_loss, times.c_str());
  return 0;
}
