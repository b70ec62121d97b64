// Benchmarks of the SIMD row-wise and elementwise kernels against the scalar reference and against
// memcpy of the same bytes, the speed of light for a kernel that reads its input once and writes
// its output once.
//
// Names: <kernel>/<impl>/<shape>/omp:<threads>, impl one of
//   tapegrad   the dispatched kernel (best ISA, or TAPEGRAD_ARCH)
//   reference  the scalar oracle, kernels/ref/ref.hpp (single-threaded by design)
//   memcpy     copies the kernel's input bytes to its output buffer: one plain memcpy at omp:1, the
//              buffer cut into one contiguous piece per thread at omp:t
// Each row reports GB/s = (bytes read + bytes written) / wall time. Buffers are allocated and
// touched once per shape, outside the timed loop (a first touch costs ~12 us a page on this VM),
// and every kernel's output is checked against the reference before it is timed.
//
// Wall time without UseRealTime(): UseRealTime() appends "/real_time" to every name, and the
// acceptance check (/work/shared/checks/kernels) selects rows with an anchored filter
// `softmax/.*/4096x1024/omp:1$` that such names never match. Google Benchmark's real_time column
// is the wall clock either way; GB/s is computed here from our own steady_clock measurement of the
// timed loop, so neither depends on the main thread's CPU time (which undercounts an OpenMP
// region when the VM preempts). Only the choice of iteration count still follows CPU time.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "aligned_buffer.hpp"
#include "kernels/kernels.hpp"
#include "kernels/ref/ref.hpp"

namespace k = tapegrad::kernels;
namespace ref = tapegrad::kernels::ref;

namespace {

// 64-byte aligned, as tensors are (aligned_buffer.hpp): kernels' streaming stores need it.
using Buffer = tapegrad::bench::AlignedVector<float>;

// Buffers by name and size, created and filled (so every page is touched) on first use.
Buffer& buffer(const std::string& role, int64_t n, float lo = -5, float hi = 5) {
  static std::map<std::string, std::unique_ptr<Buffer>> pool;
  auto& slot = pool[role + "/" + std::to_string(n)];
  if (!slot) {
    slot = std::make_unique<Buffer>(static_cast<size_t>(n));
    std::mt19937 gen(uint32_t(n * 31 + role.size()));
    std::uniform_real_distribution<float> d(lo, hi);
    for (auto& v : *slot) v = d(gen);
  }
  return *slot;
}

void parallel_memcpy(float* dst, const float* src, int64_t n, int threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, sizeof(float) * size_t(n));
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b = n * t / nt, e = n * (t + 1) / nt;
    std::memcpy(dst + b, src + b, sizeof(float) * size_t(e - b));
  }
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

// One benchmark family member: `run` does one timed iteration; `verify` (tapegrad only) returns an
// error message or "" after comparing with the reference outside the timing.
struct Case {
  std::string name;
  int threads;
  double bytes;  // read + written per iteration
  std::function<void()> run;
  std::function<std::string()> verify;
};

void run_case(benchmark::State& state, const Case& c) {
  k::set_num_threads(c.threads);
  if (c.verify) {
    const std::string err = c.verify();
    if (!err.empty()) {
      state.SkipWithError(err.c_str());
      return;
    }
  }
  c.run();  // warm: caches, the OpenMP team, page tables
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    c.run();
    benchmark::ClobberMemory();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["GB/s"] = c.bytes * double(state.iterations()) / wall / 1e9;
}

void add(const Case& c) {
  benchmark::RegisterBenchmark(c.name.c_str(), [c](benchmark::State& s) { run_case(s, c); });
}

std::string shape_name(int64_t rows, int64_t cols) {
  std::string s = std::to_string(rows);
  s.append("x").append(std::to_string(cols));
  return s;
}

// "/<shape>/omp:<t>", built with append: g++ 12 warns (-Wrestrict, PR105329) on "lit" + string.
std::string tail_of(const std::string& shape, int t) {
  std::string s("/");
  s.append(shape).append("/omp:").append(std::to_string(t));
  return s;
}

// ------------------------------------------------------------------------------------------------

