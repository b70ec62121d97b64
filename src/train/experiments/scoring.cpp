// Accuracy experiments' runner: every arm trains through train::train once per seed with the same step
// budget and shared optimizer settings, then is scored by greedy decoding (train::evaluate) on held-out
// examples per source-length bin; the recipe sweep that picks each arm's learning rate (and layer-norm
// placement) on a validation split; and the helpers that turn scores into summary lines.
#include <algorithm>
#include <cmath>

#include "src/train/experiments/experiments_internal.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment::detail {

const std::vector<std::string> kAccuracyColumns = {
    "experiment", "task",          "arm",        "model",       "positional",   "lr",
    "norm",       "train_lengths", "eval_lengths", "steps",     "seed",         "parameters",
    "train_seconds", "train_loss", "examples",   "exact_match", "token_accuracy"};

std::string Recipe::name(bool transformer) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "lr %g", lr);
  return std::string(buf) + (transformer ? (pre_ln ? " pre-LN" : " post-LN") : "");
}

std::vector<Recipe> sweep_recipes(const Arm& arm) {
  const bool tf = arm.model.kind == models::ModelKind::transformer;
  std::vector<Recipe> r;
  for (double lr : {5e-4, 1e-3, 2e-3})
    for (bool pre : {false, true})
      if (tf || !pre) r.push_back({lr, pre});
  return r;
}

train::TrainOptions run_options(const models::ModelConfig& model, const std::string& task,
                                const data::TaskOptions& task_options, int64_t steps, int64_t batch_size,
                                int64_t warmup, double lr, uint64_t seed, int threads) {
  train::TrainOptions o;
  o.model = model;
  o.task = task;
  o.task_options = task_options;
  o.steps = steps;
  o.batch_size = batch_size;
  o.lr = lr;
  o.warmup = std::min<int64_t>(warmup, std::max<int64_t>(steps / 10, 1));
  o.seed = seed;
  o.threads = threads;
  o.valid_size = 0;  // scored by the experiment
  o.eval_every = 0;
  o.save_every = 0;
  return o;
}

Trained train_logged(const train::TrainOptions& options, const std::string& what, int index, int total,
                     const Callbacks& cb) {
  Trained t{train::make_session(options)};
  if (cb.log)
    cb.log("[" + std::to_string(index) + "/" + std::to_string(total) + "] " + what + ": " +
           std::to_string(t.session.model->parameter_count()) + " parameters, " + std::to_string(options.steps) +
           " steps");
  // The final loss as the mean of the last steps: one batch's loss alone is noisy.
  std::vector<double> losses;
  train::train(
      t.session,
      [&](const train::StepLog& l) {
        losses.push_back(l.loss);
        t.seconds = l.seconds;
        if (cb.on_step) cb.on_step({what, index, total, l.step, options.steps, l.loss, l.seconds});
      },
      nullptr);
  const size_t tail = std::min<size_t>(losses.size(), 50);
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) t.train_loss += losses[i] / double(tail);
  return t;
}

