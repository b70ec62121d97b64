// The parallelism experiment: the median time of single training steps (train::train_step: forward,
// backward, clip, update) per sequence length and thread count, for an attention GRU and a Transformer
// of similar size, and the tokens/s and thread speed-ups derived from it.
#include <algorithm>
#include <chrono>

#include "tapegrad/runtime.hpp"
#include "src/train/experiments/experiments_internal.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment::detail {

namespace {
// Restores the kernel thread count on exit.
struct ThreadsGuard {
  int saved = runtime::num_threads();
  ~ThreadsGuard() { runtime::set_num_threads(saved); }
};
}  // namespace

Report parallelism(const Options& opts, const Callbacks& cb) {
  ThreadsGuard guard;
  const bool q = opts.quick;
  const std::vector<int> lengths = q ? std::vector<int>{8, 16} : std::vector<int>{16, 32, 64, 128};
  const int64_t timed = opts.steps > 0 ? opts.steps : (q ? 2 : 10), warm = q ? 1 : 3, batch = q ? 8 : 32;
  const int n_threads = opts.threads > 0 ? opts.threads : guard.saved;
  std::vector<int> thread_counts = {1};
  if (n_threads > 1) thread_counts.push_back(n_threads);
  // Similar parameter counts (printed in the table): a one-layer attention GRU and a 2+2-layer Transformer.
  models::ModelConfig rnn = rnn_config(models::ModelKind::attention_rnn, q);
  models::ModelConfig tf = transformer_config(nn::PositionalKind::sinusoidal, q);
  if (!q) {
    rnn.d_model = 128, rnn.hidden = 256;
    tf.d_model = 128, tf.heads = 4, tf.d_ff = 512, tf.layers = 2, tf.max_len = 256;
  }
  Report r{"parallelism",
           {{"experiment", "model", "parameters", "seq_len", "batch_size", "threads", "ms_per_step",
             "tokens_per_second", "speedup_vs_1_thread", "ms_per_step_vs_shortest"},
            {}},
           {"model", "parameters", "seq_len", "threads", "ms_per_step", "tokens_per_second",
            "speedup_vs_1_thread", "ms_per_step_vs_shortest"},
           {}};
  struct Point {
    std::string model;
    int64_t params;
    int len, threads;
    double ms, tok_s;
  };
  std::vector<Point> points;
  const std::vector<models::ModelConfig> configs = {rnn, tf};
  const int total = int(configs.size() * lengths.size() * thread_counts.size());
  int index = 0;
  for (const auto& config : configs) {
    for (int len : lengths) {
      for (int t : thread_counts) {
        ++index;
        train::TrainOptions o;
        o.model = config;
        o.task = "copy";
        o.task_options = {len, len, 10};
        o.batch_size = batch;
        o.steps = 0;
        o.seed = opts.seed;
        o.threads = t;
        o.valid_size = 0;
        train::Session s = train::make_session(o);
        runtime::set_num_threads(t);
        const data::Batch b = s.batch_for_step(1);
        const std::string what = std::string(models::model_name(config.kind)) + " length " +
                                 std::to_string(len) + ", " + std::to_string(t) + " thread" +
                                 (t > 1 ? "s" : "");
        std::vector<double> secs;
        const auto t_arm = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < warm + timed; ++i) {
          // One training step, the trainer's own, on the same batch every time.
          const train::StepResult r = train::train_step(s, b);
          if (i >= warm) secs.push_back(r.seconds);
          if (cb.on_step)
            cb.on_step({what, index, total, i + 1, warm + timed, r.loss,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_arm).count()});
        }
        std::sort(secs.begin(), secs.end());
        const double med = secs[secs.size() / 2];
        points.push_back({models::model_name(config.kind), s.model->parameter_count(), len, t, med * 1e3,
                          double(b.target_tokens()) / med});
        if (cb.log)
          cb.log("[" + std::to_string(index) + "/" + std::to_string(total) + "] " + what + ": " +
                 fmt(med * 1e3, 1) + " ms/step (median of " + std::to_string(timed) + "), " +
                 fmt(double(b.target_tokens()) / med, 0) + " tokens/s");
      }
    }
  }
  auto at = [&](const std::string& model, int len, int t) -> const Point& {
    for (const auto& p : points)
      if (p.model == model && p.len == len && p.threads == t) return p;
    throw Error("experiment parallelism: missing point");
  };
  for (const auto& p : points) {
    const double speedup = at(p.model, p.len, 1).ms / p.ms;
    r.table.add({"parallelism", p.model, std::to_string(p.params), std::to_string(p.len),
                 std::to_string(batch), std::to_string(p.threads), fmt(p.ms, 2), fmt(p.tok_s, 0),
                 fmt(speedup, 2), fmt(p.ms / at(p.model, lengths.front(), p.threads).ms, 2)});
  }
  r.summary.push_back(
      "claim: an RNN takes one sequential step per token, so its step time grows with the length "
      "and its per-token throughput stays flat; the Transformer processes every position in the "
      "same large matrix products, which use the hardware (and extra threads) better.");
  const int lo = lengths.front(), hi = lengths.back(), tn = thread_counts.back();
  const std::string rn = models::model_name(rnn.kind), tn_name = models::model_name(tf.kind);
  double growth[2] = {0, 0};
  for (int m = 0; m < 2; ++m) {
    const std::string model = m == 0 ? rn : tn_name;
    const Point &a = at(model, lo, 1), &b = at(model, hi, 1);
    growth[m] = b.tok_s / a.tok_s;
    std::string line = model + " (" + std::to_string(a.params) + " parameters), 1 thread: " + fmt(a.ms, 1) +
                       " ms/step at length " + std::to_string(lo) + " -> " + fmt(b.ms, 1) + " at " +
                       std::to_string(hi) + " (x" + fmt(b.ms / a.ms, 2) + " for x" + fmt(double(hi) / lo, 0) +
                       " tokens); tokens/s x" + fmt(growth[m], 2);
    if (tn > 1)
      line += "; " + std::to_string(tn) + "-thread speed-up " + fmt(a.ms / at(model, lo, tn).ms, 2) +
              " at length " + std::to_string(lo) + ", " + fmt(b.ms / at(model, hi, tn).ms, 2) + " at " +
              std::to_string(hi);
    r.summary.push_back(line);
  }
  r.summary.push_back(std::string(growth[1] > 1.2 * growth[0] ? "shown" : "NOT shown at these sizes") +
                      ": from length " + std::to_string(lo) + " to " + std::to_string(hi) +
                      " the Transformer's "
                      "tokens/s changes x" +
                      fmt(growth[1], 2) + ", the attention GRU's x" + fmt(growth[0], 2) +
                      " (threshold: the Transformer's gain at least 1.2 times the GRU's)");
  return r;
}

}  // namespace tapegrad::experiment::detail
