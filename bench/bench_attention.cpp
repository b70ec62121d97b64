// Attention-layer benchmark: the core of one multi-head attention layer, q, k, v -> o, forward and
// backward, against sequence length, fused (scaled_dot_product_attention) and unfused (the path
// MultiHeadAttention took before: softmax(matmul(q, k^T), scale) then matmul with v, the weights
// kept on the tape). bench/torch_attention.py times the same step in PyTorch.
//
// Rows: attention/<fused|unfused>/T:<T>/B:1/H:8/d:64, T in 64 .. 2048 (fixed B, so the work grows as
// T^2 and the unfused memory too), and one row at the size of bench_train's Transformer (T 32,
// B 64, 4 heads of 32); attention_causal/<fused|unfused>/...: the same with the decoder's causal
// mask (query i sees keys 0..i), T 128 .. 2048. Inputs are float32 unit normals drawn once; the step
// is o = attention(q, k, v), backward(sum(o)), then the three input gradients are dropped. fused
// takes q, k, v as [B, T, H, d] (its layout), unfused as [B, H, T, d] (its layout): neither copies.
// Counters:
//   GFLOP/s   12 B H T^2 d per step (forward 2 products of 2 B H T^2 d, backward 4), recomputation
//             not counted.
//   peak_MiB  the allocator's high-water mark over one step (tapegrad::memory::stats, reset before
//             the step) above what the inputs hold: tensors only. The fused kernels' own scratch
//             (each thread's own, kept between calls, O(T d): for T = 2048, d = 64 about 2.2 MiB backward)
//             is not in it.
// Run with the exclusive CPU lock and OMP threads set by --threads-like env: TAPEGRAD_THREADS is
// read (default 1).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "tapegrad/autograd.hpp"
#include "tapegrad/memory.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/runtime.hpp"

namespace {

using namespace tapegrad;

void attention_step(benchmark::State& state, bool fused, bool causal) {
  const char* threads = std::getenv("TAPEGRAD_THREADS");
  runtime::set_num_threads(threads ? std::atoi(threads) : 1);
  const int64_t T = state.range(0), batch = state.range(1), heads = state.range(2), head_dim = state.range(3);
  Generator gen(7);
  const Shape shape = fused ? Shape{batch, T, heads, head_dim} : Shape{batch, heads, T, head_dim};
  Tensor q = Tensor::randn(shape, gen).requires_grad_();
  Tensor k = Tensor::randn(shape, gen).requires_grad_();
  Tensor v = Tensor::randn(shape, gen).requires_grad_();
  const double scale = 1.0 / std::sqrt(double(head_dim));
  auto step = [&] {
    const Tensor o = fused ? scaled_dot_product_attention(q, k, v, {.scale = scale, .causal = causal})
                           : matmul(softmax(matmul(q, transpose(k, 2, 3)), {.scale = scale, .causal = causal}), v);
    backward(sum(o));
    q.zero_grad(), k.zero_grad(), v.zero_grad();
  };
  step();  // warm-up: fills the allocator's free lists
  int64_t peak = 0;
  for (auto _ : state) {
    memory::reset_peak();
    const int64_t base = memory::stats().bytes_in_use;
    step();
    peak = std::max(peak, memory::stats().peak_bytes_in_use - base);
  }
  // (causal rows keep the full count, so their rates compare times: the fused kernel skips the key
  // blocks past the diagonal, the unfused products compute every score and the softmax masks them)
  const double flops = 12.0 * double(batch * heads * T * T * head_dim);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = double(peak) / (1 << 20);
}

// {T, B, H, d}: T from `first` to 2048 at B 1, 8 heads of 64.
void t_sweep(benchmark::internal::Benchmark* b, int64_t first) {
  b->ArgNames({"T", "B", "H", "d"});
  for (int64_t T = first; T <= 2048; T *= 2) b->Args({T, 1, 8, 64});
  b->Unit(benchmark::kMillisecond)->MinTime(0.3);
}

// The sweep from T 64, then the Transformer of bench_train (B 64, 4 heads of 32, T 32).
void lengths(benchmark::internal::Benchmark* b) {
  t_sweep(b, 64);
  b->Args({32, 64, 4, 32});
}

// The causal rows (decoder self-attention: query i sees keys 0..i), from T 128.
void causal_lengths(benchmark::internal::Benchmark* b) { t_sweep(b, 128); }

BENCHMARK_CAPTURE(attention_step, fused, true, false)->Name("attention/fused")->Apply(lengths);
BENCHMARK_CAPTURE(attention_step, unfused, false, false)->Name("attention/unfused")->Apply(lengths);
BENCHMARK_CAPTURE(attention_step, causal_fused, true, true)->Name("attention_causal/fused")->Apply(causal_lengths);
BENCHMARK_CAPTURE(attention_step, causal_unfused, false, true)->Name("attention_causal/unfused")->Apply(causal_lengths);

}  // namespace

BENCHMARK_MAIN();
