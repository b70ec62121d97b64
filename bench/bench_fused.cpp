// The fused blocks of the Transformer step against the ops they replace, at the small Transformer's
// shapes (bench_train's: 64 sequences of 32 tokens, d_model 128, d_ff 512, 4 heads of 32), float32.
//
// Rows, one step each = forward, backward of sum(y * w), the gradients dropped (fresh buffers every
// step, as in training):
//   fused_block/feed_forward/<fused|composite>/dropout_pct:<0|10>
//       feed_forward_relu(x, w1, b1, w2, b2, p) against linear, relu, dropout, linear (its
//       composite, the same values) on x [2048, 128];
//   fused_block/attention/<stacked|views>
//       scaled_dot_product_attention_stacked(qkv, {}, 4) against scaled_dot_product_attention on the
//       three narrowed views of qkv [64, 32, 384] (whose gradients narrow's backward gathers).
// Compare a pair's times, run interleaved: --benchmark_enable_random_interleaving=true
// --benchmark_repetitions=N. TAPEGRAD_THREADS sets the thread count (default 1).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>

#include "src/ops/op_util.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/runtime.hpp"

namespace {

using namespace tapegrad;

void set_threads() {
  const char* threads = std::getenv("TAPEGRAD_THREADS");
  runtime::set_num_threads(threads ? std::atoi(threads) : 1);
}

// Runs `step` once to fill the allocator's free lists, then times it.
template <class F>
void timed(benchmark::State& state, F&& step) {
  step();
  for (auto _ : state) step();
}

void feed_forward(benchmark::State& state, bool fused) {
  set_threads();
  const double p = double(state.range(0)) / 100;
  const int64_t rows = 2048, d = 128, hidden = 512;
  Generator gen(1);
  Tensor x = Tensor::randn({rows, d}, gen).requires_grad_();
  Tensor w1 = Tensor::randn({hidden, d}, gen).requires_grad_(),
         b1 = Tensor::randn({hidden}, gen).requires_grad_();
  Tensor w2 = Tensor::randn({d, hidden}, gen).requires_grad_(), b2 = Tensor::randn({d}, gen).requires_grad_();
  const Tensor w = Tensor::randn({rows, d}, gen);
  timed(state, [&] {
    const Tensor y = fused ? feed_forward_relu(x, w1, b1, w2, b2, p, 7)
                           : detail::feed_forward_relu_composite(x, w1, b1, w2, b2, p, 7);
    backward(y, w);
    for (Tensor* t : {&x, &w1, &b1, &w2, &b2}) t->zero_grad();
  });
}

void attention(benchmark::State& state, bool stacked) {
  set_threads();
  const int64_t B = 64, T = 32, H = 4, d = 32, C = H * d;
  Generator gen(2);
  Tensor qkv = Tensor::randn({B, T, 3 * C}, gen).requires_grad_();
  const Tensor w = Tensor::randn({B, T, H, d}, gen);
  auto part = [&](int i) { return narrow(qkv, 2, i * C, C).reshape({B, T, H, d}); };
  const AttentionSpec spec{1 / std::sqrt(double(d)), {}, false};
  timed(state, [&] {
    const Tensor o = stacked ? scaled_dot_product_attention_stacked(qkv, {}, H, spec)
                             : scaled_dot_product_attention(part(0), part(1), part(2), spec);
    backward(o, w);
    qkv.zero_grad();
  });
}

}  // namespace

BENCHMARK_CAPTURE(feed_forward, fused, true)
    ->Name("fused_block/feed_forward/fused")
    ->ArgName("dropout_pct")
    ->Arg(0)
    ->Arg(10);
BENCHMARK_CAPTURE(feed_forward, composite, false)
    ->Name("fused_block/feed_forward/composite")
    ->ArgName("dropout_pct")
    ->Arg(0)
    ->Arg(10);
BENCHMARK_CAPTURE(attention, stacked, true)->Name("fused_block/attention/stacked");
BENCHMARK_CAPTURE(attention, views, false)->Name("fused_block/attention/views");

BENCHMARK_MAIN();
