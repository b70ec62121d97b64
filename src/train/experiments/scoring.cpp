// Accuracy experiments' runner: every arm trains through train::train with the same seed (so the same
// batches), step budget and optimizer settings, then is scored by greedy decoding (train::evaluate) on
// held-out examples per source-length bin; plus the helpers that turn scores into summary lines.
#include <algorithm>

#include "src/train/experiments/experiments_internal.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment::detail {

const std::vector<std::string> kAccuracyColumns = {
    "experiment",    "task",         "arm",      "model",       "positional",
    "train_lengths", "eval_lengths", "steps",    "seed",        "parameters",
    "train_seconds", "train_loss",   "examples", "exact_match", "token_accuracy"};

namespace {
uint64_t mix(uint64_t a, uint64_t b) {
  return Generator(a * 0x9E3779B97F4A7C15ull ^ b).next_u64();
}
}  // namespace

std::vector<Score> run_accuracy(const std::string& name, const std::vector<Arm>& arms,
                                const AccuracySetup& setup, const Options& opts, const Callbacks& cb,
                                Table& table) {
  std::vector<Score> scores;
  const int64_t steps = opts.steps > 0 ? opts.steps : setup.steps;
  for (size_t a = 0; a < arms.size(); ++a) {
    const Arm& arm = arms[a];
    train::TrainOptions o;
    o.model = arm.model;
    o.task = arm.task;
    o.task_options = setup.train_task;
    o.steps = steps;
    o.batch_size = setup.batch_size;
    o.lr = setup.lr;
    o.warmup = std::min<int64_t>(setup.warmup, std::max<int64_t>(steps / 10, 1));
    o.seed = opts.seed;
    o.threads = opts.threads;
    o.valid_size = 0;  // scored below, per bin
    o.eval_every = 0;
    o.save_every = 0;
    train::Session s = train::make_session(o);
    const std::string label = arm_label(arm.model);
    const std::string what = label + " on " + arm.task;
    if (cb.log)
      cb.log("[" + std::to_string(a + 1) + "/" + std::to_string(arms.size()) + "] " + what + ": " +
             std::to_string(s.model->parameter_count()) + " parameters, " + std::to_string(steps) +
             " steps, lengths " + range_name(setup.train_task.min_len, setup.train_task.max_len));
    // The final loss as the mean of the last steps: one batch's loss alone is noisy.
    std::vector<double> losses;
    double seconds = 0;
    train::train(
        s,
        [&](const train::StepLog& l) {
          losses.push_back(l.loss);
          seconds = l.seconds;
          if (cb.on_step) cb.on_step({what, int(a + 1), int(arms.size()), l.step, steps, l.loss, l.seconds});
        },
        nullptr);
    const size_t tail = std::min<size_t>(losses.size(), 50);
    double train_loss = 0;
    for (size_t i = losses.size() - tail; i < losses.size(); ++i) train_loss += losses[i] / double(tail);

    std::string line = "    " + what + ":";
    for (size_t b = 0; b < setup.bins.size(); ++b) {
      data::TaskOptions bo = setup.train_task;
      bo.min_len = setup.bins[b].first;
      bo.max_len = setup.bins[b].second;
      const auto task = data::make_task(arm.task, bo);
      if (task->vocab().tokens() != s.vocab.tokens())
        throw Error("experiment " + name + ": bin " + range_name(bo.min_len, bo.max_len) +
                    " changes the vocabulary of task " + arm.task);
      // The same held-out examples for every arm: the generator depends on the seed, task and bin only.
      uint64_t task_id = 0;
      for (char c : arm.task) task_id = task_id * 131 + uint64_t(c);
      Generator gen(mix(opts.seed ^ 0x6576616cull, task_id * 1000 + uint64_t(b)));
      const auto examples = task->sample_many(gen, setup.eval_examples);
      int64_t longest = 0;
      for (const auto& e : examples) longest = std::max<int64_t>(longest, int64_t(e.tgt.size()));
      const train::EvalResult r =
          train::evaluate(*s.model, s.vocab, task->tokenization(), examples, 256, longest + 8, 0);
      scores.push_back({arm.task, label, int(b), r.exact_match, r.token_accuracy});
      table.add(
          {name, arm.task, label, models::model_name(arm.model.kind),
           arm.model.kind == models::ModelKind::transformer ? nn::positional_name(arm.model.positional) : "-",
           range_name(setup.train_task.min_len, setup.train_task.max_len), range_name(bo.min_len, bo.max_len),
           std::to_string(steps), std::to_string(opts.seed), std::to_string(s.model->parameter_count()),
           fmt(seconds, 1), fmt(train_loss, 4), std::to_string(r.examples), fmt(r.exact_match),
           fmt(r.token_accuracy)});
      line += "  " + range_name(bo.min_len, bo.max_len) + ": exact " + fmt(r.exact_match, 2) + " token " +
              fmt(r.token_accuracy, 2);
    }
    if (cb.log) cb.log(line + "  (" + fmt(seconds, 0) + " s)");
  }
  return scores;
}

const Score& find(const std::vector<Score>& s, const std::string& task, const std::string& arm, int bin) {
  for (const auto& x : s)
    if (x.task == task && x.arm == arm && x.bin == bin) return x;
  throw Error("experiment: no score for " + arm + " on " + task);
}

// "copy, rnn-gru: token_accuracy 0.98 (4-8) -> 0.31 (28-32), exact_match 0.95 -> 0.00"
std::string trend(const std::vector<Score>& s, const AccuracySetup& setup, const std::string& task,
                  const std::string& arm) {
  const int last = int(setup.bins.size()) - 1;
  const Score &a = find(s, task, arm, 0), &b = find(s, task, arm, last);
  const std::string lo = range_name(setup.bins.front().first, setup.bins.front().second);
  const std::string hi = range_name(setup.bins.back().first, setup.bins.back().second);
  return task + ", " + arm + ": token_accuracy " + fmt(a.token_accuracy, 2) + " (" + lo + ") -> " +
         fmt(b.token_accuracy, 2) + " (" + hi + "), exact_match " + fmt(a.exact_match, 2) + " -> " +
         fmt(b.exact_match, 2);
}

// The bottleneck claim for one task: the vanilla model loses accuracy with length and the attention model
// keeps it. Stated thresholds: vanilla drops by more than 0.2 token accuracy from the shortest to the
// longest bin, the attention model by less than half as much, and at the longest bin it leads by more than
// 0.2.
std::string length_verdict(const std::vector<Score>& s, const AccuracySetup& setup, const std::string& task,
                           const std::string& vanilla, const std::string& attention) {
  const int last = int(setup.bins.size()) - 1;
  const double v_drop =
      find(s, task, vanilla, 0).token_accuracy - find(s, task, vanilla, last).token_accuracy;
  const double a_drop =
      find(s, task, attention, 0).token_accuracy - find(s, task, attention, last).token_accuracy;
  const double gap =
      find(s, task, attention, last).token_accuracy - find(s, task, vanilla, last).token_accuracy;
  const bool shown = v_drop > 0.2 && a_drop < v_drop / 2 && gap > 0.2;
  return task + ": " + (shown ? "shown" : "NOT shown at this budget") + " (" + vanilla + " drops " +
         fmt(v_drop, 2) + ", " + attention + " drops " + fmt(a_drop, 2) + "; at the longest bin " +
         attention + " leads by " + fmt(gap, 2) +
         "; thresholds: vanilla drop > 0.2, attention drop < half of it, lead > 0.2)";
}

}  // namespace tapegrad::experiment::detail
