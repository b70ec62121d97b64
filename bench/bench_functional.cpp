// What the functional transforms cost against the plain passes, on one small network: an MLP of two
// tanh layers (batch 64, 256 -> 256 -> 256 -> 1 scalar loss), float32, one thread by default.
//
// Rows (interleaved in one run): functional/<what>/width:256, with <what>
//   forward     f(x, params): the loss alone (recording on, as the transforms record)
//   vjp         f and one backward: the gradient with respect to every input (reverse mode)
//   jvp         f and J t by the double-vjp construction (forward mode, functional.hpp)
//   hvp         f, the gradient recorded (create_graph) and one backward of it: H v
// The ratios to `forward` are the figures the README quotes: a native forward mode would be about 2x
// forward; the double-vjp jvp pays a recorded backward and a backward of it. TAPEGRAD_THREADS sets
// the thread count (default 1).
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "tapegrad/functional.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/runtime.hpp"

namespace {

using namespace tapegrad;

enum class What { forward, vjp, jvp, hvp };

void functional(benchmark::State& state, What what) {
  const char* threads = std::getenv("TAPEGRAD_THREADS");
  runtime::set_num_threads(threads ? std::atoi(threads) : 1);
  const int64_t width = state.range(0), batch = 64;
  Generator gen(3);
  const std::vector<Tensor> in = {Tensor::randn({batch, width}, gen),
                                  Tensor::randn({width, width}, gen, DType::f32, 0, 0.05),
                                  Tensor::randn({width, width}, gen, DType::f32, 0, 0.05),
                                  Tensor::randn({1, width}, gen, DType::f32, 0, 0.05)};
  std::vector<Tensor> t;
  for (const Tensor& x : in) t.push_back(Tensor::randn(x.shape(), gen));
  const TensorFn f = [](const std::vector<Tensor>& x) {
    const Tensor h = tanh(linear(tanh(linear(x[0], x[1])), x[2]));
    return mean(linear(h, x[3]));
  };
  const Tensor one = Tensor::ones({});
  for (auto _ : state) {
    switch (what) {
      case What::forward: {
        std::vector<Tensor> roots;
        for (const Tensor& x : in) roots.push_back(x.detach().requires_grad_());
        Tape tape;
        TapeScope scope(tape);
        benchmark::DoNotOptimize(f(roots).item());
        break;
      }
      case What::vjp:
        benchmark::DoNotOptimize(vjp(f, in, one).grads[1].data<float>()[0]);
        break;
      case What::jvp:
        benchmark::DoNotOptimize(jvp(f, in, t).tangent.item());
        break;
      case What::hvp:
        benchmark::DoNotOptimize(hvp(f, in, t).hvp[0].data<float>()[0]);
        break;
    }
  }
}

}  // namespace

BENCHMARK_CAPTURE(functional, forward, What::forward)->Arg(256)->ArgName("width");
BENCHMARK_CAPTURE(functional, vjp, What::vjp)->Arg(256)->ArgName("width");
BENCHMARK_CAPTURE(functional, jvp, What::jvp)->Arg(256)->ArgName("width");
BENCHMARK_CAPTURE(functional, hvp, What::hvp)->Arg(256)->ArgName("width");

BENCHMARK_MAIN();
