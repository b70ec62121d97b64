// GEMM benchmark: tapegrad's SIMD GEMM against OpenBLAS (cblas_sgemm) in the same run.
//
// Rows are named gemm/<impl>/<ta><tb>/<M>x<K>x<N>/omp:<threads> (impl tapegrad or openblas) and
// report GFLOP/s = 2*M*N*K / wall-clock time. Each (shape, transpose, threads) runs tapegrad and then
// OpenBLAS back to back, so their ratio is measured under the same machine load. Shapes: squares
// 64..1024 (plus odd 257 and 1000) and the Transformer shapes of a d_model = 256 model with 2048
// tokens per batch (projections 2048x256x256, FFN up 2048x256x1024 and down 2048x1024x256), every
// transpose combination (nt and tn are the two products of matmul's backward), 1 and 2 threads.
// Also gemm_batched/<impl>/nn/<batch>x<M>x<K>x<N>/omp:<t> for attention-sized batches (OpenBLAS
// runs a loop of sgemm calls there: it has no batched interface).
// Before a tapegrad row is timed, its result (C first filled with NaN, beta = 0) is checked against
// float64 dot products on every element of the first and last rows and columns and 512 random
// ones (batched: of three matrices); a wrong result aborts.
// Run with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`: those force OpenBLAS onto a slower kernel.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/kernels.hpp"

#ifdef TAPEGRAD_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace k = tapegrad::kernels;

namespace {

struct Shape {
  int64_t M, K, N;
};

// One set of operands per shape, allocated and first-touched once, reused by every row.
struct Buffers {
  std::vector<float> A, B, C;
};

Buffers& buffers(int64_t batch, const Shape& s) {
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<Buffers>> cache;
  auto& slot = cache[{batch, s.M, s.K, s.N}];
  if (!slot) {
    slot = std::make_unique<Buffers>();
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    slot->A.resize(size_t(batch * s.M * s.K));
    slot->B.resize(size_t(batch * s.K * s.N));
    slot->C.assign(size_t(batch * s.M * s.N), 0.f);
    for (auto& x : slot->A) x = dist(rng);
    for (auto& x : slot->B) x = dist(rng);
  }
  return *slot;
}

// Stored matrices are packed (ld = stored width): A is M x K (or K x M transposed), B K x N (N x K).
struct Op {
  bool ta, tb;
  int64_t lda(const Shape& s) const { return ta ? s.M : s.K; }
  int64_t ldb(const Shape& s) const { return tb ? s.K : s.N; }
  std::string name() const { return std::string(ta ? "t" : "n") + (tb ? "t" : "n"); }
};

// Checks C = op(A) op(B) on edge rows/columns and random elements against float64 dot products,
// with the bound 2 (K + 2) eps sum_k |a_ik b_kj| (see tests/kernels/test_gemm.cpp). Aborts if wrong.
void verify(const char* what, const Op& op, const Shape& s, const float* A, const float* B, const float* C) {
  const int64_t lda = op.lda(s), ldb = op.ldb(s);
  auto check = [&](int64_t i, int64_t j) {
    double dot = 0, mag = 0;
    for (int64_t k = 0; k < s.K; ++k) {
      const double a = op.ta ? A[k * lda + i] : A[i * lda + k];
      const double b = op.tb ? B[j * ldb + k] : B[k * ldb + j];
      dot += a * b, mag += std::abs(a * b);
    }
    const double err = std::abs(double(C[i * s.N + j]) - dot);
    if (!(err <= 2.0 * double(s.K + 2) * std::numeric_limits<float>::epsilon() * mag + 1e-30)) {
      std::fprintf(stderr,
                   "bench_gemm: WRONG RESULT in %s %s M=%ld K=%ld N=%ld at C[%ld,%ld]: %.9g, expected %.9g\n",
                   what, op.name().c_str(), long(s.M), long(s.K), long(s.N), long(i), long(j),
                   double(C[i * s.N + j]), dot);
      std::abort();
    }
  };
  for (int64_t j = 0; j < s.N; ++j) check(0, j), check(s.M - 1, j);
  for (int64_t i = 0; i < s.M; ++i) check(i, 0), check(i, s.N - 1);
  std::mt19937 rng(7);
  for (int r = 0; r < 512; ++r) check(int64_t(rng() % uint64_t(s.M)), int64_t(rng() % uint64_t(s.N)));
}

// Times the state's loop by the wall clock and reports GFLOP/s from it. Not : that
// appends "/real_time" to every name, and the rows must be named exactly gemm/<impl>/... (the
// acceptance filter is anchored). CPU time of the main thread would undercount a team's work.
template <class Body>
void timed_loop(benchmark::State& state, double flops_per_iteration, Body&& body) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    body();
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * double(state.iterations()) / seconds * 1e-9);
}

void bench_tapegrad(benchmark::State& state, Op op, Shape s, int threads) {
  k::set_num_threads(threads);
  Buffers& b = buffers(1, s);
  auto run = [&] {
    k::gemm<float>(op.ta, op.tb, s.M, s.N, s.K, 1.f, b.A.data(), op.lda(s), b.B.data(), op.ldb(s), 0.f,
                   b.C.data(), s.N);
  };
  static std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t, int>, bool> verified;
  if (bool& done = verified[{op.ta, op.tb, s.M, s.K, s.N, threads}]; !done) {
    std::fill(b.C.begin(), b.C.end(), std::numeric_limits<float>::quiet_NaN());  // beta = 0 must not read C
    run();
    verify("tapegrad", op, s, b.A.data(), b.B.data(), b.C.data());
    done = true;
  }
  timed_loop(state, 2.0 * double(s.M) * double(s.N) * double(s.K), run);
}