void register_softmax(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const double bytes = 2.0 * 4 * double(n);
  for (int t : {1, 2}) {
    const std::string tail = tail_of(shape_name(rows, cols), t);
    add({"softmax/tapegrad" + tail, t, bytes,
         [=] { k::softmax<float>(rows, cols, buffer("x", n).data(), buffer("y", n).data()); },
         [=]() -> std::string {
           std::vector<float> want(static_cast<size_t>(n));
           ref::softmax<float>(rows, cols, buffer("x", n).data(), want.data(), {});
           k::softmax<float>(rows, cols, buffer("x", n).data(), buffer("y", n).data());
           const double d = max_abs_diff(buffer("y", n), want);
           return d <= 1e-6 ? "" : "softmax differs from the reference by " + std::to_string(d);
         }});
    add({"softmax/reference" + tail, t, bytes,
         [=] { ref::softmax<float>(rows, cols, buffer("x", n).data(), buffer("y", n).data(), {}); },
         nullptr});
    add({"softmax/memcpy" + tail, t, bytes,
         [=] { parallel_memcpy(buffer("y", n).data(), buffer("x", n).data(), n, t); }, nullptr});
  }
}

void register_layernorm(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const double bytes = 2.0 * 4 * double(n);  // x in, y out (gamma, beta, mean, rstd are O(rows + cols))
  auto call = [=](bool simd, float* y) {
    auto& g = buffer("gamma", cols, 0.5f, 1.5f);
    auto& b = buffer("beta", cols);
    auto& mean = buffer("mean", rows);
    auto& rstd = buffer("rstd", rows);
    if (simd)
      k::layer_norm<float>(rows, cols, buffer("x", n).data(), g.data(), b.data(), 1e-5, y, mean.data(),
                           rstd.data());
    else
      ref::layer_norm<float>(rows, cols, buffer("x", n).data(), g.data(), b.data(), 1e-5, y, mean.data(),
                             rstd.data());
  };
  for (int t : {1, 2}) {
    const std::string tail = tail_of(shape_name(rows, cols), t);
    add({"layernorm/tapegrad" + tail, t, bytes, [=] { call(true, buffer("y", n).data()); },
         [=]() -> std::string {
           std::vector<float> want(static_cast<size_t>(n));
           call(false, want.data());
           call(true, buffer("y", n).data());
           const double d = max_abs_diff(buffer("y", n), want);
           return d <= 1e-4 ? "" : "layer_norm differs from the reference by " + std::to_string(d);
         }});
    add({"layernorm/reference" + tail, t, bytes, [=] { call(false, buffer("y", n).data()); }, nullptr});
    add({"layernorm/memcpy" + tail, t, bytes,
         [=] { parallel_memcpy(buffer("y", n).data(), buffer("x", n).data(), n, t); }, nullptr});
  }
}

// Layer norm backward with dgamma and dbeta: x, dy and dx read, dx written (4 n floats moved; gamma,
// mean, rstd, dgamma and dbeta are O(rows + cols)). memcpy copies 2 n floats. dx accumulates over
// the iterations, which does not change the work.
void register_layernorm_backward(int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const double bytes = 4.0 * 4 * double(n);
  auto stats = [=] {  // mean and rstd of x, as the forward saves them
    ref::layer_norm<float>(rows, cols, buffer("x", n).data(), buffer("gamma", cols, 0.5f, 1.5f).data(),
                           nullptr, 1e-5, buffer("y", n).data(), buffer("mean", rows).data(),
                           buffer("rstd", rows).data());
  };
  auto call = [=](bool simd, float* dx, float* dgamma, float* dbeta) {
    const float* g = buffer("gamma", cols, 0.5f, 1.5f).data();
    const float* mean = buffer("mean", rows).data();
    const float* rstd = buffer("rstd", rows).data();
    const float* x = buffer("x", n).data();
    const float* dy = buffer("dy", n, -1, 1).data();
    if (simd)
      k::layer_norm_backward<float>(rows, cols, x, g, mean, rstd, dy, dx, dgamma, dbeta, true);
    else
      ref::layer_norm_backward<float>(rows, cols, x, g, mean, rstd, dy, dx, dgamma, dbeta, true);
  };
  auto timed = [=](bool simd) {
    call(simd, buffer("dx", n, -1, 1).data(), buffer("dgamma", cols).data(), buffer("dbeta", cols).data());
  };
  for (int t : {1, 2}) {
    const std::string tail = tail_of(shape_name(rows, cols), t);
    add({"layernorm_backward/tapegrad" + tail, t, bytes, [=] { timed(true); },
         [=]() -> std::string {
           stats();
           std::vector<float> dx_want(static_cast<size_t>(n), 0.0f), dg_want(size_t(cols), 0.0f),
               db_want(size_t(cols), 0.0f), dx(dx_want), dg(dg_want), db(db_want);
           call(false, dx_want.data(), dg_want.data(), db_want.data());
           call(true, dx.data(), dg.data(), db.data());
           const double d = std::max(max_abs_diff(dx, dx_want),
                                     (max_abs_diff(dg, dg_want) + max_abs_diff(db, db_want)) / double(rows));
           return d <= 1e-4 ? "" : "layer_norm_backward differs from the reference by " + std::to_string(d);
         }});
    add({"layernorm_backward/reference" + tail, t, bytes, [=] { timed(false); }, nullptr});
    add({"layernorm_backward/memcpy" + tail, t, bytes,
         [=] { parallel_memcpy(buffer("y", 2 * n).data(), buffer("x", 2 * n).data(), 2 * n, t); }, nullptr});
  }
}

