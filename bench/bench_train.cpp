// Training-step benchmark: one full step (forward + backward + AdamW update + zero_grad) of the
// seq2seq models of the PyTorch comparison (bench/torch_train.py builds the same models there, and
// bench/compare_train.py runs the two side by side).
//
// Rows: train_step/<model>/omp:<threads>, model transformer, attention_gru or transformer_base,
// threads 1 and 2.
// Workload, identical in both programs: ids drawn once from a fixed seed, no padding, target
// tgt_in = <bos> + (T - 1) tokens, tgt_out = (T - 1) tokens + <eos>; dropout 0 (so no mask work and
// both frameworks do the same arithmetic); AdamW(lr 1e-3, weight_decay 0.01); no clipping.
//   transformer:      batch 64, source and target length 32, vocabulary 32; d_model 128, 4 heads,
//                     2 encoder + 2 decoder layers, d_ff 512, post-LN, ReLU, sinusoidal positions.
//   attention_gru:    batch 64, lengths 32, vocabulary 32; GRU cells, 2 layers per side, embedding
//                     (d_model) 128, hidden 256, additive (Bahdanau) attention, input feeding (decoder
//                     input = [embedding; previous attentional vector], 128 + 256), combine
//                     tanh(W_c [h; ctx]) 512 -> 256.
//   transformer_base: the original paper's base model: batch 32, source and target length 64,
//                     vocabulary 1000; d_model 512, 8 heads, 6 encoder + 6 decoder layers, d_ff 2048,
//                     post-LN, ReLU, sinusoidal positions (45.7 M parameters, 562 GFLOP per step:
//                     6.5 s per step at 1 thread, 2.1 GiB peak RSS on a 2-core Zen 3). It runs 1
//                     warm-up and 3 timed steps (about 30 s at 1 thread, 20 s at 2), and
//                     only when a filter names it: `--benchmark_filter=transformer_base` (the default
//                     run and a plain `tools/run bench` leave it out; see Workload::opt_in).
// Counters:
//   tokens/s      target tokens (batch x target length per step) per second over the timed steps (mean).
//   median_ms     the median step time (robust on a shared machine); tok/s_median from it; min_ms
//                 the fastest step (the least disturbed by other processes); cpu_ms the median CPU
//                 time of a step, all threads (at 1 thread: the step's cost without waiting for a core).
//   GFLOP/s, MFU  model FLOPs / time, with model FLOPs = 3 x the forward GEMM FLOPs (2*M*N*K each;
//                 backward does two GEMMs per forward GEMM). Elementwise work is not counted. MFU is
//                 against this machine's measured FMA peak per core (runtime::peak_gflops: a short FMA
//                 loop on the active instruction set, timed at start-up, reported as
//                 peak_GFLOP/s_core) x threads. GFLOP_step is the model FLOPs of one step.
//   params        parameters of the model (bench/torch_train.py prints the same count for its side).
//   peak_rss_MiB  VmHWM of this benchmark alone (the high-water mark is reset before its model is
//                 built); maxrss_MiB is getrusage's ru_maxrss, the whole process so far.
//   os_allocations_per_step  blocks the caching allocator took from the OS per timed step
//                 (tapegrad::memory::stats); 0 proves steady-state steps map no fresh memory.
//   page_faults_per_step  minor page faults (getrusage) per timed step: first touches of fresh pages
//                 from anywhere in the process, the allocator's or not.
// Warm-up steps (3, or 1 for transformer_base) run before timing; they fill the allocator's free lists.
// Run with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` like the other benchmarks. On a shared
// machine compare min_ms (and medians) of runs taken side by side with bench/torch_train.py: the
// 2-thread rows are very sensitive to other processes, because libgomp's default active wait spins
// at every barrier while the other thread waits for a core (with a load of ~2 on 2 cores we saw the
// Transformer step at 595 ms with the default policy and 106 ms with OMP_WAIT_POLICY=passive).
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/autograd.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/memory.hpp"
#include "tapegrad/models/seq2seq.hpp"
#include "tapegrad/optim.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/train.hpp"