namespace {

bool is_transformer(const Arm& a) {
  return a.model.kind == models::ModelKind::transformer;
}

// Held-out examples never seen in training (training batches come from the run's own generator):
// `split` separates the sweep's validation examples from the final test examples; the same seed, task
// and bin give every arm the same examples.
enum class Split : uint64_t { test = 0x6576616cull, valid = 0x76616c69ull };

// Counts the training runs of one experiment for the progress line.
struct Counter {
  int done = 0, total = 0;
};

Trained train_arm(const Arm& arm, const Recipe& recipe, uint64_t seed, const AccuracySetup& setup,
                  int64_t steps, const Options& opts, const Callbacks& cb, Counter& count) {
  train::TrainOptions o = run_options(arm.model, arm.task, setup.train_task, steps, setup.batch_size,
                                      setup.warmup, recipe.lr, seed, opts.threads);
  o.model.norm_first = is_transformer(arm) && recipe.pre_ln;
  const std::string what = arm_label(arm.model) + " on " + arm.task + " (" + recipe.name(is_transformer(arm)) +
                           ", seed " + std::to_string(seed) + "), lengths " +
                           range_name(setup.train_task.min_len, setup.train_task.max_len);
  return train_logged(o, what, ++count.done, count.total, cb);
}

// One greedy-decoding evaluation per bin.
std::vector<train::EvalResult> score_bins(Trained& t, const Arm& arm, const AccuracySetup& setup, Split split,
                                          uint64_t seed) {
  std::vector<train::EvalResult> out;
  for (size_t b = 0; b < setup.bins.size(); ++b) {
    data::TaskOptions bo = setup.train_task;
    bo.min_len = setup.bins[b].first;
    bo.max_len = setup.bins[b].second;
    const auto task = data::make_task(arm.task, bo);
    if (task->vocab().tokens() != t.session.vocab.tokens())
      throw Error("experiment: bin " + range_name(bo.min_len, bo.max_len) + " changes the vocabulary of task " +
                  arm.task);
    uint64_t task_id = 0;
    for (char c : arm.task) task_id = task_id * 131 + uint64_t(c);
    Generator gen = Generator::derive(seed ^ uint64_t(split), task_id * 1000 + uint64_t(b));
    const auto examples = task->sample_many(gen, setup.eval_examples);
    int64_t longest = 0;
    for (const auto& e : examples) longest = std::max<int64_t>(longest, int64_t(e.tgt.size()));
    out.push_back(train::evaluate(*t.session.model, t.session.vocab, task->tokenization(), examples, 256,
                                  longest + 8, 0));
  }
  return out;
}

// The sweep: every recipe of every arm at the first seed, scored on the validation split by exact match
// averaged over the bins (ties: token accuracy). Returns the winners and adds the sweep's table.
std::vector<Recipe> sweep(const std::vector<Arm>& arms, const AccuracySetup& setup, int64_t steps,
                          const Options& opts, const Callbacks& cb, Counter& count, Report& report) {
  Table t{{"arm", "task", "recipe", "valid_exact_match", "valid_token_accuracy", "train_loss", "chosen"}, {}};
  std::vector<Recipe> winners;
  for (const Arm& arm : arms) {
    double best_em = -1, best_tok = -1;
    Recipe best;
    std::vector<std::vector<std::string>> rows;
    for (const Recipe& r : sweep_recipes(arm)) {
      Trained tr = train_arm(arm, r, opts.seed, setup, steps, opts, cb, count);
      double em = 0, tok = 0;
      for (const auto& e : score_bins(tr, arm, setup, Split::valid, opts.seed)) {
        em += e.exact_match / double(setup.bins.size());
        tok += e.token_accuracy / double(setup.bins.size());
      }
      if (em > best_em || (em == best_em && tok > best_tok)) best_em = em, best_tok = tok, best = r;
      rows.push_back({arm_label(arm.model), arm.task, r.name(is_transformer(arm)), fmt(em), fmt(tok),
                      fmt(tr.train_loss, 4), ""});
    }
    for (auto& row : rows) {
      if (row[2] == best.name(is_transformer(arm))) row.back() = "yes";
      t.add(row);
    }
    winners.push_back(best);
  }
  report.sections.push_back("## Recipe sweep\n\nEvery recipe trained for " + std::to_string(steps) +
                            " steps at seed " + std::to_string(opts.seed) +
                            ", scored on a validation split (exact match averaged over the length bins); each "
                            "arm then ran with the chosen recipe on every seed and was scored on fresh test "
                            "examples.\n\n" +
                            t.to_markdown({}));
  return winners;
}

}  // namespace

