// `tapegrad tape` and `tapegrad profile`: the tape of one real training step, and where the time of
// many steps goes, op by op. Both run train::train_step, the trainer's own step, with an instrument
// (instruments.hpp) watching the tape, on a fresh tiny model, or on a checkpoint and one batch of
// its task (or of a --valid file).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>

#include "cli.hpp"
#include "run_options.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/instruments.hpp"
#include "tapegrad/memory.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::cli {

namespace {

// What a recorded or profiled step runs on: a model, its optimizer, the recipe and one batch.
struct StepSubject {
  std::unique_ptr<models::Seq2Seq> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  train::StepRecipe recipe;
  data::Batch batch;
  int64_t step = 1;  // the 1-based step train_step takes (a checkpoint's: the run's next)
  std::string description;
};

// The model and task options of `train`, with tiny defaults so a tape stays readable.
std::shared_ptr<RunArgs> tiny_run_args() {
  auto a = std::make_shared<RunArgs>();
  train::TrainOptions& o = a->o;
  o.model.d_model = 32, o.model.heads = 4, o.model.d_ff = 64, o.model.layers = 1, o.model.hidden = 32;
  o.batch_size = 4;
  o.task_options.min_len = 6, o.task_options.max_len = 10;
  o.warmup = 0;
  return a;
}

std::string shape_text(const Shape& s) { return to_string(s); }

StepSubject fresh_subject(train::TrainOptions o) {
  o.steps = 1, o.valid_size = 1, o.out_dir.clear(), o.resume_dir.clear();
  train::Session s = train::make_session(o);
  StepSubject subject;
  subject.batch = s.batch_for_step(1);
  subject.recipe = train::StepRecipe::from(s.options);
  subject.description = s.describe();
  subject.model = std::move(s.model);
  subject.optimizer = std::move(s.optimizer);
  return subject;
}

StepSubject checkpoint_subject(const std::string& dir, const std::string& valid, int64_t batch_size,
                               const data::TaskOptions* lengths) {
  train::LoadedModel m = train::load_checkpoint(dir);
  StepSubject subject;
  train::CheckpointExampleSource source{valid, "", std::nullopt, batch_size, m.options.seed};
  if (lengths) source.task_options = *lengths;
  std::vector<data::Example> ex = train::examples_for_checkpoint(m, source, "--checkpoint " + dir).examples;
  if (int64_t(ex.size()) > batch_size) ex.resize(size_t(batch_size));  // a TSV's first batch
  subject.batch = data::make_batch(ex);
  subject.recipe = train::StepRecipe::from(m.options);
  subject.recipe.total_steps = std::max<int64_t>(m.step + 1, m.options.steps);
  m.model->train();
  // The run's own optimizer (as training builds it) in the state the run saved, so the step shown
  // is the run's next step.
  subject.optimizer = train::make_optimizer(m.options, m.model->named_parameters());
  const io::SafetensorsFile state = io::load_safetensors(m.optimizer_path);
  train::check_training_state(state);
  train::load_optimizer_state(*subject.optimizer, state);
  subject.step = m.step + 1;
  subject.description = std::string(models::model_name(m.model->config().kind)) + " from " + dir + " (step " +
                        std::to_string(m.step) + ") with " + std::to_string(m.model->parameter_count()) +
                        " parameters, optimizer " + m.options.optimizer;
  subject.model = std::move(m.model);
  return subject;
}

// The process's peak resident set so far (the kernel's high-water mark; it never goes down).
int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;  // kilobytes on Linux
}

int64_t storage_bytes(const std::vector<Tensor>& ts) {
  int64_t total = 0;
  for (const Tensor& t : ts)
    if (t.defined() && t.impl()->storage) total += t.impl()->storage->capacity;
  return total;
}

// The width of an op column: at least `least`, and the longest of the ops' names it shows.
template <class Range, class OpOf>
int op_column(const Range& rows, OpOf op_of, int least) {
  int width = least;
  for (const auto& r : rows) width = std::max(width, int(std::strlen(op_name(op_of(r)))));
  return width;
}