namespace {

using namespace tapegrad;

// One row's model and data. iterations 0 lets Google Benchmark choose (kMinTime seconds of steps).
struct Workload {
  models::ModelConfig config;
  int64_t batch, src_len, tgt_len;
  int warmup = 3;
  int64_t iterations = 0;
  bool opt_in = false;  // registered only when --benchmark_filter names the row
};

constexpr double kMinTime = 3.0;

data::Batch fixed_batch(const Workload& w) {
  const int64_t vocab = w.config.vocab_size;
  Generator gen(2024);
  std::vector<data::Example> ex(static_cast<size_t>(w.batch));
  for (auto& e : ex) {
    for (int64_t i = 0; i < w.src_len; ++i)
      e.src.push_back(int32_t(4 + gen.next_u64() % uint64_t(vocab - 4)));
    for (int64_t i = 0; i < w.tgt_len - 1; ++i)
      e.tgt.push_back(int32_t(4 + gen.next_u64() % uint64_t(vocab - 4)));
  }
  return data::make_batch(ex);  // src [batch, src_len], tgt_in/tgt_out [batch, tgt_len], no <pad>
}

models::ModelConfig transformer_config(int64_t vocab, int64_t d_model, int64_t heads, int64_t layers,
                                       int64_t d_ff) {
  models::ModelConfig c;
  c.kind = models::ModelKind::transformer;
  c.vocab_size = vocab;
  c.d_model = d_model;
  c.heads = heads;
  c.layers = layers;
  c.d_ff = d_ff;
  c.dropout = 0.0;
  return c;
}

models::ModelConfig gru_config() {
  models::ModelConfig c;
  c.kind = models::ModelKind::attention_rnn;
  c.vocab_size = 32;
  c.cell = nn::CellKind::gru;
  c.d_model = 128;
  c.hidden = 256;
  c.layers = 2;
  c.score = nn::AttentionScore::additive;
  c.dropout = 0.0;
  return c;
}

double gemm(double m, double n, double k) {
  return 2 * m * n * k;
}

// Forward GEMM FLOPs of one step (2*M*N*K per GEMM), with R = B*T rows of tokens per side:
//   transformer, per encoder layer: Q,K,V,O projections 4 * 2*R*d*d; scores Q K^T and weights V
//     2 * 2*R*S*d (all heads together); feed-forward 2 * 2*R*d*d_ff.
//   per decoder layer: the same for self-attention and feed-forward, plus cross-attention (Q and O
//     from the target rows, K and V from the memory rows, scores and weights V over S keys);
//   output projection 2*R*d*V. Causal masking does not reduce the count (full scores are computed).
//   attention_gru: per GRU layer input projection 2*R*I*3H and recurrent 2*R*H*3H (I = input width:
//     E for encoder layer 0, E+H for decoder layer 0 (input feeding), H above); attention key
//     projection 2*R*H*A (once), query projection 2*R*H*A, scores v^T tanh(.) 2*R*S*A, context
//     2*R*S*H; combine 2*R*2H*H; output projection 2*R*H*V.
double forward_flops(const Workload& w) {
  const models::ModelConfig& c = w.config;
  const double B = double(w.batch), S = double(w.src_len), T = double(w.tgt_len), V = double(c.vocab_size);
  const double Rs = B * S, Rt = B * T;
  if (c.kind == models::ModelKind::transformer) {
    const double d = double(c.d_model), f = double(c.d_ff);
    const double enc = 4 * gemm(Rs, d, d) + 2 * gemm(Rs, S, d) + 2 * gemm(Rs, f, d);
    const double self = 4 * gemm(Rt, d, d) + 2 * gemm(Rt, T, d);
    const double cross = 2 * gemm(Rt, d, d) + 2 * gemm(Rs, d, d) + 2 * gemm(Rt, S, d);
    const double ff = 2 * gemm(Rt, f, d);
    return double(c.layers) * (enc + self + cross + ff) + gemm(Rt, V, d);
  }
  const double E = double(c.d_model), H = double(c.hidden), A = H;
  double total = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    const double in_enc = l == 0 ? E : H, in_dec = l == 0 ? E + H : H;
    total += gemm(Rs, 3 * H, in_enc) + gemm(Rs, 3 * H, H);
    total += gemm(Rt, 3 * H, in_dec) + gemm(Rt, 3 * H, H);
  }
  total += gemm(Rs, A, H) + gemm(Rt, A, H) + gemm(Rt, S, A) + gemm(Rt, H, S);
  total += gemm(Rt, H, 2 * H) + gemm(Rt, V, H);
  return total;
}

