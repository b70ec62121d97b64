// GEMM benchmark: tapegrad's SIMD GEMM against the libraries one could link instead, in the same run:
// OpenBLAS (cblas_sgemm), BLIS (bli_sgemm_ex; its configuration for the instruction set tapegrad
// runs, see choose_blis_configuration) and oneDNN (dnnl_sgemm), each one compiled in when meson finds
// it (bench/meson.build).
//
// Rows are named gemm/<impl>/<ta><tb>/<M>x<K>x<N>/omp:<threads> (impl tapegrad, openblas, blis or
// onednn) and report GFLOP/s = 2*M*N*K / wall-clock time. All are row-major sgemm with alpha 1,
// beta 0 and packed operands (A is M x K, or K x M when transposed; B K x N, or N x K), 64-byte
// aligned as tapegrad's (and PyTorch's) tensors are; every implementation gets the same ones. Each
// (shape, transpose, threads) runs tapegrad and then each library back to back, so their ratios are
// measured under the same machine load (tools/run bench also interleaves the repetitions of all
// rows at random: --benchmark_enable_random_interleaving). Every row sets its own thread count:
// tapegrad through kernels::set_num_threads, OpenBLAS through openblas_set_num_threads, BLIS through
// the rntm_t passed to each call, oneDNN through omp_set_num_threads (Debian's libdnnl is built on
// OpenMP).
// Shapes (the sweep; bench/gemm_table.py turns its JSON output into the comparison table):
//   - squares 64..1024 (plus odd 257 and 1000), every transpose, 1 and 2 threads;
//   - the small Transformer's products (d_model 128, d_ff 512, 2048 tokens = batch 64 x length 32):
//     QKV, FFN up and down, output projection, and their weight gradients (tn: out x tokens x in);
//   - the d_model 256 model's (2048x256x256, 2048x256x1024, 2048x1024x256);
//   - the base Transformer's (d_model 512, d_ff 2048, vocabulary 1000, 2048 tokens = batch 32 x
//     length 64): projections, QKV, FFN up and down, the output layer, and the weight gradients;
//   - one time step of the attention GRU;
//   - the real-text models': the Spanish-English Transformer (d_model 192, d_ff 768, 4000 pieces,
//     4000-token batches) and nanoGPT's CPU recipe GPT (768 tokens, d_model 128).
// (nt and tn are the two products of matmul's backward, so every shape runs all four transposes.)
// Also gemm_batched/<impl>/<ta><tb>/<batch>x<M>x<K>x<N>/omp:<t>: attention's batched heads, every
// transpose (scores q k^T are nt, their gradients nn and tn). tapegrad runs gemm_batched; the
// libraries run a loop of single sgemm calls (none of the three has a batched sgemm interface).
// Checks before timing: a tapegrad row's result (C first filled with NaN, beta = 0) is compared with
// float64 dot products on every element of the first and last rows and columns and 512 random
// ones (batched: of three matrices); a wrong result aborts. A library's result is compared once per
// (shape, transpose, threads) with tapegrad's (so checked) result on every element: if the largest
// difference is more than 2 (K + 2) eps of tapegrad's largest element, the row reports an error
// (Google Benchmark's error_occurred, "ERROR OCCURRED" on the console) instead of a time.
// Run with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`: those force OpenBLAS onto a slower kernel.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "aligned_buffer.hpp"
#include "kernels/kernels.hpp"
#include "kernels/runtime.hpp"

#ifdef TAPEGRAD_HAVE_OPENBLAS
#include <cblas.h>
#include <dlfcn.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif
#ifdef TAPEGRAD_HAVE_BLIS
#include <blis.h>
#endif
#ifdef TAPEGRAD_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

namespace k = tapegrad::kernels;