void print_rows(const std::vector<const TapeRow*>& rows) {
  const int w = op_column(
      rows, [](const TapeRow* r) { return r->op; }, 15);
  std::printf("%5s  %-*s %-16s %-44s %10s %9s %9s %10s\n", "#", w, "op", "output", "inputs", "saved",
              "fwd us", "bwd us", "grad norm");
  for (const TapeRow* r : rows) {
    std::string inputs;
    for (const auto& in : r->inputs) inputs += (inputs.empty() ? "" : ", ") + in;
    if (inputs.size() > 44) inputs = inputs.substr(0, 41) + "...";
    char norm[32] = "-";
    if (r->grad_norm >= 0) std::snprintf(norm, sizeof norm, "%.3e", r->grad_norm);
    std::printf("%5lld  %-*s %-16s %-44s %10s %9.1f %9.1f %10s\n", (long long)r->index, w, op_name(r->op),
                shape_text(r->output_shape).c_str(), inputs.c_str(),
                format_bytes(double(r->saved_bytes)).c_str(), r->forward_us, r->backward_us, norm);
  }
}

// The small MLP of the README, recorded the same way (forward, backward): the tape at its simplest.
// At order 2 the backward is recorded too (grad with create_graph: the gradient's own entries follow
// the forward's), then the squared norm of that gradient is backpropagated through them, as a
// gradient penalty or a Hessian-vector product does.
void record_mlp(TapeRecorder& rec, int order) {
  Generator gen(0);
  Tensor x = Tensor::randn({4, 3}, gen);
  Tensor w1 = Tensor::randn({8, 3}, gen).requires_grad_(), b1 = Tensor::zeros({8}).requires_grad_();
  Tensor w2 = Tensor::randn({2, 8}, gen).requires_grad_(), b2 = Tensor::zeros({2}).requires_grad_();
  w1.impl()->name = "w1", b1.impl()->name = "b1", w2.impl()->name = "w2", b2.impl()->name = "b2";
  ObserveScope watch(rec);
  const Tensor loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), Tensor::from_ids({0, 1, 1, 0}, {4}));
  if (order == 1) {
    backward(loss);
    return;
  }
  const std::vector<Tensor> g = grad({loss}, {w1, b1, w2, b2}, {.create_graph = true});
  Tensor norm2 = sum(mul(g[0], g[0]));
  for (size_t i = 1; i < g.size(); ++i) norm2 = add(norm2, sum(mul(g[i], g[i])));
  backward(norm2);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  if (!(f << text)) throw IoError(path + ": cannot write");
}

}  // namespace