// Resets the kernel's per-process RSS high-water mark (Linux >= 4.0), so VmHWM measures one row.
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (f) f << "5";
}

double vm_hwm_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

double maxrss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // kB on Linux
}

// CPU time of the whole process (all threads), for comparisons that survive a busy machine.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int64_t minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

void train_step(benchmark::State& state, const Workload& w, int threads) {
  runtime::set_num_threads(threads);
  memory::empty_cache();
  reset_peak_rss();
  const data::Batch batch = fixed_batch(w);
  std::unique_ptr<models::Seq2Seq> model = models::make_model(w.config, 1);
  model->train();
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  const train::StepRecipe recipe;  // constant lr 1e-3, no clipping, no label smoothing
  double loss = 0;
  int64_t taken = 0;
  auto step = [&] { loss = train::train_step(*model, opt, recipe, batch, ++taken).loss; };
  for (int i = 0; i < w.warmup; ++i) step();
  const int64_t os_before = memory::stats().os_allocations, faults_before = minor_faults();
  std::vector<double> times, cpu_times;
  for (auto _ : state) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu_times.push_back(cpu_seconds() - c0);
  }
  const double steps = double(state.iterations());
  const int64_t os_after = memory::stats().os_allocations, faults_after = minor_faults();
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  const double median = times.empty() ? 0 : times[times.size() / 2];
  const double tokens = double(batch.target_tokens());
  const double flops = 3 * forward_flops(w);
  double params = 0;
  for (const auto& [name, p] : model->named_parameters()) params += double(p.numel());
  state.counters["tokens/s"] = benchmark::Counter(tokens * steps, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * steps * 1e-9, benchmark::Counter::kIsRate);
  state.counters["MFU%"] = benchmark::Counter(flops * steps * 100 / (runtime::peak_gflops() * 1e9 * threads),
                                              benchmark::Counter::kIsRate);
  state.counters["median_ms"] = median * 1e3;
  state.counters["min_ms"] = times.empty() ? 0 : times.front() * 1e3;
  state.counters["cpu_ms"] = cpu_times.empty() ? 0 : cpu_times[cpu_times.size() / 2] * 1e3;
  state.counters["tok/s_median"] = median > 0 ? tokens / median : 0;
  state.counters["GFLOP_step"] = flops * 1e-9;
  state.counters["peak_GFLOP/s_core"] = runtime::peak_gflops();
  state.counters["params"] = params;
  state.counters["peak_rss_MiB"] = vm_hwm_mib();
  state.counters["maxrss_MiB"] = maxrss_mib();
  state.counters["os_allocations_per_step"] = steps > 0 ? double(os_after - os_before) / steps : 0;
  state.counters["page_faults_per_step"] = steps > 0 ? double(faults_after - faults_before) / steps : 0;
  state.counters["loss"] = loss;
}

// True when a --benchmark_filter argument names `row_model` (an opt-in row runs only then).
bool filter_names(int argc, char** argv, const std::string& row_model) {
  const std::string flag = "--benchmark_filter=";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(flag, 0) == 0 && arg[flag.size()] != '-' &&
        arg.find(row_model, flag.size()) != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Workload small_transformer{transformer_config(32, 128, 4, 2, 512), 64, 32, 32};
  Workload attention_gru{gru_config(), 64, 32, 32};
  // A step takes seconds: few steps, and only on request (opt_in), so the default run stays short.
  Workload base{
      transformer_config(1000, 512, 8, 6, 2048), 32, 64, 64, /*warmup=*/1, /*iterations=*/3, /*opt_in=*/true};
  const std::pair<const char*, const Workload*> rows[] = {
      {"transformer", &small_transformer}, {"attention_gru", &attention_gru}, {"transformer_base", &base}};
  for (const auto& [name, w] : rows) {
    if (w->opt_in && !filter_names(argc, argv, name)) continue;
    for (int threads : {1, 2}) {
      auto* b = benchmark::RegisterBenchmark(
                    ("train_step/" + std::string(name) + "/omp:" + std::to_string(threads)).c_str(),
                    train_step, *w, threads)
                    ->Unit(benchmark::kMillisecond)
                    ->UseRealTime();
      if (w->iterations > 0)
        b->Iterations(w->iterations);
      else
        b->MinTime(kMinTime);
    }
  }
  benchmark::AddCustomContext("tapegrad_isa", runtime::active_isa());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