std::vector<Score> run_accuracy(const std::vector<Arm>& arms_in, const AccuracySetup& setup, const Options& opts,
                                const Callbacks& cb, Report& report) {
  const int64_t steps = opts.steps > 0 ? opts.steps : setup.steps;
  const std::vector<uint64_t> seeds = seed_list(opts);
  std::vector<Arm> arms = arms_in;
  Counter count;
  count.total = int(arms.size() * seeds.size());
  if (opts.sweep) {
    for (const Arm& a : arms) count.total += int(sweep_recipes(a).size());
    const auto winners = sweep(arms, setup, steps, opts, cb, count, report);
    for (size_t a = 0; a < arms.size(); ++a) arms[a].recipe = winners[a];
  }
  report.table.columns = kAccuracyColumns;
  std::vector<Score> scores;
  struct Extra {
    std::vector<double> train_loss;
    int64_t parameters = 0;
  };
  std::vector<Extra> extra(arms.size());
  for (size_t a = 0; a < arms.size(); ++a) {
    const Arm& arm = arms[a];
    const std::string label = arm_label(arm.model);
    for (uint64_t seed : seeds) {
      Trained t = train_arm(arm, arm.recipe, seed, setup, steps, opts, cb, count);
      const auto results = score_bins(t, arm, setup, Split::test, seed);
      extra[a].train_loss.push_back(t.train_loss);
      extra[a].parameters = t.session.model->parameter_count();
      std::string line = "    " + label + " on " + arm.task + ":";
      for (size_t b = 0; b < results.size(); ++b) {
        const auto& r = results[b];
        const std::string bin = range_name(setup.bins[b].first, setup.bins[b].second);
        scores.push_back({arm.task, label, seed, int(b), r.exact_match, r.token_accuracy});
        report.table.add({report.name, arm.task, label, models::model_name(arm.model.kind),
                          is_transformer(arm) ? nn::positional_name(arm.model.positional) : "-",
                          fmt(arm.recipe.lr, 6), is_transformer(arm) ? (arm.recipe.pre_ln ? "pre-LN" : "post-LN") : "-",
                          range_name(setup.train_task.min_len, setup.train_task.max_len), bin,
                          std::to_string(steps), std::to_string(seed),
                          std::to_string(t.session.model->parameter_count()), fmt(t.seconds, 1),
                          fmt(t.train_loss, 4), std::to_string(r.examples), fmt(r.exact_match),
                          fmt(r.token_accuracy)});
        line += "  " + bin + ": exact " + fmt(r.exact_match, 2) + " token " + fmt(r.token_accuracy, 2);
      }
      if (cb.log) cb.log(line + "  (" + fmt(t.seconds, 0) + " s)");
    }
  }

  // The printed table: one row per (task, arm, bin), mean and min-max over the seeds.
  report.aggregate = {{"task", "arm", "recipe", "eval_lengths", "seeds", "exact_match", "token_accuracy",
                       "train_loss", "parameters"},
                      {}};
  for (size_t a = 0; a < arms.size(); ++a) {
    const Arm& arm = arms[a];
    const std::string label = arm_label(arm.model);
    for (size_t b = 0; b < setup.bins.size(); ++b)
      report.aggregate.add({arm.task, label, arm.recipe.name(is_transformer(arm)),
                            range_name(setup.bins[b].first, setup.bins[b].second), std::to_string(seeds.size()),
                            fmt_spread(exact_match(scores, arm.task, label, int(b))),
                            fmt_spread(token_accuracy(scores, arm.task, label, int(b))),
                            fmt_spread(spread(extra[a].train_loss), 4), std::to_string(extra[a].parameters)});
  }

  // One figure per task: exact match against the bin's middle length, a line per arm, bars min-max.
  std::vector<std::string> tasks;
  for (const Arm& a : arms)
    if (std::find(tasks.begin(), tasks.end(), a.task) == tasks.end()) tasks.push_back(a.task);
  if (setup.bins.size() > 1)
    for (const std::string& task : tasks) {
      Figure f;
      f.file = tasks.size() == 1 ? "accuracy.png" : "accuracy-" + task + ".png";
      f.title = report.name + " on " + task + ": exact match against source length (mean, bars min-max over " +
                std::to_string(seeds.size()) + " seed" + (seeds.size() > 1 ? "s" : "") + ")";
      f.x_label = "source length (middle of the bin)";
      f.y_label = "exact match";
      for (const Arm& arm : arms) {
        if (arm.task != task) continue;
        Series s{arm_label(arm.model), {}, {}, {}, {}};
        for (size_t b = 0; b < setup.bins.size(); ++b) {
          const Spread em = exact_match(scores, task, s.label, int(b));
          s.x.push_back(0.5 * (setup.bins[b].first + setup.bins[b].second));
          s.y.push_back(em.mean);
          s.y_lo.push_back(em.min);
          s.y_hi.push_back(em.max);
        }
        f.series.push_back(std::move(s));
      }
      report.figures.push_back(std::move(f));
    }
  std::string recipes = "recipes:";
  std::vector<std::string> listed;
  for (const Arm& arm : arms) {
    const std::string one = arm_label(arm.model) + " " + arm.recipe.name(is_transformer(arm));
    if (std::find(listed.begin(), listed.end(), one) != listed.end()) continue;
    listed.push_back(one);
    recipes += (listed.size() > 1 ? "; " : " ") + one;
  }
  recipes += " (" + (opts.sweep ? std::string("chosen by the sweep below") : setup.recipe_source) + "); warm-up " +
             std::to_string(std::min<int64_t>(setup.warmup, std::max<int64_t>(steps / 10, 1))) + " steps, batch " +
             std::to_string(setup.batch_size) + ", " + std::to_string(steps) + " steps for every arm.";
  report.summary.push_back(recipes);
  return scores;
}

