// Inspection subcommands: info (machine and kernel path), gradcheck (the op registry), tape (a dump).
#include <unistd.h>

#include <cstdio>
#include <regex>

#include "cli.hpp"
#include "tapegrad/op_checks.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/tapegrad.hpp"

namespace tapegrad::cli {

bool stdout_is_tty() { return isatty(fileno(stdout)) != 0; }

Runner add_info(CLI::App& app) {
  app.add_subcommand("info", "Print the instruction set in use, thread count and cache sizes");
  return [] {
    const auto c = runtime::cache_sizes();
    std::string avail;
    for (const auto& isa : runtime::available_isas()) avail += (avail.empty() ? "" : ",") + isa;
    std::printf("tapegrad %s\n", version());
    std::printf("isa: %s (available: %s; TAPEGRAD_ARCH forces a lower one)\n", runtime::active_isa().c_str(),
                avail.c_str());
    std::printf("threads: %d (TAPEGRAD_THREADS or --threads)\n", runtime::num_threads());
    std::printf("cache: L1d %lld KiB, L2 %lld KiB, L3 %lld KiB\n", (long long)(c.l1d / 1024),
                (long long)(c.l2 / 1024), (long long)(c.l3 / 1024));
    return 0;
  };
}

Runner add_gradcheck(CLI::App& app) {
  auto* sub = app.add_subcommand("gradcheck",
                                 "Check every registered op's gradient against central finite differences in float64; "
                                 "one row per case; exit 1 if any fails");
  auto filter = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  auto order = std::make_shared<int>(1);
  sub->add_option("--filter", *filter, "Only cases whose name matches this regular expression");
  sub->add_option("--order", *order,
                  "1: gradients against finite differences; 2: gradients of gradients (create_graph) against "
                  "finite differences of the gradient")
      ->check(CLI::Range(1, 2));
  sub->add_flag("-v,--verbose", *verbose, "Print the worst element of every case");
  return [filter, verbose, order] {
    const std::regex re(filter->empty() ? ".*" : *filter);
    int failed = 0, ran = 0;
    std::printf("%-28s %-34s %12s %12s  %s\n", "op", "shapes", "max_abs_err", "max_rel_err", "result");
    for (const OpCheck& check : op_checks()) {
      if (!std::regex_search(check.name, re)) continue;
      ++ran;
      GradcheckResult r;
      try {
        r = run_op_check(check, *order);
      } catch (const Error& e) {
        r.ok = false;
        r.message = e.what();
      }
      failed += !r.ok;
      std::printf("%-28s %-34s %12.3e %12.3e  %s\n", check.name.c_str(), check.shapes.c_str(), r.max_abs_error,
                  r.max_rel_error, r.ok ? "PASS" : "FAIL");
      if (!r.ok || *verbose) std::printf("    %s\n", r.message.c_str());
    }
    std::printf("%d checks, %d passed, %d failed\n", ran, ran - failed, failed);
    return failed ? 1 : 0;
  };
}

}  // namespace tapegrad::cli
