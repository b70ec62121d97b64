// `tapegrad experiment NAME`: the experiments that measure the claims (bottleneck, long-range,
// positional, parallelism); the logic lives in the library (tapegrad/experiment.hpp), this file parses
// options, prints progress, the table and the summary, and draws the report's figures into --out.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli.hpp"
#include "figures.hpp"
#include "tapegrad/error.hpp"
#include "experiments/experiment.hpp"
#include "tapegrad/runtime.hpp"

namespace tapegrad::cli {

namespace {

// Every figure of the report as DIR/<file>; the good ones are drawn even when one is bad, then the
// first bad one is reported (results.csv and the reports are already written).
void draw_figures(const experiment::Report& r, const std::string& dir) {
  std::printf("results.csv, report.txt, report.md: %s\n", dir.c_str());
  std::string first_error;
  size_t failed = 0;
  for (const experiment::Figure& f : r.figures) {
    try {
      draw_figure(f, dir + "/" + f.file);
      std::printf("figure: %s/%s\n", dir.c_str(), f.file.c_str());
    } catch (const Error& e) {
      if (failed++ == 0) first_error = e.what();
    }
  }
  if (failed > 0)
    throw Error("experiment " + r.name + ": " + first_error +
                (failed > 1 ? " (and " + std::to_string(failed - 1) + " more figures not drawn)" : ""));
}

}  // namespace

Runner add_experiment(CLI::App& app) {
  struct Args {
    std::string name;
    experiment::Options o;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("experiment",
                         "Train small models side by side and measure the claims of the seq2seq path.\n"
                         "Example: tapegrad experiment bottleneck --out runs/bottleneck");
  std::string footer = "Experiments:\n";
  for (const auto& n : experiment::names()) footer += "  " + n + ": " + experiment::description(n) + ".\n";
  footer +=
      "\nEvery arm of an experiment uses the same seeds (the same batches) and the same step budget, one "
      "run per seed, and is scored by greedy decoding on fresh held-out examples (exact_match and "
      "token_accuracy, fractions). The table (the mean and min-max over seeds) and a summary (with the "
      "thresholds it applies) are printed; --out DIR also writes DIR/results.csv (one row per seed), "
      "DIR/report.txt, DIR/report.md and the report's figures as PNG files linked from report.md.";
  sub->footer(footer);
  std::string choices;
  for (const auto& n : experiment::names()) choices += (choices.empty() ? "" : " | ") + n;
  sub->add_option("name", a->name, choices)->required();
  sub->add_option(
      "--steps", a->o.steps,
      "Training steps per arm (parallelism: timed steps per point); default: the experiment's own");
  add_seed_option(sub, &a->o.seed, "First seed, shared by every arm");
  sub->add_option(
         "--seeds", a->o.seeds,
         "Runs per arm (default 3, 1 with --quick): every arm runs once per seed, with seeds --seed, "
         "--seed+1, ...")
      ->check(int_range(1, 100));
  sub->add_option("--threads", a->o.threads,
                  "Kernel threads (default: all cores); parallelism runs 1 and this many")
      ->check(int_range(1, 1024));
  sub->add_option("--jobs", a->o.jobs,
                  "bleu-vs-length: training runs at once, each with --threads kernel threads (default 1; "
                  "the results do not depend on it)")
      ->check(int_range(1, 64));
  sub->add_option("--out", a->o.out_dir,
                  "Directory for results.csv, report.txt, report.md and the PNG figures");
  sub->add_option("--corpus", a->o.corpus,
                  "bleu-vs-length: directory with train.tsv, valid.tsv and test.tsv (default data/bible-es-en)");
  sub->add_flag("--quick", a->o.quick, "Tiny models, lengths and budgets: a first look in seconds");
  sub->add_flag("--sweep", a->o.sweep,
                "Accuracy experiments: first train every recipe of the sweep (lr 5e-4, 1e-3, 2e-3; post-LN and "
                "pre-LN for a Transformer) at the first seed, choose each arm's best on a validation split, "
                "then run the chosen recipes on every seed (default: the recipes chosen by that sweep, "
                "docs/experiments.md)");
  return [a] {
    experiment::validate(a->name, a->o);
    if (a->o.threads > 0) runtime::set_num_threads(a->o.threads);
    std::printf("experiment %s%s: %s\n", a->name.c_str(), a->o.quick ? " (quick)" : "",
                experiment::description(a->name).c_str());
    std::printf("threads %d, isa %s, seed %llu", runtime::num_threads(), runtime::active_isa().c_str(),
                (unsigned long long)a->o.seed);
    if (a->o.seeds > 0) std::printf(", seeds %d", a->o.seeds);
    std::printf("\n");
    std::fflush(stdout);
    const bool tty = stdout_is_tty();
    bool live = false;  // a progress line is showing and must be ended before the next log line
    experiment::Callbacks cb;
    cb.log = [&](const std::string& line) {
      if (live) std::printf("\r\033[K");
      live = false;
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    if (tty)
      cb.on_step = [&](const experiment::Progress& p) {
        std::printf("\r\033[K  %s: step %lld/%lld", p.arm.c_str(), (long long)p.step, (long long)p.steps);
        if (!std::isnan(p.loss)) std::printf("  loss %.4f", p.loss);
        std::printf("  %.0fs", p.seconds);
        std::fflush(stdout);
        live = true;
      };
    const experiment::Report r = experiment::run(a->name, a->o, cb);
    if (live) std::printf("\r\033[K");
    std::printf("\n%s", r.to_text().c_str());
    if (a->o.out_dir.empty()) return 0;
    draw_figures(r, a->o.out_dir);
    return 0;
  };
}

}  // namespace tapegrad::cli
