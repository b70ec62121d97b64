// The `tapegrad` command-line program: subcommands over the library.
//
//   tapegrad info        instruction set in use, threads, cache sizes
//   tapegrad gradcheck   every registered op against finite differences; exit 1 if any fails
//   tapegrad tape        records a small MLP step and prints its tape
//
// Errors from the library (tapegrad::Error) become one line on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <regex>

#include "kernels/kernels.hpp"
#include "tapegrad/tapegrad.hpp"

namespace tg = tapegrad;

namespace {

int run_info() {
  const auto& c = tg::kernels::cache_info();
  std::string avail;
  for (auto isa : tg::kernels::available_isas()) avail += std::string(avail.empty() ? "" : ",") + tg::kernels::isa_name(isa);
  std::printf("tapegrad %s\n", tg::version());
  std::printf("isa: %s (available: %s)\n", tg::kernels::isa_name(tg::kernels::active_isa()), avail.c_str());
  std::printf("threads: %d\n", tg::kernels::num_threads());
  std::printf("cache: L1d %lld KiB, L2 %lld KiB, L3 %lld KiB\n", (long long)(c.l1d / 1024), (long long)(c.l2 / 1024),
              (long long)(c.l3 / 1024));
  return 0;
}

int run_gradcheck(const std::string& filter, bool verbose) {
  const std::regex re(filter.empty() ? ".*" : filter);
  int failed = 0, ran = 0;
  std::printf("%-28s %-34s %12s %12s  %s\n", "op", "shapes", "max_abs_err", "max_rel_err", "result");
  for (const tg::OpCheck& check : tg::op_checks()) {
    if (!std::regex_search(check.name, re)) continue;
    ++ran;
    tg::GradcheckResult r;
    try {
      r = tg::run_op_check(check);
    } catch (const tg::Error& e) {
      r.ok = false;
      r.message = e.what();
    }
    failed += !r.ok;
    std::printf("%-28s %-34s %12.3e %12.3e  %s\n", check.name.c_str(), check.shapes.c_str(), r.max_abs_error,
                r.max_rel_error, r.ok ? "PASS" : "FAIL");
    if (!r.ok || verbose) std::printf("    %s\n", r.message.c_str());
  }
  std::printf("%d checks, %d passed, %d failed\n", ran, ran - failed, failed);
  return failed ? 1 : 0;
}

int run_tape() {
  // A 2-layer MLP on a batch of 4: shows what the tape records and what backward produces.
  tg::Generator gen(0);
  tg::Tensor x = tg::Tensor::randn({4, 3}, gen);
  tg::Tensor w1 = tg::Tensor::randn({8, 3}, gen).requires_grad_(), b1 = tg::Tensor::zeros({8}).requires_grad_();
  tg::Tensor w2 = tg::Tensor::randn({2, 8}, gen).requires_grad_(), b2 = tg::Tensor::zeros({2}).requires_grad_();
  w1.impl()->name = "w1", b1.impl()->name = "b1", w2.impl()->name = "w2", b2.impl()->name = "b2";
  const tg::Tensor loss = tg::cross_entropy(tg::linear(tg::relu(tg::linear(x, w1, b1)), w2, b2),
                                            tg::Tensor::from_ids({0, 1, 1, 0}, {4}));
  std::printf("%s", tg::current_tape().dump().c_str());
  std::printf("loss = %.6f\n", loss.item());
  tg::backward(loss);
  std::printf("after backward: tape has %zu entries; w2.grad =\n%s\n", tg::current_tape().size(),
              w2.grad().to_string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tapegrad: a tape-based autograd engine with SIMD CPU kernels"};
  app.set_version_flag("--version", std::string("tapegrad ") + tg::version());
  app.require_subcommand(1);

  auto* info = app.add_subcommand("info", "Print the instruction set in use, thread count and cache sizes");

  std::string filter;
  bool verbose = false;
  auto* gradcheck = app.add_subcommand("gradcheck",
                                       "Check every registered op's gradient against central finite differences "
                                       "(float64); exit 1 if any fails");
  gradcheck->add_option("--filter", filter, "Only ops whose name matches this regular expression");
  gradcheck->add_flag("-v,--verbose", verbose, "Print the worst element of every check");

  auto* tape = app.add_subcommand("tape", "Record one small MLP step and print its tape");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*info) return run_info();
    if (*gradcheck) return run_gradcheck(filter, verbose);
    if (*tape) return run_tape();
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "tapegrad: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tapegrad: %s\n", e.what());
    return 2;
  }
  return 0;
}