Runner add_tape(CLI::App& app) {
  struct Args {
    std::string checkpoint, valid, dot, json, filter, sort = "saved";
    int64_t top = 0;
    int order = 1;
  };
  auto a = std::make_shared<Args>();
  auto run = tiny_run_args();
  auto mlp = std::make_shared<bool>(true);  // --model mlp, the default, is tape's own
  auto* sub = app.add_subcommand(
      "tape",
      "Record one training step (forward, backward) and print its tape: one row per entry with its inputs, "
      "the bytes it keeps alive for backward, forward and backward time and the gradient norm; then the "
      "totals, peak memory and the critical path.\n"
      "Example: tapegrad tape --model transformer --min-len 8 --max-len 8 --dot t.dot");
  add_run_options(sub, *run);
  sub->remove_option(sub->get_option("--model"));
  sub->add_option_function<std::string>(
         "--model",
         [run, mlp](const std::string& name) {
           *mlp = name == "mlp";
           if (!*mlp) set_run_option(*run, "--model", name);
         },
         "mlp | transformer | attention-rnn | rnn")
      ->default_str("mlp");
  sub->add_option("--checkpoint", a->checkpoint, "Record a step of this checkpoint on one batch of its task");
  sub->add_option("--dot", a->dot, "Write the graph as Graphviz DOT (dot -Tsvg FILE renders it)");
  sub->add_option("--json", a->json, "Write the rows and totals as JSON");
  sub->add_option("--filter", a->filter, "Print only the rows of this op (e.g. linear)");
  sub->add_option("--top", a->top, "Print only the N rows with the largest --sort key")->check(int_range(1, 1 << 30));
  sub->add_option("--sort", a->sort, "Key of --top: saved | time")->check(CLI::IsMember({"saved", "time"}));
  sub->add_option("--order", a->order,
                  "2: record the MLP's backward too (create_graph) and backpropagate the squared norm of its "
                  "gradient, so the backward's own entries show")
      ->capture_default_str()
      ->check(CLI::IsMember({1, 2}));
  auto* lengths_given = sub->get_option("--min-len");
  return [a, run, mlp, sub, lengths_given] {
    TapeRecorder rec;
    std::string what;
    int64_t params = 0, grads = 0, optimizer_state = 0, peak = 0, before = 0, rss_growth = 0;
    std::optional<train::StepResult> step;  // a model's step (not the MLP's forward and backward)
    if (a->order == 2 && !(*mlp && a->checkpoint.empty())) {
      std::fprintf(stderr, "tapegrad tape: --order 2 records the MLP (the default --model), not a model's step\n");
      return 2;
    }
    if (*mlp && a->checkpoint.empty()) {
      record_mlp(rec, a->order);
      what = a->order == 1 ? "a 3-8-2 MLP on 4 examples"
                           : "a 3-8-2 MLP on 4 examples, order 2: forward, its backward recorded (create_graph), "
                             "then the backward of the gradient's squared norm";
    } else {
      StepSubject s;
      if (a->checkpoint.empty()) {
        s = fresh_subject(resolve_run_options(sub, *run));
      } else {
        const bool lengths = lengths_given->count() || sub->get_option("--max-len")->count();
        s = checkpoint_subject(a->checkpoint, run->o.valid, run->o.batch_size,
                               lengths ? &run->o.task_options : nullptr);
      }
      what = s.description + ", one step on a batch of " + std::to_string(s.batch.batch_size()) + " (source " +
             std::to_string(s.batch.src.size(1)) + ", target " + std::to_string(s.batch.tgt_out.size(1)) + ")";
      if (run->o.threads > 0) runtime::set_num_threads(run->o.threads);
      std::vector<Tensor> ps = s.model->parameters();
      params = storage_bytes(ps);
      memory::reset_peak();
      before = memory::stats().bytes_in_use;
      const int64_t rss_before = peak_rss_bytes();
      {
        TapeRecorder fresh(s.model->buffers());  // constructed here: it measures from the step's start
        ObserveScope watch(fresh);
        step = train::train_step(*s.model, *s.optimizer, s.recipe, s.batch, s.step);
        rec = std::move(fresh);
      }
      peak = memory::stats().peak_bytes_in_use - before;
      rss_growth = peak_rss_bytes() - rss_before;
      for (const Tensor& p : ps) grads += p.impl()->storage->capacity;  // one gradient per parameter
      std::vector<Tensor> state;
      for (const auto& [name, t] : s.optimizer->state_tensors()) state.push_back(t);
      optimizer_state = storage_bytes(state);
    }
    std::vector<const TapeRow*> rows;
    for (const TapeRow& r : rec.rows())
      if (a->filter.empty() || a->filter == op_name(r.op)) rows.push_back(&r);
    if (a->top > 0) {
      auto key = [&](const TapeRow* r) { return a->sort == "saved" ? double(r->saved_bytes) : r->forward_us + r->backward_us; };
      std::stable_sort(rows.begin(), rows.end(), [&](const TapeRow* x, const TapeRow* y) { return key(x) > key(y); });
      if (int64_t(rows.size()) > a->top) rows.resize(size_t(a->top));
    }
    std::printf("tape of %s\n", what.c_str());
    if (step)
      std::printf("step %lld: loss %.6g, learning rate %.6g, gradient norm %.6g\n", (long long)step->step, step->loss,
                  step->lr, step->grad_norm);
    print_rows(rows);
    double fwd = 0, bwd = 0;
    for (const TapeRow& r : rec.rows()) fwd += r.forward_us, bwd += r.backward_us;
    std::printf("entries: %zu (%zu shown); forward %.2f ms, backward %.2f ms in the entries\n", rec.rows().size(),
                rows.size(), fwd / 1e3, bwd / 1e3);
    std::printf("saved for backward: %s (the rows' sum; each storage counted once, parameters excluded); the "
                "allocator grew by %s during forward\n",
                format_bytes(double(rec.saved_bytes())).c_str(), format_bytes(double(rec.forward_growth_bytes())).c_str());
    if (params)
      std::printf("memory: peak %s above the step's start (allocator high-water mark); parameters %s, gradients "
                  "%s, optimizer state %s, activations saved by the tape %s; the process's peak resident set "
                  "grew by %s during the step\n",
                  format_bytes(double(peak)).c_str(), format_bytes(double(params)).c_str(),
                  format_bytes(double(grads)).c_str(), format_bytes(double(optimizer_state)).c_str(),
                  format_bytes(double(rec.saved_bytes())).c_str(), format_bytes(double(rss_growth)).c_str());
    std::printf("critical path: %lld entries (the longest chain of dependent entries)\n",
                (long long)rec.critical_path());
    if (!a->dot.empty()) write_text(a->dot, rec.dot());
    if (!a->json.empty()) write_text(a->json, rec.json());
    return 0;
  };
}

