// The attention-maps experiment: after training on reverse, where does attention look? Output position j
// of reverse copies source position S-1-j, so a model that has learned the task by attending should put
// its attention there. For each seed, a Transformer (sinusoidal positions; its last decoder layer's
// cross-attention, heads averaged) and an attention GRU (its one alignment) train with the same budget
// and optimizer settings; on held-out examples, teacher-forced, we measure the fraction of attention mass
// on the expected source position, and draw one example's map per arm as a heatmap.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "src/train/experiments/experiments_internal.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment::detail {

namespace {

const std::vector<std::string> kColumns = {"experiment",
                                           "task",
                                           "arm",
                                           "model",
                                           "positional",
                                           "train_lengths",
                                           "steps",
                                           "seed",
                                           "parameters",
                                           "train_seconds",
                                           "train_loss",
                                           "examples",
                                           "exact_match",
                                           "token_accuracy",
                                           "mass_on_expected",
                                           "mass_within_1",
                                           "mass_on_previous_output",
                                           "mass_on_next_output",
                                           "argmax_on_expected",
                                           "uniform_mass"};

// The map whose alignment we score: the last decoder layer's cross-attention (Transformer) or the
// decoder's attention over the encoder states (attention RNN); each [B, Tq, Tk], heads averaged.
Tensor alignment_map(const models::Seq2Seq& model) {
  const models::ModelConfig& c = model.config();
  const std::string want = c.kind == models::ModelKind::transformer
                               ? "decoder.layers." + std::to_string(c.layers - 1) + ".cross_attn"
                               : "decoder.attention";
  std::string names;
  for (const auto& [name, map] : model.attention_maps()) {
    if (name == want) return map.contiguous();
    names += (names.empty() ? "" : ", ") + name;
  }
  throw Error("attention-maps: the model kept no map '" + want +
              "' (kept: " + (names.empty() ? "none" : names) + ")");
}

// What one trained arm's alignment looks like on the held-out examples.
struct Alignment {
  double mass = 0, within_1 = 0, argmax = 0, uniform = 0;  // means over every scored output step
  // on the source positions of output j-1 (S-j, the token fed in at step j) and of output j+1 (S-2-j)
  double previous = 0, next = 0;
  std::vector<double> mass_at;                   // per output position j, over the examples that reach j
  std::vector<std::vector<double>> example_map;  // one example's map: rows output steps (with <eos>)
  // every cross-attention map's heads, one by one: ("decoder.layers.0.cross_attn", head, mass)
  std::vector<std::tuple<std::string, int64_t, double>> head_mass;
};

// Scores one map [B, Tq, Tk] of the teacher-forced batch (reverse: target j = source S-1-j). The <eos>
// step has no expected source position and is not scored (it is drawn in the heatmap). `shown` picks the
// heatmap's example.
Alignment score_map(const Tensor& map, const data::Batch& batch, size_t shown) {
  const Tensor c = map.contiguous();
  const int64_t Tq = c.size(1), Tk = c.size(2);
  const std::vector<double> w = c.to_vector();
  Alignment a;
  std::vector<double> count_at;
  double steps = 0;
  for (size_t b = 0; b < batch.src_len.size(); ++b) {
    const int64_t S = batch.src_len[b], n = batch.tgt_len[b] - 1;  // tgt_len counts <eos>
    if (n != S)
      throw Error("attention-maps: example " + std::to_string(b) + " has a target of " + std::to_string(n) +
                  " tokens for a source of " + std::to_string(S) + " (reverse keeps the length)");
    const double* rows = w.data() + int64_t(b) * Tq * Tk;
    for (int64_t j = 0; j < n; ++j) {
      const double* row = rows + j * Tk;
      const int64_t expected = S - 1 - j;
      const double m = row[expected];
      a.mass += m;
      for (int64_t k = std::max<int64_t>(expected - 1, 0); k <= std::min(expected + 1, S - 1); ++k)
        a.within_1 += row[k];  // the expected position and its neighbours: an alignment off by one
      if (expected + 1 < S) a.previous += row[expected + 1];
      if (expected > 0) a.next += row[expected - 1];
      a.argmax += double(std::max_element(row, row + S) - row == expected);
      a.uniform += 1.0 / double(S);
      if (a.mass_at.size() <= size_t(j))
        a.mass_at.resize(size_t(j) + 1, 0.0), count_at.resize(size_t(j) + 1, 0.0);
      a.mass_at[size_t(j)] += m;
      count_at[size_t(j)] += 1;
      steps += 1;
    }
    if (b == shown)
      for (int64_t j = 0; j <= n; ++j) a.example_map.emplace_back(rows + j * Tk, rows + j * Tk + S);
  }
  a.mass /= steps, a.within_1 /= steps, a.previous /= steps, a.next /= steps, a.argmax /= steps,
      a.uniform /= steps;
  for (size_t j = 0; j < a.mass_at.size(); ++j) a.mass_at[j] /= count_at[j];
  return a;
}

// One teacher-forced pass over `examples` with the maps kept: the alignment map scored in full, and the
// mass on the expected position of every head of every map over the source.
Alignment measure_alignment(models::Seq2Seq& model, const std::vector<data::Example>& examples,
                            size_t shown) {
  NoGrad no_grad;
  model.eval();
  model.keep_attention(true);
  const data::Batch batch = data::make_batch(examples);
  model.logits(batch);
  Alignment a = score_map(alignment_map(model), batch, shown);
  for (const auto& [name, heads] : model.attention_head_maps()) {  // [B, H, Tq, Tk]
    if (name.find("cross_attn") == std::string::npos && name != "decoder.attention") continue;
    for (int64_t h = 0; h < heads.size(1); ++h) {
      const Tensor one =
          reshape(contiguous(narrow(heads, 1, h, 1)), {heads.size(0), heads.size(2), heads.size(3)});
      a.head_mass.emplace_back(name, h, score_map(one, batch, shown).mass);
    }
  }
  model.keep_attention(false);
  return a;
}

uint64_t held_out_seed(uint64_t seed) {
  return Generator::derive_seed(seed, 0x6d617073ull);  // not the training stream
}

}  // namespace