namespace {

struct Shape {
  int64_t M, K, N;
};

// One set of operands per shape, allocated and first-touched once, reused by every row; 64-byte
// aligned as tensors are (aligned_buffer.hpp), the same buffers for every implementation.
struct Buffers {
  tapegrad::bench::AlignedVector<float> A, B, C;
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

double flops(int64_t batch, const Shape& s) { return 2.0 * double(batch) * double(s.M) * double(s.N) * double(s.K); }

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

// Times the state's loop by the wall clock and reports GFLOP/s from it. Not UseRealTime(): that
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

// tapegrad's product of `batch` matrices (a single GEMM when batch is 1) into b.C.
void tapegrad_gemm(int64_t batch, const Op& op, const Shape& s, Buffers& b) {
  if (batch == 1)
    k::gemm<float>(op.ta, op.tb, s.M, s.N, s.K, 1.f, b.A.data(), op.lda(s), b.B.data(), op.ldb(s), 0.f,
                   b.C.data(), s.N);
  else
    k::gemm_batched<float>(batch, op.ta, op.tb, s.M, s.N, s.K, 1.f, b.A.data(), op.lda(s), s.M * s.K,
                           b.B.data(), op.ldb(s), s.K * s.N, 0.f, b.C.data(), s.N, s.M * s.N);
}

// Runs tapegrad into C filled with NaN (beta = 0 must not read C) and checks the result against
// float64 dot products (batched: three of the matrices).
void run_and_verify_tapegrad(int64_t batch, const Op& op, const Shape& s, Buffers& b) {
  std::fill(b.C.begin(), b.C.end(), std::numeric_limits<float>::quiet_NaN());
  tapegrad_gemm(batch, op, s, b);
  const char* what = batch == 1 ? "tapegrad" : "tapegrad batched";
  for (int64_t i : {int64_t(0), batch / 2, batch - 1})
    verify(what, op, s, b.A.data() + i * s.M * s.K, b.B.data() + i * s.K * s.N, b.C.data() + i * s.M * s.N);
}

void bench_tapegrad(benchmark::State& state, int64_t batch, Op op, Shape s, int threads) {
  k::set_num_threads(threads);
  Buffers& b = buffers(batch, s);
  static std::map<std::tuple<int64_t, bool, bool, int64_t, int64_t, int64_t, int>, bool> verified;
  if (bool& done = verified[{batch, op.ta, op.tb, s.M, s.K, s.N, threads}]; !done) {
    run_and_verify_tapegrad(batch, op, s, b);
    done = true;
  }
  timed_loop(state, flops(batch, s), [&] { tapegrad_gemm(batch, op, s, b); });
}

// A competitor: its row name, how it is told its thread count (once per row, before timing), and one
// row-major C = op(A) op(B) with packed operands (alpha 1, beta 0).
struct Library {
  const char* name;
  void (*set_threads)(int threads);
  void (*sgemm)(const Op& op, const Shape& s, const float* A, const float* B, float* C);
};

#ifdef TAPEGRAD_HAVE_OPENBLAS
const Library openblas{
    "openblas", [](int threads) { openblas_set_num_threads(threads); },
    [](const Op& op, const Shape& s, const float* A, const float* B, float* C) {
      cblas_sgemm(CblasRowMajor, op.ta ? CblasTrans : CblasNoTrans, op.tb ? CblasTrans : CblasNoTrans, int(s.M),
                  int(s.N), int(s.K), 1.f, A, int(op.lda(s)), B, int(op.ldb(s)), 0.f, C, int(s.N));
    }};

// libblis exports a cblas_sgemm too; the dynamic linker binds the first definition on the link line.
// The openblas rows must time OpenBLAS, so say so and stop if the symbol came from another library.
void require_openblas_cblas() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) == 0 || info.dli_fname == nullptr ||
      std::strstr(info.dli_fname, "openblas") == nullptr) {
    std::fprintf(stderr, "bench_gemm: cblas_sgemm resolves to %s, not OpenBLAS (link OpenBLAS before BLIS)\n",
                 info.dli_fname ? info.dli_fname : "an unknown object");
    std::exit(1);
  }
}
#endif

#ifdef TAPEGRAD_HAVE_BLIS
// BLIS takes a row and a column stride per operand, so row-major needs no reinterpretation: the stored
// matrix has row stride ld and column stride 1, and BLIS_TRANSPOSE says op() transposes it. The thread
// count travels with each call in an rntm_t (not BLIS's global setting or BLIS_NUM_THREADS).
rntm_t blis_runtime = BLIS_RNTM_INITIALIZER;
// BLIS 0.9 picks its kernels by the CPU's vendor and family at its first call, and a CPU newer than
// it knows (AMD family 26, Zen 5) gets its generic configuration: 256^3 on one Zen 5 core ran at 31
// GFLOP/s so, 153-162 with its AVX-512 (skx) kernels and 90 with its zen3 ones. So unless
// BLIS_ARCH_TYPE says otherwise, BLIS gets the configuration of the instruction set tapegrad runs
// (TAPEGRAD_ARCH lowers both): skx for AVX-512, zen3 (AMD) or haswell for AVX2. Called before the
// first BLIS call.
void choose_blis_configuration() {
  if (std::getenv("BLIS_ARCH_TYPE")) return;
  const tapegrad::kernels::Isa isa = tapegrad::kernels::active_isa();
  int arch = -1;
  if (isa == tapegrad::kernels::Isa::avx512)
    arch = BLIS_ARCH_SKX;
  else if (isa == tapegrad::kernels::Isa::avx2)
    arch = __builtin_cpu_is("amd") ? BLIS_ARCH_ZEN3 : BLIS_ARCH_HASWELL;
  if (arch >= 0) setenv("BLIS_ARCH_TYPE", std::to_string(arch).c_str(), 0);
}
const Library blis{
    "blis", [](int threads) { bli_rntm_set_num_threads(threads, &blis_runtime); },
    [](const Op& op, const Shape& s, const float* A, const float* B, float* C) {
      float one = 1.f, zero = 0.f;
      bli_sgemm_ex(op.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, op.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.M, s.N,
                   s.K, &one, const_cast<float*>(A), op.lda(s), 1, const_cast<float*>(B), op.ldb(s), 1, &zero, C,
                   s.N, 1, nullptr, &blis_runtime);
    }};
