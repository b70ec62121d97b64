// `tapegrad experiment NAME`: the experiments that measure the claims (bottleneck, long-range,
// positional, parallelism); the logic lives in the library (tapegrad/experiment.hpp), this file parses
// options and prints progress, the table and the summary.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/experiment.hpp"

namespace tapegrad::cli {

Runner add_experiment(CLI::App& app) {
  struct Args {
    std::string name;
    experiment::Options o;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("experiment",
                                 "Train small models side by side and measure the claims of the seq2seq path.\n"
                                 "Example: tapegrad experiment bottleneck --out runs/bottleneck");
  std::string footer = "Experiments:\n";
  for (const auto& n : experiment::names()) footer += "  " + n + ": " + experiment::description(n) + ".\n";
  footer +=
      "\nEvery arm of an experiment uses the same seed (the same batches) and the same step budget, and is scored "
      "by greedy decoding on fresh held-out examples (exact_match and token_accuracy, fractions). The table and "
      "a summary (with the thresholds it applies) are printed; --out DIR also writes DIR/results.csv and "
      "DIR/report.txt.";
  sub->footer(footer);
  sub->add_option("name", a->name, "bottleneck | long-range | positional | parallelism | gradient-path")->required();
  sub->add_option("--steps", a->o.steps,
                  "Training steps per arm (parallelism: timed steps per point); default: the experiment's own");
  add_seed_option(sub, &a->o.seed, "Seed shared by every arm");
  sub->add_option("--threads", a->o.threads, "Kernel threads (default: all cores); parallelism runs 1 and this many")
      ->check(int_range(1, 1024));
  sub->add_option("--out", a->o.out_dir, "Directory for results.csv and report.txt");
  sub->add_flag("--quick", a->o.quick, "Tiny models, lengths and budgets: a first look in seconds");
  return [a] {
    experiment::validate(a->name, a->o);
    if (a->o.threads > 0) runtime::set_num_threads(a->o.threads);
    std::printf("experiment %s%s: %s\n", a->name.c_str(), a->o.quick ? " (quick)" : "",
                experiment::description(a->name).c_str());
    std::printf("threads %d, isa %s, seed %llu\n", runtime::num_threads(), runtime::active_isa().c_str(),
                (unsigned long long)a->o.seed);
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
    if (!a->o.out_dir.empty()) std::printf("results.csv, report.txt: %s\n", a->o.out_dir.c_str());
    return 0;
  };
}

}  // namespace tapegrad::cli