Runner add_profile(CLI::App& app) {
  auto run = tiny_run_args();
  run->o.model.d_model = 128, run->o.model.heads = 4, run->o.model.d_ff = 512, run->o.model.layers = 2;
  run->o.model.hidden = 256, run->o.batch_size = 64, run->o.task_options = {32, 32, 10};
  auto steps = std::make_shared<int64_t>(10);
  auto* sub = app.add_subcommand(
      "profile",
      "Run N training steps and print where their time goes, op by op (forward, backward, share of the "
      "step; GFLOP/s and percent of this machine's measured peak for matmul and linear), plus the "
      "optimizer and the time outside any op.\n"
      "Example: tapegrad profile --model transformer --steps 10 --threads 1");
  add_run_options(sub, *run);
  sub->add_option("--steps", *steps, "Steps to profile (after one warm-up step)")
      ->capture_default_str()
      ->check(int_range(1, 100000));
  return [run, sub, steps] {
    train::TrainOptions o = resolve_run_options(sub, *run);
    o.warmup = 0;
    StepSubject s = fresh_subject(o);
    s.recipe.total_steps = *steps + 1;
    if (o.threads > 0) runtime::set_num_threads(o.threads);
    const int threads = runtime::num_threads();
    const double peak = runtime::peak_gflops() * threads;
    train::train_step(*s.model, *s.optimizer, s.recipe, s.batch, 1);  // warm-up: fills the allocator's lists
    OpProfile profile;
    double total = 0, update = 0;
    {
      ObserveScope watch(profile);
      for (int64_t i = 0; i < *steps; ++i) {
        profile.start_step();
        const train::StepResult r = train::train_step(*s.model, *s.optimizer, s.recipe, s.batch, i + 2);
        total += r.seconds, update += r.update_seconds;
      }
    }
    const double n = double(*steps);
    std::printf(
        "profile of %s\n%lld steps of %lld sequences, %d thread%s, isa %s, measured peak %.1f GFLOP/s "
        "(%.1f per core)\n",
        s.description.c_str(), (long long)*steps, (long long)s.batch.batch_size(), threads,
        threads == 1 ? "" : "s", runtime::active_isa().c_str(), peak, peak / threads);
    struct Line {
      OpKind op;
      OpProfile::Row row;
    };
    std::vector<Line> lines;
    double in_ops = 0;
    for (int k = 0; k < kOpCount; ++k)
      if (profile.rows()[size_t(k)].calls) {
        lines.push_back({OpKind(k), profile.rows()[size_t(k)]});
        in_ops += profile.rows()[size_t(k)].forward_s + profile.rows()[size_t(k)].backward_s;
      }
    const int w = op_column(
        lines, [](const Line& l) { return l.op; }, 16);
    std::printf("%-*s %9s %10s %10s %8s %10s %8s\n", w, "op", "calls", "fwd ms", "bwd ms", "share", "GFLOP/s",
                "peak");
    std::sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
      return a.row.forward_s + a.row.backward_s > b.row.forward_s + b.row.backward_s;
    });
    for (const Line& l : lines) {
      const double secs = l.row.forward_s + l.row.backward_s;
      std::printf("%-*s %9.1f %10.3f %10.3f %7.1f%%", w, op_name(l.op), double(l.row.calls) / n,
                  l.row.forward_s / n * 1e3, l.row.backward_s / n * 1e3, 100 * secs / total);
      if (l.row.flops > 0)
        std::printf(" %10.1f %7.1f%%\n", l.row.flops / secs * 1e-9, 100 * l.row.flops / secs * 1e-9 / peak);
      else
        std::printf("\n");
    }
    const double outside = std::max(0.0, total - in_ops - update);
    std::printf("%-*s %9s %10.3f %10s %7.1f%%\n", w, "optimizer", "", update / n * 1e3, "",
                100 * update / total);
    std::printf("%-*s %9s %10.3f %10s %7.1f%%\n", w, "outside ops", "", outside / n * 1e3, "",
                100 * outside / total);
    std::printf("step: %.3f ms (mean of %lld), %.0f target tokens/s\n", total / n * 1e3, (long long)*steps,
                double(s.batch.target_tokens()) * n / total);
    return 0;
  };
}

}  // namespace tapegrad::cli
