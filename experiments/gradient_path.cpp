// The gradient-path experiment: the mechanism behind the bottleneck and long-range claims, measured
// directly. After training a vanilla GRU, an attention GRU and a Transformer on `reverse`, it takes the
// gradient of each output token's log-probability log p(y_j) with respect to the source embedding that
// token must reproduce (source position i = S-1-j) and plots its norm against the distance between
// them, d = (S-1-i) + j + 1 = 2j + 1: the encoder steps after i plus the decoder steps before j. A
// vanilla RNN carries the source only through its recurrent state, so the gradient passes d cells and
// should decay with d; attention reaches every encoder state in one step, so it should not. Second
// part: the critical path of one training step read from the tape (tape_shape.cpp) against the
// source length; the RNNs' grows with it, the Transformer's should not.
//
// Beside the norm, its gain: the norm over the gradient at that output's logits, |onehot(y_j) -
// softmax(z_j)|, which a confident prediction makes small whatever the path; and both once before
// training (steps 0), the paths the architecture starts with.
//
// The gradient is read without changing the models: a TapeObserver takes the grad_output of the one
// tape entry that looks up the encoder's embedding table (src_embed.weight), one backward per output
// position (the sum over the batch of log p(y_j): examples in a batch are independent).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "experiments/harness.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/ops.hpp"

namespace tapegrad::experiment::detail {

namespace {

// Captures d(objective) / d(source embeddings) [B, S, E]: the gradient flowing into the output of the
// embedding entry that reads `table`. There must be exactly one such entry per forward.
class SourceEmbeddingGradient : public TapeObserver {
 public:
  explicit SourceEmbeddingGradient(const Tensor& table) : table_(table.impl()) {}
  void recorded(const Tape& tape, size_t index) override {
    const TapeEntry& e = tape.entries()[index];
    if (e.op != OpKind::embedding) return;
    for (const Tensor& in : e.inputs)
      if (in.defined() && in.impl() == table_) {
        entries_.push_back(index);
        return;
      }
  }
  void before_backward(const Tape&, size_t index, const Tensor& grad_output) override {
    if (entries_.size() == 1 && index == entries_[0]) grad_ = grad_output.clone().to(DType::f64);
  }
  // Throws unless exactly one entry read the table.
  void check_found() const {
    if (entries_.size() != 1)
      throw Error(
          "experiment gradient-path: expected exactly one tape entry looking up src_embed.weight, found " +
          std::to_string(entries_.size()));
  }
  // The gradient of the last backward (undefined if none reached the embeddings), then forgets it.
  Tensor take() { return std::exchange(grad_, Tensor()); }

