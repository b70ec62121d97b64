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

#include "src/train/experiments/experiments_internal.hpp"
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

}  // namespace

Report gradient_path(const Options& opts, const Callbacks& cb) {
  const bool q = opts.quick;
  const int S = q ? 8 : 16;  // the held-out source length the gradients are measured at
  const data::TaskOptions train_task{4, S, 10};
  const int64_t steps = opts.steps > 0 ? opts.steps : (q ? 150 : 1000), batch_size = 32,
                examples = q ? 16 : 64;
  const double lr = Recipe{}.lr;  // the accuracy experiments' default
  const std::vector<int> lengths = q ? std::vector<int>{4, 8, 16} : std::vector<int>{8, 16, 32, 64};
  const std::vector<models::ModelConfig> arms = {rnn_config(models::ModelKind::rnn, q),
                                                 rnn_config(models::ModelKind::attention_rnn, q),
                                                 transformer_config(nn::PositionalKind::sinusoidal, q)};
  const std::vector<uint64_t> seeds = seed_list(opts);
  Report r;
  r.name = "gradient-path";
  r.table.columns = kColumns;
  r.shown = {"part",           "seed",          "arm",           "seq_len",       "distance",
             "token_accuracy", "grad_norm",     "grad_norm_rel", "grad_gain_rel", "grad_norm_all_pairs",
             "entries",        "critical_path", "work_flops",    "parallel_width"};
  auto label = [](const models::ModelConfig& c) { return arm_label(c); };

  // ---- part 1: gradient norm against distance, per seed and arm ----
  // rel[arm][seed][j], gain_rel[arm][seed][j]: the relevant-token norm and gain over their values at
  // the smallest distance
  std::vector<std::vector<std::vector<double>>> rel(arms.size()), gain_rel(arms.size());
  // the same before training
  std::vector<std::vector<std::vector<double>>> init_rel(arms.size()), init_gain_rel(arms.size());
  const int runs = int(arms.size() * seeds.size());
  int run_index = 0;
  for (uint64_t seed : seeds) {
    for (size_t a = 0; a < arms.size(); ++a) {
      ++run_index;
      const train::TrainOptions o =
          run_options(arms[a], "reverse", train_task, steps, batch_size, 100, lr, seed, opts.threads);
      train::Session s = train::make_session(o);
      const std::string what = label(arms[a]) + " on reverse, seed " + std::to_string(seed);
      if (cb.log)
        cb.log("[" + std::to_string(run_index) + "/" + std::to_string(runs) + "] " + what + ": " +
               std::to_string(s.model->parameter_count()) + " parameters, " + std::to_string(steps) +
               " steps, lengths " + range_name(train_task.min_len, train_task.max_len));
      // Held-out examples of length S, the same for every arm of a seed.
      const auto task = data::make_task("reverse", {S, S, train_task.symbols});
      if (task->vocab().tokens() != s.vocab.tokens())
        throw Error("experiment gradient-path: length " + std::to_string(S) + " changes the vocabulary");
      Generator gen = Generator::derive(seed, 0x67726164ull);
      const auto held_out = task->sample_many(gen, examples);
      // Measured before training (steps 0: the gradient paths the architecture starts with) and after.
      auto measure = [&](int64_t steps_done, std::vector<std::vector<std::vector<double>>>& norm_curves,
                         std::vector<std::vector<std::vector<double>>>& gain_curves) {
        const train::EvalResult acc =
            train::evaluate(*s.model, s.vocab, task->tokenization(), held_out, 256, S + 8, 0);
        const GradientProfile p = gradient_profile(*s.model, data::make_batch(held_out));
        std::vector<double> curve, gain_curve;
        for (int j = 0; j < S; ++j) {
          const double norm = p.relevant[size_t(j)], gain = p.relevant_gain[size_t(j)];
          curve.push_back(norm / p.relevant[0]);
          gain_curve.push_back(gain / p.relevant_gain[0]);
          r.table.add({"gradient-path",
                       "gradient",
                       std::to_string(seed),
                       label(arms[a]),
                       models::model_name(arms[a].kind),
                       std::to_string(s.model->parameter_count()),
                       std::to_string(steps_done),
                       std::to_string(S),
                       std::to_string(2 * j + 1),
                       std::to_string(examples),
                       fmt(acc.token_accuracy),
                       fmt_sig(norm),
                       fmt_sig(curve.back()),
                       fmt_sig(gain),
                       fmt_sig(gain_curve.back()),
                       fmt_sig(p.all_pairs[size_t(2 * j + 1)]),
                       "-",
                       "-",
                       "-",
                       "-"});
        }
        norm_curves[a].push_back(curve);
        gain_curves[a].push_back(gain_curve);
        if (cb.log)
          cb.log("    " + what + " after " + std::to_string(steps_done) + " steps: token accuracy " +
                 fmt(acc.token_accuracy, 2) + " at length " + std::to_string(S) +
                 "; |grad| at distance 1: " + fmt_sig(p.relevant[0]) + ", at " + std::to_string(2 * S - 1) +
                 ": " + fmt_sig(p.relevant[size_t(S - 1)]) + "; gain " + fmt_sig(p.relevant_gain[0]) +
                 " -> " + fmt_sig(p.relevant_gain[size_t(S - 1)]));
      };
      measure(0, init_rel, init_gain_rel);
      train::train(
          s,
          [&](const train::StepLog& l) {
            if (cb.on_step) cb.on_step({what, run_index, runs, l.step, steps, l.loss, l.seconds});
          },
          nullptr);
      measure(steps, rel, gain_rel);
    }
  }

  // ---- part 2: the critical path of one training step against the source length ----
  // Deterministic in the seed: measured once, with the first seed.
  std::vector<std::vector<TapeShape>> shapes(arms.size());
  for (size_t a = 0; a < arms.size(); ++a)
    for (int len : lengths) {
      const TapeShape t = tape_shape(arms[a], "reverse", len, batch_size, seeds.front());
      shapes[a].push_back(t);
      r.table.add({"gradient-path",
                   "tape",
                   std::to_string(seeds.front()),
                   label(arms[a]),
                   models::model_name(arms[a].kind),
                   "-",
                   "1",
                   std::to_string(len),
                   "-",
                   std::to_string(batch_size),
                   "-",
                   "-",
                   "-",
                   "-",
                   "-",
                   "-",
                   std::to_string(t.entries),
                   std::to_string(t.critical_path),
                   fmt_sig(t.work_flops),
                   fmt_sig(t.parallel_width())});
    }

  // ---- summary ----
  // Stated before measuring: "decays" means the relevant-token value at the largest distance is below a
  // quarter of its value at the smallest, in the mean over seeds; "does not decay", at least half.
  const double kDecays = 0.25, kFlat = 0.5;
  // The mean and min-max over seeds of curves[arm][seed][j], per j.
  auto over_seeds = [&](const std::vector<std::vector<double>>& curves, int j) {
    std::vector<double> v;
    for (const auto& curve : curves) v.push_back(curve[size_t(j)]);
    return spread(v);
  };
  auto verdict = [&](const std::vector<std::vector<std::vector<double>>>& curves, const std::string& what) {
    std::vector<Spread> decay;
    for (size_t a = 0; a < arms.size(); ++a) {
      decay.push_back(over_seeds(curves[a], S - 1));
      std::string line =
          label(arms[a]) + ": " + what + " at distance " + std::to_string(2 * S - 1) + " / at distance 1 = " +
          (decay[a].min == decay[a].max ? fmt_sig(decay[a].mean, 3)
                                        : fmt_sig(decay[a].mean, 3) + " (" + fmt_sig(decay[a].min, 3) + "-" +
                                              fmt_sig(decay[a].max, 3) + ")") +
          " over " + std::to_string(seeds.size()) + " seed" + (seeds.size() > 1 ? "s" : "") +
          "; by distance (relative, mean over seeds):";
      for (int j = 0; j < S; ++j) line += " " + fmt_sig(over_seeds(curves[a], j).mean);
      r.summary.push_back(line);
    }
    const bool shown = decay[0].mean < kDecays && decay[1].mean >= kFlat && decay[2].mean >= kFlat;
    r.summary.push_back(std::string(shown ? "shown" : "NOT shown") + " (" + what +
                        "): the vanilla GRU's decays " + "with distance (factor " +
                        fmt_sig(decay[0].mean, 3) + ", threshold below " + fmt(kDecays, 2) +
                        "), the attention models' does not (" + fmt_sig(decay[1].mean, 3) + " and " +
                        fmt_sig(decay[2].mean, 3) + ", threshold at least " + fmt(kFlat, 2) + ")");
  };
  verdict(rel, "gradient norm");
  verdict(gain_rel, "gradient gain (norm / |d log p(y_j) / d logits_j|)");
  verdict(init_gain_rel, "gradient gain before training (steps 0)");
  r.summary.push_back(
      "the gain divides each example's norm by the gradient at its own output logits, |onehot(y_j) - "
      "softmax(z_j)|, which is near 0 wherever the model is sure of y_j: the raw norm mixes how far the "
      "source token is with how sure the model is of the output; the gain keeps only the path");
  r.summary.push_back(
      "distance 1 (the first output, the last source token) is special for both RNNs: their decoder starts "
      "from the encoder's final state, which that token entered one step before, so it has a short recurrent "
      "path besides attention; every ratio above is to that point");
  bool path_shown = true;
  std::string path_line = "critical path of one training step (dependent tape entries) at lengths";
  for (int len : lengths) path_line += " " + std::to_string(len);
  path_line += ":";
  for (size_t a = 0; a < arms.size(); ++a) {
    path_line += (a ? "; " : " ") + label(arms[a]);
    for (const TapeShape& t : shapes[a]) path_line += " " + std::to_string(t.critical_path);
    const bool grows = shapes[a].back().critical_path > shapes[a].front().critical_path;
    const bool constant = shapes[a].back().critical_path == shapes[a].front().critical_path;
    path_shown = path_shown && (arms[a].kind == models::ModelKind::transformer ? constant : grows);
  }
  r.summary.push_back(path_line);
  r.summary.push_back(
      std::string(path_shown ? "shown" : "NOT shown") +
      ": the RNNs' critical path grows with the source length, the Transformer's is the same at "
      "every length (its work grows instead: parallel width " +
      fmt_sig(shapes[2].front().parallel_width()) + " -> " + fmt_sig(shapes[2].back().parallel_width()) +
      " FLOPs per dependent level, against " + fmt_sig(shapes[0].front().parallel_width()) + " -> " +
      fmt_sig(shapes[0].back().parallel_width()) + " for the vanilla GRU)");

  // ---- figures ----
  auto curve_figure = [&](const std::vector<std::vector<std::vector<double>>>& curves, std::string file,
                          std::string title, std::string y_label) {
    Figure f =
        line_figure(std::move(file), std::move(title),
                    "distance (encoder steps after the source token + decoder steps before the output)",
                    std::move(y_label), /*log_y=*/true);
    for (size_t a = 0; a < arms.size(); ++a) {
      Series s;
      s.label = label(arms[a]);
      for (int j = 0; j < S; ++j) {
        const Spread sp = over_seeds(curves[a], j);
        s.x.push_back(2 * j + 1), s.y.push_back(sp.mean), s.y_lo.push_back(sp.min), s.y_hi.push_back(sp.max);
      }
      f.series.push_back(s);
    }
    return f;
  };
  r.figures.push_back(curve_figure(rel, "gradient_norm.png", "gradient norm against distance",
                                   "|d log p(y_j) / d source embedding|, relative to distance 1"));
  Figure gain = curve_figure(gain_rel, "gradient_gain.png", "gradient gain against distance",
                             "norm / |d log p(y_j) / d logits_j|, relative to distance 1");
  for (Series& before : curve_figure(init_gain_rel, "", "", "").series) {
    before.label += " before training";
    gain.series.push_back(before);
  }
  r.figures.push_back(gain);
  Figure path = line_figure("critical_path.png", "critical path against length", "source length",
                            "critical path (dependent tape entries in one step)");
  for (size_t a = 0; a < arms.size(); ++a) {
    Series s;
    s.label = label(arms[a]);
    for (size_t k = 0; k < lengths.size(); ++k)
      s.x.push_back(lengths[k]), s.y.push_back(double(shapes[a][k].critical_path));
    path.series.push_back(s);
  }
  r.figures.push_back(path);
  return r;
}

}  // namespace tapegrad::experiment::detail