void bench_tapegrad_batched(benchmark::State& state, int64_t batch, Shape s, int threads) {
  k::set_num_threads(threads);
  Buffers& b = buffers(batch, s);
  auto run = [&] {
    k::gemm_batched<float>(batch, false, false, s.M, s.N, s.K, 1.f, b.A.data(), s.K, s.M * s.K, b.B.data(),
                           s.N, s.K * s.N, 0.f, b.C.data(), s.N, s.M * s.N);
  };
  std::fill(b.C.begin(), b.C.end(), std::numeric_limits<float>::quiet_NaN());
  run();
  for (int64_t i : {int64_t(0), batch / 2, batch - 1})
    verify("tapegrad batched", Op{false, false}, s, b.A.data() + i * s.M * s.K, b.B.data() + i * s.K * s.N,
           b.C.data() + i * s.M * s.N);
  timed_loop(state, 2.0 * double(batch) * double(s.M) * double(s.N) * double(s.K), run);
}

#ifdef TAPEGRAD_HAVE_OPENBLAS
void sgemm(const Op& op, const Shape& s, const float* A, const float* B, float* C) {
  cblas_sgemm(CblasRowMajor, op.ta ? CblasTrans : CblasNoTrans, op.tb ? CblasTrans : CblasNoTrans, int(s.M),
              int(s.N), int(s.K), 1.f, A, int(op.lda(s)), B, int(op.ldb(s)), 0.f, C, int(s.N));
}

void bench_openblas(benchmark::State& state, Op op, Shape s, int threads) {
  openblas_set_num_threads(threads);
  Buffers& b = buffers(1, s);
  timed_loop(state, 2.0 * double(s.M) * double(s.N) * double(s.K),
             [&] { sgemm(op, s, b.A.data(), b.B.data(), b.C.data()); });
}

void bench_openblas_batched(benchmark::State& state, int64_t batch, Shape s, int threads) {
  openblas_set_num_threads(threads);
  Buffers& b = buffers(batch, s);
  timed_loop(state, 2.0 * double(batch) * double(s.M) * double(s.N) * double(s.K), [&] {
    for (int64_t i = 0; i < batch; ++i)
      sgemm(Op{false, false}, s, b.A.data() + i * s.M * s.K, b.B.data() + i * s.K * s.N,
            b.C.data() + i * s.M * s.N);
  });
}
#endif

// "<family>/<impl>/<op>/[<batch>x]<M>x<K>x<N>/omp:<t>" (snprintf: GCC 12 warns falsely on chains of
// std::string operator+, PR 105329).
std::string row_name(const char* family, const char* impl, const std::string& op, int64_t batch,
                     const Shape& s, int t) {
  char buf[160];
  if (batch > 0)
    std::snprintf(buf, sizeof buf, "%s/%s/%s/%ldx%ldx%ldx%ld/omp:%d", family, impl, op.c_str(), long(batch),
                  long(s.M), long(s.K), long(s.N), t);
  else
    std::snprintf(buf, sizeof buf, "%s/%s/%s/%ldx%ldx%ld/omp:%d", family, impl, op.c_str(), long(s.M),
                  long(s.K), long(s.N), t);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Shape> shapes = {
      {64, 64, 64},       {128, 128, 128},    {256, 256, 256},  {257, 257, 257},   {512, 512, 512},
      {1000, 1000, 1000}, {1024, 1024, 1024}, {2048, 256, 256}, {2048, 256, 1024}, {2048, 1024, 256},
      // One time step of the attention GRU (batch 64, hidden 256, gates 3 x 256): the recurrent
      // projection and its input gradient (64 x 256 x 768, 64 x 768 x 256) and the weight gradient
      // accumulated per step (768 x 64 x 256, tn).
      {64, 256, 768},     {64, 768, 256},     {768, 64, 256},
      // The benchmarked Transformer step (d_model 128, d_ff 512, 2048 tokens): QKV, FFN up and
      // down, an output projection (forward and input gradients)
      {2048, 128, 384},   {2048, 128, 512},   {2048, 512, 128},  {2048, 128, 128},
      // and its weight gradients dW = dy^T x (tn): out x tokens x in.
      {384, 2048, 128},   {512, 2048, 128},   {128, 2048, 512},
  };
  const std::vector<Op> ops = {{false, false}, {false, true}, {true, false}, {true, true}};
  for (const Shape& s : shapes)
    for (const Op& op : ops)
      for (int t : {1, 2}) {
        benchmark::RegisterBenchmark(row_name("gemm", "tapegrad", op.name(), 0, s, t).c_str(), bench_tapegrad,
                                     op, s, t);
#ifdef TAPEGRAD_HAVE_OPENBLAS
        benchmark::RegisterBenchmark(row_name("gemm", "openblas", op.name(), 0, s, t).c_str(), bench_openblas,
                                     op, s, t);
#endif
      }
  // Attention: (batch * heads) x (T x T x head_dim) and its (T x head_dim x T) partner.
  // Then the attention GRU's context, weights [B,1,S] x keys [B,S,H] (batch 64, S 32, H 256).
  const std::vector<std::pair<int64_t, Shape>> batched = {{256, {32, 32, 32}}, {128, {64, 64, 64}}, {64, {1, 32, 256}}};
  for (const auto& [batch, s] : batched)
    for (int t : {1, 2}) {
      benchmark::RegisterBenchmark(row_name("gemm_batched", "tapegrad", "nn", batch, s, t).c_str(),
                                   bench_tapegrad_batched, batch, s, t);
#ifdef TAPEGRAD_HAVE_OPENBLAS
      benchmark::RegisterBenchmark(row_name("gemm_batched", "openblas", "nn", batch, s, t).c_str(),
                                   bench_openblas_batched, batch, s, t);
#endif
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