 private:
  const TensorImpl* table_;
  std::vector<size_t> entries_;
  Tensor grad_;
};

Tensor source_embedding_table(const models::Seq2Seq& model) {
  for (const auto& [name, t] : model.named_parameters())
    if (name == "src_embed.weight") return t;
  throw Error("experiment gradient-path: the model has no parameter src_embed.weight");
}

// Per output position j: the mean over examples of |d log p(y_j) / d e_(S-1-j)| (the token it must
// reproduce on reverse), and the same divided per example by |d log p(y_j) / d z_j| = |onehot(y_j) -
// softmax(z_j)|, the gradient at that position's logits z_j: the gain of the path from the source token
// to the output, without the factor a confident prediction (p(y_j) near 1) puts on every gradient; per
// distance d (1 .. 2S-1): the mean norm over examples and every pair (i, j) with (S-1-i) + j + 1 = d.
struct GradientProfile {
  std::vector<double> relevant;       // [S], index j; distance 2j + 1
  std::vector<double> relevant_gain;  // [S], index j
  std::vector<double> all_pairs;      // [2S], index d (0 unused)
};

GradientProfile gradient_profile(models::Seq2Seq& model, const data::Batch& batch) {
  model.eval();
  const int64_t B = batch.batch_size(), S = batch.src.size(1), Tt = batch.tgt_out.size(1);
  for (int64_t b = 0; b < B; ++b)
    if (batch.src_len[size_t(b)] != S || batch.tgt_len[size_t(b)] != S + 1)
      throw Error("experiment gradient-path: every held-out example must have " + std::to_string(S) +
                  " source and target tokens");
  SourceEmbeddingGradient watch(source_embedding_table(model));
  GradientProfile p;
  p.relevant.assign(size_t(S), 0);
  p.relevant_gain.assign(size_t(S), 0);
  p.all_pairs.assign(size_t(2 * S), 0);
  std::vector<double> pairs_at(size_t(2 * S), 0);
  {
    ObserveScope scope(watch);
    const Tensor log_p = log_softmax(model.logits(batch));  // [B, Tt, V]
    watch.check_found();
    const int64_t V = log_p.size(2);
    const Tensor targets = batch.tgt_out.clone();
    const int32_t* y = targets.data<int32_t>();
    const Tensor log_p64 = log_p.detach().to(DType::f64);
    const double* lp = log_p64.data<double>();
    // |d log p(y_bj) / d z_bj|^2 = sum_v (1[v = y] - p_v)^2
    auto output_gradient_norm = [&](int64_t b, int64_t j) {
      double sq = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double dz = (v == y[b * Tt + j] ? 1.0 : 0.0) - std::exp(lp[(b * Tt + j) * V + v]);
        sq += dz * dz;
      }
      return std::sqrt(sq);
    };
    for (int64_t j = 0; j < S; ++j) {
      // sum_b log p(y_bj): a one-hot pick of each example's target token at position j.
      std::vector<double> pick(size_t(B * Tt * V), 0.0);
      for (int64_t b = 0; b < B; ++b) pick[size_t((b * Tt + j) * V + y[b * Tt + j])] = 1.0;
      const Tensor objective = sum(mul(log_p, Tensor::from_vector(pick, log_p.shape(), log_p.dtype())));
      backward(objective, {}, /*retain_graph=*/true);
      const Tensor g = watch.take();  // [B, S, E]
      if (!g.defined()) continue;     // no gradient reached the source: norms 0
      if (g.ndim() != 3 || g.size(0) != B || g.size(1) != S)
        throw Error("experiment gradient-path: the source embeddings' gradient is " + to_string(g.shape()) +
                    ", expected [" + std::to_string(B) + ", " + std::to_string(S) + ", E]");
      const int64_t E = g.size(2);
      const double* gd = g.data<double>();
      for (int64_t b = 0; b < B; ++b) {
        const double at_output = output_gradient_norm(b, j);
        for (int64_t i = 0; i < S; ++i) {
          double sq = 0;
          for (int64_t e = 0; e < E; ++e) sq += gd[(b * S + i) * E + e] * gd[(b * S + i) * E + e];
          const double norm = std::sqrt(sq) / double(B);
          const int64_t d = (S - 1 - i) + j + 1;
          p.all_pairs[size_t(d)] += norm;
          if (b == 0) pairs_at[size_t(d)] += 1;
          if (i == S - 1 - j) {
            p.relevant[size_t(j)] += norm;
            p.relevant_gain[size_t(j)] += at_output > 0 ? norm / at_output : 0;
          }
        }
      }
    }
  }
  current_tape().clear();
  model.zero_grad();
  for (size_t d = 1; d < p.all_pairs.size(); ++d) p.all_pairs[d] /= pairs_at[d];
  return p;
}

const std::vector<std::string> kColumns = {
    "experiment",          "part",      "seed",          "arm",        "model",
    "parameters",          "steps",     "seq_len",       "distance",   "examples",
    "token_accuracy",      "grad_norm", "grad_norm_rel", "grad_gain",  "grad_gain_rel",
    "grad_norm_all_pairs", "entries",   "critical_path", "work_flops", "parallel_width"};

// What the experiment trains and measures.
struct Setup {
  int S = 0;  // the held-out source length the gradients are measured at
  data::TaskOptions train_task;
  int64_t steps = 0, batch_size = 32, examples = 0;
  double lr = Recipe{}.lr;  // the accuracy experiments' default
  std::vector<int> lengths;  // part 2's source lengths
  std::vector<models::ModelConfig> arms;
  std::vector<uint64_t> seeds;
};

Setup make_setup(const Options& opts) {
  const bool q = opts.quick;
  Setup s;
  s.S = q ? 8 : 16;
  s.train_task = {4, s.S, 10};
  s.steps = opts.steps > 0 ? opts.steps : (q ? 150 : 1000);
  s.examples = q ? 16 : 64;
  s.lengths = q ? std::vector<int>{4, 8, 16} : std::vector<int>{8, 16, 32, 64};
  s.arms = {rnn_config(models::ModelKind::rnn, q), rnn_config(models::ModelKind::attention_rnn, q),
            transformer_config(nn::PositionalKind::sinusoidal, q)};
  s.seeds = seed_list(opts);
  return s;
}

// Per arm, per seed, per output position j: a relevant-token quantity over its value at j = 0.
using Curves = std::vector<std::vector<std::vector<double>>>;  // [arm][seed][j]

// Part 1's results: the norm and gain curves after training, and the same before (steps 0).
struct GradientCurves {
  Curves rel, gain_rel, init_rel, init_gain_rel;
  explicit GradientCurves(size_t arms) : rel(arms), gain_rel(arms), init_rel(arms), init_gain_rel(arms) {}
};

// The model and its held-out examples at one point of part 1.
struct Measured {
  const Setup& setup;
  size_t arm;
  uint64_t seed;
  train::Session& session;
  const data::Task& task;
  const std::vector<data::Example>& held_out;
  std::string what;
};

// Measures the gradient profile of `m` after `steps_done` steps: one table row per output position, one
// curve per kind into the arm's entry of `norm_curves` and `gain_curves`.
void measure(const Measured& m, int64_t steps_done, Curves& norm_curves, Curves& gain_curves, Report& r,
             const Callbacks& cb) {
  const int S = m.setup.S;
  models::Seq2Seq& model = *m.session.model;
  const train::EvalResult acc =
      train::evaluate(model, m.session.vocab, m.task.tokenization(), m.held_out, 256, S + 8, 0);
  const GradientProfile p = gradient_profile(model, data::make_batch(m.held_out));
  std::vector<double> curve, gain_curve;
  for (int j = 0; j < S; ++j) {
    const double norm = p.relevant[size_t(j)], gain = p.relevant_gain[size_t(j)];
    curve.push_back(norm / p.relevant[0]);
    gain_curve.push_back(gain / p.relevant_gain[0]);
    r.table.add({"gradient-path", "gradient", std::to_string(m.seed), arm_label(m.setup.arms[m.arm]),
                 models::model_name(m.setup.arms[m.arm].kind), std::to_string(model.parameter_count()),
                 std::to_string(steps_done), std::to_string(S), std::to_string(2 * j + 1),
                 std::to_string(m.setup.examples), fmt(acc.token_accuracy), fmt_sig(norm), fmt_sig(curve.back()),
                 fmt_sig(gain), fmt_sig(gain_curve.back()), fmt_sig(p.all_pairs[size_t(2 * j + 1)]), "-", "-", "-",
                 "-"});
  }
  norm_curves[m.arm].push_back(curve);
  gain_curves[m.arm].push_back(gain_curve);
  if (cb.log)
    cb.log("    " + m.what + " after " + std::to_string(steps_done) + " steps: token accuracy " +
           fmt(acc.token_accuracy, 2) + " at length " + std::to_string(S) + "; |grad| at distance 1: " +
           fmt_sig(p.relevant[0]) + ", at " + std::to_string(2 * S - 1) + ": " + fmt_sig(p.relevant[size_t(S - 1)]) +
           "; gain " + fmt_sig(p.relevant_gain[0]) + " -> " + fmt_sig(p.relevant_gain[size_t(S - 1)]));
}

// Part 1: every arm once per seed, measured before and after training on held-out examples of length S
// (the same for every arm of a seed).
GradientCurves run_gradients(const Setup& setup, const Options& opts, const Callbacks& cb, Report& r) {
  GradientCurves c(setup.arms.size());
  const int runs = int(setup.arms.size() * setup.seeds.size());
  int run_index = 0;
  const auto task = data::make_task("reverse", {setup.S, setup.S, setup.train_task.symbols});
  for (uint64_t seed : setup.seeds) {
    const auto examples = held_out(*task, seed, 0x67726164ull, setup.examples);
    for (size_t a = 0; a < setup.arms.size(); ++a) {
      ++run_index;
      const std::string what = arm_label(setup.arms[a]) + " on reverse, seed " + std::to_string(seed) +
                               ", lengths " + range_name(setup.train_task.min_len, setup.train_task.max_len);
      Trained t{start_run(run_options(setup.arms[a], "reverse", setup.train_task, setup.steps, setup.batch_size,
                                      100, setup.lr, seed, opts.threads),
                          what, run_index, runs, cb)};
      if (task->vocab().tokens() != t.session.vocab.tokens())
        throw Error("experiment gradient-path: length " + std::to_string(setup.S) + " changes the vocabulary");
      const Measured m{setup, a, seed, t.session, *task, examples, what};
      measure(m, 0, c.init_rel, c.init_gain_rel, r, cb);
      train_run(t, what, run_index, runs, cb);
      measure(m, setup.steps, c.rel, c.gain_rel, r, cb);
    }
  }
  return c;
}

// Part 2: the critical path of one training step against the source length. Deterministic in the seed:
// measured once, with the first seed. shapes[arm][length index].
std::vector<std::vector<TapeShape>> run_tape_shapes(const Setup& setup, Report& r) {
  std::vector<std::vector<TapeShape>> shapes(setup.arms.size());
  for (size_t a = 0; a < setup.arms.size(); ++a)
    for (int len : setup.lengths) {
      const TapeShape t = tape_shape(setup.arms[a], "reverse", len, setup.batch_size, setup.seeds.front());
      shapes[a].push_back(t);
      r.table.add({"gradient-path", "tape", std::to_string(setup.seeds.front()), arm_label(setup.arms[a]),
                   models::model_name(setup.arms[a].kind), "-", "1", std::to_string(len), "-",
                   std::to_string(setup.batch_size), "-", "-", "-", "-", "-", "-", std::to_string(t.entries),
                   std::to_string(t.critical_path), fmt_sig(t.work_flops), fmt_sig(t.parallel_width())});
    }
  return shapes;
}

// The mean and min-max over seeds of curves[arm][seed][j] at one j.
Spread over_seeds(const std::vector<std::vector<double>>& curves, int j) {
  std::vector<double> v;
  for (const auto& curve : curves) v.push_back(curve[size_t(j)]);
  return spread(v);
}

// A line per arm and the verdict for one kind of curve. Stated before measuring: "decays" means the
// relevant-token value at the largest distance is below a quarter of its value at the smallest, in the
// mean over seeds; "does not decay", at least half.
void add_decay_verdict(const Setup& setup, const Curves& curves, const std::string& what, Report& r) {
  const double kDecays = 0.25, kFlat = 0.5;
  const int S = setup.S;
  std::vector<Spread> decay;
  for (size_t a = 0; a < setup.arms.size(); ++a) {
    decay.push_back(over_seeds(curves[a], S - 1));
    const Spread& d = decay[a];
    std::string line = arm_label(setup.arms[a]) + ": " + what + " at distance " + std::to_string(2 * S - 1) +
                       " / at distance 1 = " +
                       (d.min == d.max ? fmt_sig(d.mean, 3)
                                       : fmt_sig(d.mean, 3) + " (" + fmt_sig(d.min, 3) + "-" + fmt_sig(d.max, 3) + ")") +
                       " over " + std::to_string(setup.seeds.size()) + " seed" + (setup.seeds.size() > 1 ? "s" : "") +
                       "; by distance (relative, mean over seeds):";
    for (int j = 0; j < S; ++j) line += " " + fmt_sig(over_seeds(curves[a], j).mean);
    r.summary.push_back(line);
  }
  const bool shown = decay[0].mean < kDecays && decay[1].mean >= kFlat && decay[2].mean >= kFlat;
  r.summary.push_back(std::string(shown ? "shown" : "NOT shown") + " (" + what + "): the vanilla GRU's decays " +
                      "with distance (factor " + fmt_sig(decay[0].mean, 3) + ", threshold below " + fmt(kDecays, 2) +
                      "), the attention models' does not (" + fmt_sig(decay[1].mean, 3) + " and " +
                      fmt_sig(decay[2].mean, 3) + ", threshold at least " + fmt(kFlat, 2) + ")");
}

// Part 2's lines: the critical paths by length and the verdict.
void add_path_verdict(const Setup& setup, const std::vector<std::vector<TapeShape>>& shapes, Report& r) {
  bool path_shown = true;
  std::string path_line = "critical path of one training step (dependent tape entries) at lengths";
  for (int len : setup.lengths) path_line += " " + std::to_string(len);
  path_line += ":";
  for (size_t a = 0; a < setup.arms.size(); ++a) {
    path_line += (a ? "; " : " ") + arm_label(setup.arms[a]);
    for (const TapeShape& t : shapes[a]) path_line += " " + std::to_string(t.critical_path);
    const bool grows = shapes[a].back().critical_path > shapes[a].front().critical_path;
    const bool constant = shapes[a].back().critical_path == shapes[a].front().critical_path;
    path_shown = path_shown && (setup.arms[a].kind == models::ModelKind::transformer ? constant : grows);
  }
  r.summary.push_back(path_line);
  r.summary.push_back(
      std::string(path_shown ? "shown" : "NOT shown") +
      ": the RNNs' critical path grows with the source length, the Transformer's is the same at "
      "every length (its work grows instead: parallel width " +
      fmt_sig(shapes[2].front().parallel_width()) + " -> " + fmt_sig(shapes[2].back().parallel_width()) +
      " FLOPs per dependent level, against " + fmt_sig(shapes[0].front().parallel_width()) + " -> " +
      fmt_sig(shapes[0].back().parallel_width()) + " for the vanilla GRU)");
}

void add_summary(const Setup& setup, const GradientCurves& c, const std::vector<std::vector<TapeShape>>& shapes,
                 Report& r) {
  add_decay_verdict(setup, c.rel, "gradient norm", r);
  add_decay_verdict(setup, c.gain_rel, "gradient gain (norm / |d log p(y_j) / d logits_j|)", r);
  add_decay_verdict(setup, c.init_gain_rel, "gradient gain before training (steps 0)", r);
  r.summary.push_back(
      "the gain divides each example's norm by the gradient at its own output logits, |onehot(y_j) - "
      "softmax(z_j)|, which is near 0 wherever the model is sure of y_j: the raw norm mixes how far the "
      "source token is with how sure the model is of the output; the gain keeps only the path");
  r.summary.push_back(
      "distance 1 (the first output, the last source token) is special for both RNNs: their decoder starts "
      "from the encoder's final state, which that token entered one step before, so it has a short recurrent "
      "path besides attention; every ratio above is to that point");
  add_path_verdict(setup, shapes, r);
}

Figure curve_figure(const Setup& setup, const Curves& curves, std::string file, std::string title,
                    std::string y_label) {
  Figure f = line_figure(std::move(file), std::move(title),
                         "distance (encoder steps after the source token + decoder steps before the output)",
                         std::move(y_label), /*log_y=*/true);
  for (size_t a = 0; a < setup.arms.size(); ++a) {
    Series s;
    s.label = arm_label(setup.arms[a]);
    for (int j = 0; j < setup.S; ++j) {
      const Spread sp = over_seeds(curves[a], j);
      s.x.push_back(2 * j + 1), s.y.push_back(sp.mean), s.y_lo.push_back(sp.min), s.y_hi.push_back(sp.max);
    }
    f.series.push_back(s);
  }
  return f;
}

std::vector<Figure> gradient_figures(const Setup& setup, const GradientCurves& c,
                                     const std::vector<std::vector<TapeShape>>& shapes) {
  std::vector<Figure> figures;
  figures.push_back(curve_figure(setup, c.rel, "gradient_norm.png", "gradient norm against distance",
                                 "|d log p(y_j) / d source embedding|, relative to distance 1"));
  Figure gain = curve_figure(setup, c.gain_rel, "gradient_gain.png", "gradient gain against distance",
                             "norm / |d log p(y_j) / d logits_j|, relative to distance 1");
  for (Series& before : curve_figure(setup, c.init_gain_rel, "", "", "").series) {
    before.label += " before training";
    gain.series.push_back(before);
  }
  figures.push_back(gain);
  Figure path = line_figure("critical_path.png", "critical path against length", "source length",
                            "critical path (dependent tape entries in one step)");
  for (size_t a = 0; a < setup.arms.size(); ++a) {
    Series s;
    s.label = arm_label(setup.arms[a]);
    for (size_t k = 0; k < setup.lengths.size(); ++k)
      s.x.push_back(setup.lengths[k]), s.y.push_back(double(shapes[a][k].critical_path));
    path.series.push_back(s);
  }
  figures.push_back(path);
  return figures;
}

}  // namespace

Report gradient_path(const Options& opts, const Callbacks& cb) {
  const Setup setup = make_setup(opts);
  Report r;
  r.name = "gradient-path";
  r.table.columns = kColumns;
  r.shown = {"part",           "seed",          "arm",           "seq_len",       "distance",
             "token_accuracy", "grad_norm",     "grad_norm_rel", "grad_gain_rel", "grad_norm_all_pairs",
             "entries",        "critical_path", "work_flops",    "parallel_width"};
  const GradientCurves curves = run_gradients(setup, opts, cb, r);
  const auto shapes = run_tape_shapes(setup, r);
  add_summary(setup, curves, shapes, r);
  r.figures = gradient_figures(setup, curves, shapes);
  return r;
}

}  // namespace tapegrad::experiment::detail