// Cross-entropy with gradient: logits in, gradient out (row losses are O(rows)).
void register_cross_entropy(int64_t rows, int64_t V) {
  const int64_t n = rows * V;
  const double bytes = 2.0 * 4 * double(n);
  auto targets = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) (*targets)[size_t(r)] = int32_t((r * 7919) % V);
  auto call = [=](bool simd, float* grad) {
    auto& loss = buffer("loss", rows);
    const float* x = buffer("x", n).data();
    if (simd)
      k::cross_entropy<float>(rows, V, x, targets->data(), -100, 0.1, loss.data(), grad, 1.0 / double(rows));
    else
      ref::cross_entropy<float>(rows, V, x, targets->data(), -100, 0.1, loss.data(), grad,
                                1.0 / double(rows));
  };
  for (int t : {1, 2}) {
    const std::string tail = tail_of(shape_name(rows, V), t);
    add({"cross_entropy/tapegrad" + tail, t, bytes, [=] { call(true, buffer("y", n).data()); },
         [=]() -> std::string {
           std::vector<float> want(static_cast<size_t>(n));
           call(false, want.data());
           call(true, buffer("y", n).data());
           const double d = max_abs_diff(buffer("y", n), want);
           return d <= 1e-7 ? "" : "cross_entropy grad differs from the reference by " + std::to_string(d);
         }});
    add({"cross_entropy/reference" + tail, t, bytes, [=] { call(false, buffer("y", n).data()); }, nullptr});
    add({"cross_entropy/memcpy" + tail, t, bytes,
         [=] { parallel_memcpy(buffer("y", n).data(), buffer("x", n).data(), n, t); }, nullptr});
  }
}

void register_gelu(int64_t n) {
  const double bytes = 2.0 * 4 * double(n);
  for (int t : {1, 2}) {
    const std::string tail = tail_of(std::to_string(n), t);
    add({"gelu/tapegrad" + tail, t, bytes,
         [=] { k::unary<float>(k::Unary::gelu_tanh, n, buffer("x", n).data(), buffer("y", n).data()); },
         [=]() -> std::string {
           std::vector<float> want(static_cast<size_t>(n));
           ref::unary<float>(k::Unary::gelu_tanh, n, buffer("x", n).data(), want.data());
           k::unary<float>(k::Unary::gelu_tanh, n, buffer("x", n).data(), buffer("y", n).data());
           const double d = max_abs_diff(buffer("y", n), want);
           return d <= 1e-5 ? "" : "gelu differs from the reference by " + std::to_string(d);
         }});
    add({"gelu/reference" + tail, t, bytes,
         [=] { ref::unary<float>(k::Unary::gelu_tanh, n, buffer("x", n).data(), buffer("y", n).data()); },
         nullptr});
    add({"gelu/memcpy" + tail, t, bytes,
         [=] { parallel_memcpy(buffer("y", n).data(), buffer("x", n).data(), n, t); }, nullptr});
  }
}