Report attention_maps(const Options& opts, const Callbacks& cb) {
  AccuracySetup setup;  // its batch size, learning rate and warm-up, as the accuracy experiments use
  if (opts.quick) {
    setup.train_task = {3, 8, 6};
    setup.steps = 300;
    setup.batch_size = 16;
    setup.eval_examples = 16;
  } else {
    setup.train_task = {8, 16, 10};
    // Both models reach 0.99-1.00 exact match by 400 steps here; the attention keeps sharpening after
    // that, so the maps are read from models trained as long as positional's (1000 steps; a 3-seed run
    // takes about 1.5 minutes on 2 idle Zen 3 cores).
    setup.steps = 1000;
    setup.eval_examples = 200;
  }
  const int64_t steps = opts.steps > 0 ? opts.steps : setup.steps;
  const std::vector<models::ModelConfig> arms = {
      transformer_config(nn::PositionalKind::sinusoidal, opts.quick),
      rnn_config(models::ModelKind::attention_rnn, opts.quick)};
  const std::string task_name = "reverse";
  const auto task = data::make_task(task_name, setup.train_task);
  const std::vector<uint64_t> seeds = seed_list(opts);
  Report r{"attention-maps",
           {kColumns, {}},
           {"arm", "seed", "exact_match", "mass_on_expected", "mass_within_1", "mass_on_previous_output",
            "argmax_on_expected", "uniform_mass", "train_loss"},
           {},
           {},
           {}};
  std::vector<std::vector<double>> mass(arms.size()), within_1(arms.size()), argmax(arms.size()),
      exact(arms.size());
  std::vector<std::vector<std::vector<double>>> mass_at(arms.size());  // [arm][seed][j]
  Table heads{{"seed", "arm", "map", "head", "mass_on_expected"}, {}};
  std::vector<double> uniform;  // per seed: the mass uniform attention would put on the expected position
  const int runs = int(arms.size() * seeds.size());
  for (size_t si = 0; si < seeds.size(); ++si) {
    const uint64_t seed = seeds[si];
    Generator gen(held_out_seed(seed));
    const auto examples = task->sample_many(gen, setup.eval_examples);
    // The heatmap's example: the first of the longest sources (the most positions to tell apart).
    size_t shown = 0;
    for (size_t e = 0; e < examples.size(); ++e)
      if (examples[e].src.size() > examples[shown].src.size()) shown = e;
    int64_t longest = 0;
    for (const auto& e : examples) longest = std::max<int64_t>(longest, int64_t(e.tgt.size()));
    for (size_t a = 0; a < arms.size(); ++a) {
      const int run = int(si * arms.size() + a + 1);
      const std::string label = arm_label(arms[a]);
      const std::string what = label + " on " + task_name + " (seed " + std::to_string(seed) + ")";
      Trained t = train_logged(run_options(arms[a], task_name, setup.train_task, steps, setup.batch_size,
                                           setup.warmup, Recipe{}.lr, seed, opts.threads),
                               what, run, runs, cb);
      train::Session& s = t.session;
      const double train_loss = t.train_loss, seconds = t.seconds;

      const train::EvalResult ev =
          train::evaluate(*s.model, s.vocab, task->tokenization(), examples, 256, longest + 8, 0);
      const Alignment al = measure_alignment(*s.model, examples, shown);
      mass[a].push_back(al.mass), within_1[a].push_back(al.within_1), argmax[a].push_back(al.argmax),
          exact[a].push_back(ev.exact_match);
      mass_at[a].push_back(al.mass_at);
      for (const auto& [map_name, head, m] : al.head_mass)
        heads.add({std::to_string(seed), label, map_name, std::to_string(head), fmt(m)});
      if (a == 0) uniform.push_back(al.uniform);  // the same examples for every arm of this seed
      r.table.add(
          {r.name,
           task_name,
           label,
           models::model_name(arms[a].kind),
           arms[a].kind == models::ModelKind::transformer ? nn::positional_name(arms[a].positional) : "-",
           range_name(setup.train_task.min_len, setup.train_task.max_len),
           std::to_string(steps),
           std::to_string(seed),
           std::to_string(s.model->parameter_count()),
           fmt(seconds, 1),
           fmt(train_loss, 4),
           std::to_string(ev.examples),
           fmt(ev.exact_match),
           fmt(ev.token_accuracy),
           fmt(al.mass),
           fmt(al.within_1),
           fmt(al.previous),
           fmt(al.next),
           fmt(al.argmax),
           fmt(al.uniform)});
      if (cb.log)
        cb.log("    " + what + ": exact " + fmt(ev.exact_match, 2) + ", mass on the expected position " +
               fmt(al.mass, 2) + " (uniform " + fmt(al.uniform, 2) + ")  (" + fmt(seconds, 0) + " s)");

      if (si == 0) {
        Figure f;
        f.kind = Figure::Kind::heatmap;
        f.file = "attention_" + label + ".png";
        f.title = label +
                  (arms[a].kind == models::ModelKind::transformer
                       ? ": last decoder layer's cross-attention (heads averaged)"
                       : ": decoder attention") +
                  ", seed " + std::to_string(seed) + ", teacher-forced";
        f.x_label = "source position";
        f.y_label = "output position";
        f.cells = al.example_map;
        for (int32_t id : examples[shown].src) f.col_labels.push_back(s.vocab.token(id));
        for (int32_t id : examples[shown].tgt) f.row_labels.push_back(s.vocab.token(id));
        f.row_labels.push_back(s.vocab.token(data::kEos));
        r.figures.push_back(f);
      }
    }
  }

  r.summary.push_back(
      "claim: output j of reverse copies source position S-1-j, so a model that solves it by attending puts "
      "its attention mass there; measured teacher-forced on " +
      std::to_string(setup.eval_examples) + " held-out examples per seed (lengths " +
      range_name(setup.train_task.min_len, setup.train_task.max_len) +
      "), the <eos> step not scored. Uniform attention would put " + fmt_spread(spread(uniform), 2) +
      " there.");
  bool all_above = true;
  for (size_t a = 0; a < arms.size(); ++a) {
    const Spread m = spread(mass[a]);
    all_above = all_above && m.min > 0.5;
    r.summary.push_back(arm_label(arms[a]) + ": mass on the expected source position " + fmt_spread(m, 2) +
                        ", within one position " + fmt_spread(spread(within_1[a]), 2) +
                        ", attention argmax on it " + fmt_spread(spread(argmax[a]), 2) + ", exact_match " +
                        fmt_spread(spread(exact[a]), 2) + " (over " + std::to_string(seeds.size()) + " seed" +
                        (seeds.size() == 1 ? "" : "s") + ")");
  }
  r.summary.push_back(
      std::string(all_above ? "shown" : "NOT shown at this budget") +
      ": both models put more than half of their attention mass on the expected position in every "
      "seed (threshold 0.5)");

  r.sections.push_back(
      "### Mass on the expected source position, per cross-attention layer and head\n\n"
      "The same teacher-forced pass, each head of each map over the source scored alone (the summary's "
      "number averages the last layer's heads first).\n\n" +
      heads.to_markdown({}));

  Figure f;
  f.file = "attention_mass.png";
  f.title = "reverse: attention mass on the expected source position (mean, min-max over seeds)";
  f.x_label = "output position j (expected source position S-1-j)";
  f.y_label = "attention mass";
  for (size_t a = 0; a < arms.size(); ++a) {
    Series line{arm_label(arms[a]), {}, {}, {}, {}};
    size_t positions = 0;
    for (const auto& per_seed : mass_at[a]) positions = std::max(positions, per_seed.size());
    for (size_t j = 0; j < positions; ++j) {
      std::vector<double> values;
      for (const auto& per_seed : mass_at[a])
        if (j < per_seed.size()) values.push_back(per_seed[j]);
      const Spread sp = spread(values);
      line.x.push_back(double(j));
      line.y.push_back(sp.mean);
      if (seeds.size() > 1) line.y_lo.push_back(sp.min), line.y_hi.push_back(sp.max);
    }
    f.series.push_back(line);
  }
  r.figures.push_back(f);
  return r;
}

}  // namespace tapegrad::experiment::detail
