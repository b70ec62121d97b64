// The harness every experiment runs on, one of each: the training options of an arm, a logged training
// run, the seeds an arm runs with, and the held-out examples it is scored on. An experiment file holds
// only what it measures; how a run is set up, trained, seeded and scored on fresh data is written here.
#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "experiments/harness.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/runtime.hpp"

namespace tapegrad::experiment::detail {

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

train::Session start_run(const train::TrainOptions& options, const std::string& what, int index, int total,
                         const Callbacks& cb) {
  train::Session s = train::make_session(options);
  if (cb.log)
    cb.log("[" + std::to_string(index) + "/" + std::to_string(total) + "] " + what + ": " +
           std::to_string(s.model->parameter_count()) + " parameters, " + std::to_string(options.steps) +
           " steps");
  return s;
}

void train_run(Trained& t, const std::string& what, int index, int total, const Callbacks& cb) {
  // The final loss as the mean of the last steps: one batch's loss alone is noisy.
  std::vector<double> losses;
  const int64_t steps = t.session.options.steps;
  train::train(
      t.session,
      [&](const train::StepLog& l) {
        losses.push_back(l.loss);
        t.seconds = l.seconds;
        if (cb.on_step) cb.on_step({what, index, total, l.step, steps, l.loss, l.seconds});
      },
      nullptr);
  const size_t tail = std::min<size_t>(losses.size(), 50);
  t.train_loss = 0;
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) t.train_loss += losses[i] / double(tail);
}

Trained train_logged(const train::TrainOptions& options, const std::string& what, int index, int total,
                     const Callbacks& cb) {
  Trained t{start_run(options, what, index, total, cb)};
  train_run(t, what, index, total, cb);
  return t;
}

void run_jobs(size_t count, int jobs, int threads, const std::function<void(size_t)>& work) {
  if (jobs <= 1) {
    for (size_t i = 0; i < count; ++i) work(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::mutex failure_guard;
  std::exception_ptr failure;
  auto lane = [&] {
    for (size_t i; (i = next++) < count;) {
      {
        const std::lock_guard lock(failure_guard);
        if (failure) return;  // stop starting runs once one has failed
      }
      std::thread([&, i] {
        try {
          if (threads > 0) runtime::set_num_threads(threads);  // this thread's OpenMP team size
          work(i);
        } catch (...) {
          const std::lock_guard lock(failure_guard);
          if (!failure) failure = std::current_exception();
        }
      }).join();
    }
  };
  std::vector<std::thread> lanes;
  for (int j = 0; j < jobs && size_t(j) < count; ++j) lanes.emplace_back(lane);
  for (std::thread& t : lanes) t.join();
  if (failure) std::rethrow_exception(failure);
}

Callbacks serialized(const Callbacks& cb) {
  auto guard = std::make_shared<std::mutex>();
  Callbacks out;
  if (cb.log)
    out.log = [guard, log = cb.log](const std::string& line) {
      const std::lock_guard lock(*guard);
      log(line);
    };
  if (cb.on_step)
    out.on_step = [guard, on_step = cb.on_step](const Progress& p) {
      const std::lock_guard lock(*guard);
      on_step(p);
    };
  return out;
}

std::vector<uint64_t> seed_list(const Options& opts) {
  const int n = opts.seeds > 0 ? opts.seeds : (opts.quick ? 1 : 3);
  std::vector<uint64_t> seeds;
  for (int i = 0; i < n; ++i) seeds.push_back(opts.seed + uint64_t(i));
  return seeds;
}

std::vector<data::Example> held_out(const data::Task& task, uint64_t seed, uint64_t stream, int64_t count) {
  // A generator of its own: training batches come from the run's generator, seeded by (seed, step).
  Generator gen = Generator::derive(seed, stream);
  return task.sample_many(gen, count);
}

}  // namespace tapegrad::experiment::detail