namespace {
Spread cell(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin,
            double Score::*field) {
  std::vector<double> v;
  for (const auto& x : s)
    if (x.task == task && x.arm == arm && x.bin == bin) v.push_back(x.*field);
  if (v.empty()) throw Error("experiment: no score for " + arm + " on " + task);
  return spread(v);
}
}  // namespace

Spread exact_match(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin) {
  return cell(s, task, arm, bin, &Score::exact_match);
}
Spread token_accuracy(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin) {
  return cell(s, task, arm, bin, &Score::token_accuracy);
}

// "copy, rnn-gru: token_accuracy 0.98 (4-8) -> 0.31 (28-32), exact_match 0.95 -> 0.00"
std::string trend(const std::vector<Score>& s, const AccuracySetup& setup, const std::string& task,
                  const std::string& arm) {
  const int last = int(setup.bins.size()) - 1;
  const std::string lo = range_name(setup.bins.front().first, setup.bins.front().second);
  const std::string hi = range_name(setup.bins.back().first, setup.bins.back().second);
  return task + ", " + arm + ": token_accuracy " + fmt_spread(token_accuracy(s, task, arm, 0), 2) + " (" + lo +
         ") -> " + fmt_spread(token_accuracy(s, task, arm, last), 2) + " (" + hi + "), exact_match " +
         fmt_spread(exact_match(s, task, arm, 0), 2) + " -> " + fmt_spread(exact_match(s, task, arm, last), 2);
}

// The bottleneck claim for one task: the vanilla model loses accuracy with length and the attention model
// keeps it. Stated thresholds, on means over seeds: vanilla drops by more than 0.2 token accuracy from the
// shortest to the longest bin, the attention model by less than half as much, and at the longest bin it
// leads by more than 0.2 and by more than the two arms' combined min-max spread.
std::string length_verdict(const std::vector<Score>& s, const AccuracySetup& setup, const std::string& task,
                           const std::string& vanilla, const std::string& attention) {
  const int last = int(setup.bins.size()) - 1;
  const Spread v0 = token_accuracy(s, task, vanilla, 0), v1 = token_accuracy(s, task, vanilla, last);
  const Spread a0 = token_accuracy(s, task, attention, 0), a1 = token_accuracy(s, task, attention, last);
  const double v_drop = v0.mean - v1.mean, a_drop = a0.mean - a1.mean, gap = a1.mean - v1.mean;
  const double noise = (v1.max - v1.min) + (a1.max - a1.min);
  const bool shown = v_drop > 0.2 && a_drop < v_drop / 2 && gap > 0.2 && gap > noise;
  return task + ": " + (shown ? "shown" : "NOT shown at this budget") + " (" + vanilla + " drops " +
         fmt(v_drop, 2) + ", " + attention + " drops " + fmt(a_drop, 2) + "; at the longest bin " + attention +
         " leads by " + fmt(gap, 2) + " against a seed spread of " + fmt(noise, 2) +
         "; thresholds: vanilla drop > 0.2, attention drop < half of it, lead > 0.2 and > the spread)";
}

}  // namespace tapegrad::experiment::detail
