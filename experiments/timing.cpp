// The parallelism experiment: the median time of single training steps (train::train_step: forward,
// backward, clip, update) per sequence length and thread count, for an attention GRU and a Transformer
// of similar size, and the tokens/s and thread speed-ups derived from it; beside each timing, the
// property the claim is about, read from the tape (tape_shape.cpp): the critical path (the longest chain
// of dependent entries in one step), the work and the parallel width (work per dependent level), which
// do not depend on how many cores this machine has. Every point runs once per seed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "experiments/harness.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/runtime.hpp"

namespace tapegrad::experiment::detail {

namespace {
// Restores the kernel thread count on exit.
struct ThreadsGuard {
  int saved = runtime::num_threads();
  ~ThreadsGuard() { runtime::set_num_threads(saved); }
};

// The median and the min-max of a few values.
struct Median {
  double median = 0, min = 0, max = 0;
};
Median median_of(std::vector<double> v) {
  if (v.empty()) throw Error("experiment parallelism: median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}
std::string fmt_median(const Median& m, int digits) {
  if (m.min == m.max) return fmt(m.median, digits);
  return fmt(m.median, digits) + " (" + fmt(m.min, digits) + "-" + fmt(m.max, digits) + ")";
}
// What the experiment measures and how much: lengths, batch, thread counts, seeds, the two models and
// the timed and warm-up steps per length.
struct Setup {
  bool quick = false;
  int64_t steps = 0;  // --steps: timed steps at every length (0: by length, below)
  std::vector<int> lengths;
  int64_t batch = 0;
  std::vector<int> thread_counts;
  std::vector<uint64_t> seeds;
  models::ModelConfig rnn, tf;
  // Timed steps per point: fewer at the long lengths, where one step takes a second or more, so a full
  // run stays within minutes (stated in the description); --steps sets them all.
  int64_t timed_steps(int len) const {
    if (steps > 0) return steps;
    if (quick) return 2;
    return len <= 64 ? 10 : len == 128 ? 5 : 3;
  }
  int64_t warm_steps(int len) const { return quick || len > 64 ? 1 : 3; }
};

Setup make_setup(const Options& opts, int default_threads) {
  Setup s;
  s.quick = opts.quick;
  s.steps = opts.steps;
  const bool q = opts.quick;
  s.lengths = q ? std::vector<int>{8, 16} : std::vector<int>{16, 32, 64, 128, 256};
  s.batch = q ? 8 : 32;
  const int n_threads = opts.threads > 0 ? opts.threads : default_threads;
  s.thread_counts = {1};
  if (n_threads > 1) s.thread_counts.push_back(n_threads);
  s.seeds = seed_list(opts);
  // Similar parameter counts (printed in the table): a one-layer attention GRU and a 2+2-layer Transformer.
  s.rnn = rnn_config(models::ModelKind::attention_rnn, q);
  s.tf = transformer_config(nn::PositionalKind::sinusoidal, q);
  if (!q) {
    s.rnn.d_model = 128, s.rnn.hidden = 256;
    s.tf.d_model = 128, s.tf.heads = 4, s.tf.d_ff = 512, s.tf.layers = 2;
  }
  s.tf.max_len = std::max<int64_t>(s.tf.max_len, s.lengths.back() + 2);  // <bos> + target + <eos>
  return s;
}

// One (model, length, threads, seed) measurement.
struct Point {
  std::string model;
  int64_t params;
  int len, threads;
  uint64_t seed;
  int64_t timed;
  double ms, tok_s;
  TapeShape shape;
};

// Every point, and the reads the table, the summary and the figures make of them.
struct Points {
  std::vector<Point> all;
  const std::vector<uint64_t>& seeds;
  const Point& at(const std::string& model, int len, int t, uint64_t seed) const {
    for (const auto& p : all)
      if (p.model == model && p.len == len && p.threads == t && p.seed == seed) return p;
    throw Error("experiment parallelism: missing point");
  }
  // Over seeds: the median and min-max of a quantity of one (model, length, threads) point.
  template <class F>
  Median over_seeds(const std::string& model, int len, int t, F value) const {
    std::vector<double> v;
    for (uint64_t seed : seeds) v.push_back(value(at(model, len, t, seed)));
    return median_of(v);
  }
  Median ms(const std::string& model, int len, int t) const {
    return over_seeds(model, len, t, [](const Point& p) { return p.ms; });
  }
  // The t-thread speed-up over 1 thread of one (model, length), over seeds.
  Median speedup(const std::string& model, int len, int t) const {
    return over_seeds(model, len, t, [&](const Point& p) { return at(model, len, 1, p.seed).ms / p.ms; });
  }
};

// Times one point: a fresh session of `config` on copy at length `len`, the first warm-up step recorded
// on the tape (the step's shape, never timed), then the median of the timed steps on the same batch.
Point time_point(const Setup& setup, const models::ModelConfig& config, int len, int t, uint64_t seed, int index,
                 int total, const Callbacks& cb) {
  train::Session s = train::make_session(
      run_options(config, "copy", {len, len, 10}, 0, setup.batch, 0, train::TrainOptions{}.lr, seed, t));
  runtime::set_num_threads(t);
  const data::Batch b = s.batch_for_step(1);
  const std::string what = std::string(models::model_name(config.kind)) + " length " + std::to_string(len) +
                           ", " + std::to_string(t) + " thread" + (t > 1 ? "s" : "") + ", seed " +
                           std::to_string(seed);
  const int64_t warm = setup.warm_steps(len), timed = setup.timed_steps(len);
  const auto t_arm = std::chrono::steady_clock::now();
  auto progress = [&](int64_t i, double loss) {
    if (cb.on_step)
      cb.on_step({what, index, total, i, warm + timed, loss,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t_arm).count()});
  };
  const TapeShape shape = record_step(s, b);
  progress(1, std::nan(""));
  std::vector<double> secs;
  for (int64_t i = 1; i < warm + timed; ++i) {
    const train::StepResult step = train::train_step(s, b);  // the trainer's own step
    if (i >= warm) secs.push_back(step.seconds);
    progress(i + 1, step.loss);
  }
  const double med = median_of(secs).median;
  Point p{models::model_name(config.kind), s.model->parameter_count(), len, t, seed, timed,
          med * 1e3, double(b.target_tokens()) / med, shape};
  if (cb.log)
    cb.log("[" + std::to_string(index) + "/" + std::to_string(total) + "] " + what + ": " + fmt(p.ms, 1) +
           " ms/step (median of " + std::to_string(timed) + "), " + fmt(p.tok_s, 0) +
           " tokens/s; critical path " + std::to_string(shape.critical_path) + ", parallel width " +
           fmt_sig(shape.parallel_width(), 3) + " FLOPs per level");
  return p;
}

std::vector<Point> run_points(const Setup& setup, const Callbacks& cb) {
  const std::vector<models::ModelConfig> configs = {setup.rnn, setup.tf};
  const int total = int(setup.seeds.size() * configs.size() * setup.lengths.size() * setup.thread_counts.size());
  std::vector<Point> points;
  for (uint64_t seed : setup.seeds)
    for (const auto& config : configs)
      for (int len : setup.lengths)
        for (int t : setup.thread_counts)
          points.push_back(time_point(setup, config, len, t, seed, int(points.size()) + 1, total, cb));
  return points;
}

Table points_table(const Setup& setup, const Points& pts) {
  Table t{{"experiment", "model", "parameters", "seq_len", "batch_size", "threads", "seed", "timed_steps",
           "ms_per_step", "tokens_per_second", "speedup_vs_1_thread", "ms_per_step_vs_shortest", "entries",
           "critical_path", "work_flops", "parallel_width"},
          {}};
  for (const auto& p : pts.all) {
    const double speedup = pts.at(p.model, p.len, 1, p.seed).ms / p.ms;
    t.add({"parallelism", p.model, std::to_string(p.params), std::to_string(p.len), std::to_string(setup.batch),
           std::to_string(p.threads), std::to_string(p.seed), std::to_string(p.timed), fmt(p.ms, 2),
           fmt(p.tok_s, 0), fmt(speedup, 2), fmt(p.ms / pts.at(p.model, setup.lengths.front(), p.threads, p.seed).ms, 2),
           std::to_string(p.shape.entries), std::to_string(p.shape.critical_path), fmt_sig(p.shape.work_flops, 3),
           fmt_sig(p.shape.parallel_width(), 3)});
  }
  return t;
}

// How one model's path, width and step time change from the shortest to the longest length.
struct Growth {
  double tokens = 0, width = 0, path = 0;
};

// One model's summary line; returns its growth.
Growth model_line(const Setup& setup, const Points& pts, const std::string& model, Report& r) {
  const uint64_t s0 = setup.seeds.front();
  const int lo = setup.lengths.front(), hi = setup.lengths.back(), tn = setup.thread_counts.back();
  auto tok_of = [](const Point& p) { return p.tok_s; };
  const Point &a = pts.at(model, lo, 1, s0), &b = pts.at(model, hi, 1, s0);
  Growth g;
  g.tokens = pts.over_seeds(model, hi, 1, tok_of).median / pts.over_seeds(model, lo, 1, tok_of).median;
  g.path = double(b.shape.critical_path) / double(a.shape.critical_path);
  g.width = b.shape.parallel_width() / a.shape.parallel_width();
  std::string line = model + " (" + std::to_string(a.params) + " parameters): critical path";
  for (int len : setup.lengths) line += " " + std::to_string(pts.at(model, len, 1, s0).shape.critical_path);
  line += " at lengths";
  for (int len : setup.lengths) line += " " + std::to_string(len);
  line += "; parallel width " + fmt_sig(a.shape.parallel_width(), 3) + " -> " + fmt_sig(b.shape.parallel_width(), 3) +
          " FLOPs per level (x" + fmt(g.width, 1) + "); 1 thread: " + fmt_median(pts.ms(model, lo, 1), 1) +
          " ms/step at length " + std::to_string(lo) + " -> " + fmt_median(pts.ms(model, hi, 1), 1) + " at " +
          std::to_string(hi) + "; tokens/s x" + fmt(g.tokens, 2);
  if (tn > 1)
    line += "; " + std::to_string(tn) + "-thread speed-up " + fmt_median(pts.speedup(model, lo, tn), 2) +
            " at length " + std::to_string(lo) + ", " + fmt_median(pts.speedup(model, hi, tn), 2) + " at " +
            std::to_string(hi);
  r.summary.push_back(line);
  return g;
}

// The claim, a line per model, and the two verdicts: the property itself (critical path) and the timings.
void add_verdicts(const Setup& setup, const Points& pts, Report& r) {
  const int lo = setup.lengths.front(), hi = setup.lengths.back();
  const std::string over = std::to_string(setup.seeds.size()) + " seed" + (setup.seeds.size() > 1 ? "s" : "");
  r.summary.push_back(
      "claim: an RNN takes one sequential step per token, so the chain of dependent operations in a step "
      "(its critical path) grows with the length; the Transformer processes every position in the same "
      "matrix products, so its critical path is the same at every length and the extra work widens each "
      "level instead. Step times: median (min-max) over " +
      over + "; critical path and parallel width: read from one step's tape (deterministic).");
  const Growth rnn = model_line(setup, pts, models::model_name(setup.rnn.kind), r);
  const Growth tf = model_line(setup, pts, models::model_name(setup.tf.kind), r);
  const bool path_shown = tf.path == 1.0 && rnn.path > 1.0;
  r.summary.push_back(std::string(path_shown ? "shown" : "NOT shown") + " (the property itself): from length " +
                      std::to_string(lo) + " to " + std::to_string(hi) + " the Transformer's critical path changes x" +
                      fmt(tf.path, 2) + " and its parallel width x" + fmt(tf.width, 1) +
                      "; the attention GRU's critical path x" + fmt(rnn.path, 2) + ", its width x" +
                      fmt(rnn.width, 1));
  r.summary.push_back(std::string(tf.tokens > 1.2 * rnn.tokens ? "shown" : "NOT shown at these sizes") +
                      " (timings): from length " + std::to_string(lo) + " to " + std::to_string(hi) +
                      " the Transformer's tokens/s changes x" + fmt(tf.tokens, 2) + ", the attention GRU's x" +
                      fmt(rnn.tokens, 2) + " (threshold: the Transformer's gain at least 1.2 times the GRU's)");
}

// What the timings on this machine can and cannot show, and the budget per point.
std::string limits_line(const Setup& setup, const Points& pts) {
  const uint64_t s0 = setup.seeds.front();
  const int lo = setup.lengths.front(), hi = setup.lengths.back(), tn = setup.thread_counts.back();
  std::string budget;
  for (int len : setup.lengths)
    budget += (budget.empty() ? "" : ", ") + std::to_string(setup.timed_steps(len)) + " at " + std::to_string(len);
  const Point &rnn_hi = pts.at(models::model_name(setup.rnn.kind), hi, 1, s0),
              &tf_hi = pts.at(models::model_name(setup.tf.kind), hi, 1, s0);
  return "what the timings on " + std::to_string(tn) + " thread" + (tn > 1 ? "s" : "") +
         " can show: how a step's cost grows with the length on this machine, and whether a level's work is "
         "large enough to split over " +
         std::to_string(tn) + " cores against the cost of starting threads (a matter of grain: the GRU's levels average " +
         fmt_sig(rnn_hi.shape.parallel_width(), 3) + " FLOPs at length " + std::to_string(hi) +
         ", the Transformer's " + fmt_sig(tf_hi.shape.parallel_width(), 3) +
         "). What they cannot show: the advantage the claim is about. On " + std::to_string(tn) +
         " cores either model gains at most x" + std::to_string(tn) +
         ", however wide its levels; only a machine with enough cores to run each level at once is bound by "
         "the critical path, where at length " +
         std::to_string(hi) + " the GRU still waits for " + std::to_string(rnn_hi.shape.critical_path) +
         " dependent entries per pass and the Transformer for " + std::to_string(tf_hi.shape.critical_path) +
         ". Timed steps per point: " + budget + " (after " + std::to_string(setup.warm_steps(lo)) +
         " warm-up step(s), " + std::to_string(setup.warm_steps(hi)) +
         " at the longest length; the first one recorded on the tape).";
}

std::vector<Figure> parallelism_figures(const Setup& setup, const Points& pts) {
  Figure path = line_figure("critical_path.png", "critical path against length", "sequence length",
                            "critical path (dependent tape entries in one step)");
  Figure width = line_figure("parallel_width.png", "parallel width against length", "sequence length",
                             "work / critical path (FLOPs per dependent level)", /*log_y=*/true);
  Figure time = line_figure("step_time.png", "step time against length", "sequence length",
                            "ms per training step (median over seeds, min-max bars)", /*log_y=*/true);
  for (const std::string model : {models::model_name(setup.rnn.kind), models::model_name(setup.tf.kind)}) {
    Series ps, ws;
    ps.label = ws.label = model;
    for (int len : setup.lengths) {
      const Point& p = pts.at(model, len, 1, setup.seeds.front());
      ps.x.push_back(len), ps.y.push_back(double(p.shape.critical_path));
      ws.x.push_back(len), ws.y.push_back(p.shape.parallel_width());
    }
    path.series.push_back(ps), width.series.push_back(ws);
    for (int t : setup.thread_counts) {
      Series ts;
      ts.label = model + ", " + std::to_string(t) + " thread" + (t > 1 ? "s" : "");
      for (int len : setup.lengths) {
        const Median m = pts.ms(model, len, t);
        ts.x.push_back(len), ts.y.push_back(m.median), ts.y_lo.push_back(m.min), ts.y_hi.push_back(m.max);
      }
      time.series.push_back(ts);
    }
  }
  return {path, width, time};
}

}  // namespace

Report parallelism(const Options& opts, const Callbacks& cb) {
  ThreadsGuard guard;  // the experiment sets the kernel thread count per point and restores it
  const Setup setup = make_setup(opts, guard.saved);
  const Points pts{run_points(setup, cb), setup.seeds};
  Report r;
  r.name = "parallelism";
  r.table = points_table(setup, pts);
  r.shown = {"model",        "seq_len",           "threads",             "seed",       "ms_per_step",
             "tokens_per_second", "speedup_vs_1_thread", "critical_path", "work_flops", "parallel_width"};
  add_verdicts(setup, pts, r);
  r.summary.push_back(limits_line(setup, pts));
  r.figures = parallelism_figures(setup, pts);
  return r;
}

}  // namespace tapegrad::experiment::detail