// GELU backward: x, dy and dx read, dx written (the kernel does not read y for gelu): 4 n floats
// moved, memcpy copies 2 n. dx accumulates over the iterations, which does not change the work.
void register_gelu_backward(int64_t n) {
  const double bytes = 4.0 * 4 * double(n);
  auto call = [=](bool simd, float* dx) {
    const float* x = buffer("x", n).data();
    const float* y = buffer("y", n).data();
    const float* dy = buffer("dy", n, -1, 1).data();
    if (simd)
      k::unary_backward<float>(k::Unary::gelu_tanh, n, x, y, dy, dx, true);
    else
      ref::unary_backward<float>(k::Unary::gelu_tanh, n, x, y, dy, dx, true);
  };
  for (int t : {1, 2}) {
    const std::string tail = tail_of(std::to_string(n), t);
    add({"gelu_backward/tapegrad" + tail, t, bytes, [=] { call(true, buffer("dx", n, -1, 1).data()); },
         [=]() -> std::string {
           std::vector<float> want(static_cast<size_t>(n), 0.0f), got(want);
           call(false, want.data());
           call(true, got.data());
           const double d = max_abs_diff(got, want);
           return d <= 1e-5 ? "" : "gelu backward differs from the reference by " + std::to_string(d);
         }});
    add({"gelu_backward/reference" + tail, t, bytes, [=] { call(false, buffer("dx", n, -1, 1).data()); },
         nullptr});
    add({"gelu_backward/memcpy" + tail, t, bytes,
         [=] { parallel_memcpy(buffer("y", 2 * n).data(), buffer("x", 2 * n).data(), 2 * n, t); }, nullptr});
  }
}

// Adam: reads param, grad, m, v and writes param, m, v. The state drifts over iterations, which
// does not change the work. memcpy moves the same 7 n floats (3.5 n copied).
void register_adam(int64_t n) {
  const double bytes = 7.0 * 4 * double(n);
  const k::AdamParams p{1e-3, 0.9, 0.999, 1e-8, 0.01, true, 10};
  auto call = [=](bool simd, const std::string& suffix) {
    float* param = buffer("param" + suffix, n).data();
    float* m = buffer("m" + suffix, n, 0, 0.1f).data();
    float* v = buffer("v" + suffix, n, 0, 0.1f).data();
    const float* g = buffer("grad", n).data();
    const k::AdamTensor<float> x{n, param, g, m, v};
    if (simd)
      k::adam_update<float>(1, &x, p);
    else
      ref::adam_update<float>(1, &x, p);
  };
  for (int t : {1, 2}) {
    const std::string tail = tail_of(std::to_string(n), t);
    add({"adam/tapegrad" + tail, t, bytes, [=] { call(true, ""); },
         [=]() -> std::string {
           // fresh copies of the same state for both paths
           for (const char* r : {"param", "m", "v"})
             buffer(std::string(r) + "/check", n) = buffer(r, n, 0, 0.1f);
           call(false, "/check");
           call(true, "");
           const double d = max_abs_diff(buffer("param", n), buffer("param/check", n));
           return d <= 1e-6 ? "" : "adam differs from the reference by " + std::to_string(d);
         }});
    add({"adam/reference" + tail, t, bytes, [=] { call(false, ""); }, nullptr});
    add({"adam/memcpy" + tail, t, bytes,
         [=] {
           // 3.5 n floats copied = 7 n floats moved
           parallel_memcpy(buffer("y", 7 * n / 2).data(), buffer("x", 7 * n / 2).data(), 7 * n / 2, t);
         },
         nullptr});
  }
}

}  // namespace

int main(int argc, char** argv) {
  // softmax: the two acceptance shapes, an odd one, and 64 MiB of input for thread scaling
  register_softmax(4096, 1024);
  register_softmax(8192, 256);
  register_softmax(1000, 1000);
  register_softmax(16384, 1024);
  register_layernorm(4096, 1024);
  register_layernorm(8192, 256);
  register_layernorm(16384, 1024);
  register_layernorm_backward(4096, 1024);
  register_layernorm_backward(8192, 256);
  register_cross_entropy(1024, 8192);
  register_cross_entropy(4096, 1001);
  register_gelu(int64_t(1) << 24);
  register_gelu_backward(int64_t(1) << 24);
  register_adam(int64_t(1) << 22);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