#endif

#ifdef TAPEGRAD_HAVE_ONEDNN
// dnnl_sgemm is row-major, like the benchmark's storage. Debian's libdnnl runs on OpenMP
// (DNNL_CPU_RUNTIME_OMP), so the calling thread's OpenMP team size is its thread count.
const Library onednn{
    "onednn", [](int threads) { omp_set_num_threads(threads); },
    [](const Op& op, const Shape& s, const float* A, const float* B, float* C) {
      if (dnnl_sgemm(op.ta ? 'T' : 'N', op.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f, A, op.lda(s), B, op.ldb(s), 0.f, C,
                     s.N) != dnnl_success) {
        std::fprintf(stderr, "bench_gemm: dnnl_sgemm failed on %s %ldx%ldx%ld\n", op.name().c_str(), long(s.M),
                     long(s.K), long(s.N));
        std::abort();
      }
    }};
#endif

const std::vector<const Library*> libraries = {
#ifdef TAPEGRAD_HAVE_OPENBLAS
    &openblas,
#endif
#ifdef TAPEGRAD_HAVE_BLIS
    &blis,
#endif
#ifdef TAPEGRAD_HAVE_ONEDNN
    &onednn,
#endif
};

// The library's product of `batch` matrices: a loop of single calls.
void library_gemm(const Library& lib, int64_t batch, const Op& op, const Shape& s, Buffers& b) {
  for (int64_t i = 0; i < batch; ++i)
    lib.sgemm(op, s, b.A.data() + i * s.M * s.K, b.B.data() + i * s.K * s.N, b.C.data() + i * s.M * s.N);
}

// tapegrad's checked result for one (batch, shape, transpose): the reference a library is compared
// with. Rows of one shape and transpose are registered together, so one cached entry serves them.
const std::vector<float>& tapegrad_reference(int64_t batch, const Op& op, const Shape& s) {
  static std::tuple<int64_t, bool, bool, int64_t, int64_t, int64_t> key{-1, false, false, 0, 0, 0};
  static std::vector<float> reference;
  const std::tuple<int64_t, bool, bool, int64_t, int64_t, int64_t> wanted{batch, op.ta, op.tb, s.M, s.K, s.N};
  if (key != wanted) {
    Buffers& b = buffers(batch, s);
    run_and_verify_tapegrad(batch, op, s, b);
    reference.assign(b.C.begin(), b.C.end());
    key = wanted;
  }
  return reference;
}

// Empty if the library's C agrees with tapegrad's: the largest difference at most 2 (K + 2) eps of
// tapegrad's largest element (float rounding in any order of summation stays far below that; a mixed
// up transpose or a missed block does not). Otherwise the message the row reports.
std::string disagreement(const Library& lib, int64_t batch, const Op& op, const Shape& s, int threads) {
  Buffers& b = buffers(batch, s);
  const std::vector<float>& reference = tapegrad_reference(batch, op, s);
  lib.set_threads(threads);
  std::fill(b.C.begin(), b.C.end(), std::numeric_limits<float>::quiet_NaN());
  library_gemm(lib, batch, op, s, b);
  double largest = 0, difference = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    largest = std::max(largest, std::abs(double(reference[i])));
    const double d = std::abs(double(b.C[i]) - double(reference[i]));
    difference = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(difference, d);
  }
  const double relative = difference / largest;
  const double tolerance = 2.0 * double(s.K + 2) * std::numeric_limits<float>::epsilon();
  if (relative <= tolerance) return {};
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s disagrees with tapegrad: max relative error %.3g > %.3g", lib.name, relative,
                tolerance);
  return buf;
}

void bench_library(benchmark::State& state, const Library* lib, int64_t batch, Op op, Shape s, int threads) {
  static std::map<std::tuple<const Library*, int64_t, bool, bool, int64_t, int64_t, int64_t, int>, std::string>
      verdicts;
  const auto key = std::make_tuple(lib, batch, op.ta, op.tb, s.M, s.K, s.N, threads);
  auto found = verdicts.find(key);
  if (found == verdicts.end()) found = verdicts.emplace(key, disagreement(*lib, batch, op, s, threads)).first;
  if (!found->second.empty()) {
    state.SkipWithError(found->second.c_str());
    return;
  }
  lib->set_threads(threads);
  Buffers& b = buffers(batch, s);
  timed_loop(state, flops(batch, s), [&] { library_gemm(*lib, batch, op, s, b); });
}

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

// One (shape, transpose, threads): tapegrad, then each library, back to back. batch 0 names a single
// GEMM (family gemm), otherwise a batch of them (gemm_batched).
void register_rows(int64_t batch, const Shape& s, const Op& op, int t) {
  const char* family = batch > 0 ? "gemm_batched" : "gemm";
  const int64_t count = std::max<int64_t>(batch, 1);
  benchmark::RegisterBenchmark(row_name(family, "tapegrad", op.name(), batch, s, t).c_str(), bench_tapegrad,
                               count, op, s, t);
  for (const Library* lib : libraries)
    benchmark::RegisterBenchmark(row_name(family, lib->name, op.name(), batch, s, t).c_str(), bench_library, lib,
                                 count, op, s, t);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef TAPEGRAD_HAVE_OPENBLAS
  require_openblas_cblas();
#endif
#ifdef TAPEGRAD_HAVE_BLIS
  choose_blis_configuration();
#endif
  const std::vector<Shape> shapes = {
      // The sweep: squares (and the odd 257 and 1000).
      {64, 64, 64},       {128, 128, 128},    {256, 256, 256},  {257, 257, 257},   {512, 512, 512},
      {1000, 1000, 1000}, {1024, 1024, 1024},
      // A d_model 256 model with 2048 tokens per batch: projections, FFN up and down.
      {2048, 256, 256},   {2048, 256, 1024},  {2048, 1024, 256},
      // One time step of the attention GRU (batch 64, hidden 256, gates 3 x 256): the recurrent
      // projection and its input gradient (64 x 256 x 768, 64 x 768 x 256) and the weight gradient
      // accumulated per step (768 x 64 x 256, tn).
      {64, 256, 768},     {64, 768, 256},     {768, 64, 256},
      // The small Transformer step (d_model 128, d_ff 512, 2048 tokens): QKV, FFN up and down, an
      // output projection (forward and input gradients)
      {2048, 128, 384},   {2048, 128, 512},   {2048, 512, 128},  {2048, 128, 128},
      // and its weight gradients dW = dy^T x (tn): out x tokens x in.
      {384, 2048, 128},   {512, 2048, 128},   {128, 2048, 512},
      // The base Transformer step (d_model 512, d_ff 2048, vocabulary 1000, 2048 tokens): projections,
      // QKV, FFN up and down (down's 2048x2048x512 is also FFN up's weight gradient), the output layer
      {2048, 512, 512},   {2048, 512, 1536},  {2048, 512, 2048}, {2048, 2048, 512}, {2048, 512, 1000},
      // and the other weight gradients (tn: out x tokens x in).
      {512, 2048, 512},   {1536, 2048, 512},  {512, 2048, 2048}, {1000, 2048, 512},
      // The Spanish-English Transformer (README, real text: d_model 192, d_ff 768, 4000 SentencePiece
      // pieces, batches of 4000 padded tokens): QKV, projections, FFN up and down, the tied output layer
      {4000, 192, 576},   {4000, 192, 192},   {4000, 192, 768},  {4000, 768, 192}, {4000, 192, 4000},
      // and the output layer's input gradient, the weight gradients (tn: out x tokens x in).
      {4000, 4000, 192},  {576, 4000, 192},   {768, 4000, 192},  {192, 4000, 768},
      // The GPT of nanoGPT's CPU recipe (12 blocks of 64 = 768 tokens, d_model 128): QKV, FFN up, down.
      {768, 128, 384},    {768, 128, 512},    {768, 512, 128},   {384, 768, 128},
  };
  const std::vector<Op> ops = {{false, false}, {false, true}, {true, false}, {true, true}};
  for (const Shape& s : shapes)
    for (const Op& op : ops)
      for (int t : {1, 2}) register_rows(0, s, op, t);
  // Attention's batched heads: batch = sequences x heads of (T x head_dim x T) scores and their
  // (T x T x head_dim) product with the values.
  const std::vector<std::pair<int64_t, Shape>> batched = {
      {256, {32, 32, 32}},     // the small Transformer: 64 sequences x 4 heads, T 32, head 32
      {256, {64, 64, 64}},     // the base Transformer: 32 sequences x 8 heads, T 64, head 64
      {32, {128, 32, 128}},    // T 128, head 32: 8 sequences x 4 heads, scores
      {32, {128, 128, 32}},    //   and scores x values
      {8, {512, 32, 512}},     // T 512, head 32: 2 sequences x 4 heads, scores
      {8, {512, 512, 32}},     //   and scores x values
      {64, {1, 32, 256}},      // the attention GRU's context, weights [B,1,S] x keys [B,S,H] (B 64, S 32, H 256)
  };
  for (const auto& [batch, s] : batched)
    for (const Op& op : ops)
      for (int t : {1, 2}) register_rows(batch, s, op, t);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
