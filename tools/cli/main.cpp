// The `tapegrad` command-line program.
//
//   tapegrad train       train a seq2seq model on a built-in task or TSV files; checkpoints, CSV curves
//   tapegrad eval        exact-match and token accuracy of a checkpoint on a task or a TSV file
//   tapegrad translate   decode lines from stdin (or arguments) with a checkpoint
//   tapegrad score       corpus BLEU and chrF2 of a hypothesis file against reference files
//   tapegrad attention   attention heatmaps of a checkpoint on one input (PNG and text)
//   tapegrad experiment  measure the claims: bottleneck, long-range, positional, parallelism
//   tapegrad plot        training curves of run directories (metrics.csv) as a PNG
//   tapegrad gradcheck   every registered op against finite differences; exit 1 if any fails
//   tapegrad tape        records one training step of any model and prints its tape (DOT, JSON too)
//   tapegrad profile     time per op over N training steps, GFLOP/s against the measured peak
//   tapegrad info        instruction set in use, threads, cache sizes
//
// Errors (tapegrad::Error and bad options) become one line on stderr and exit code 2; a training run
// stopped by a non-finite loss or gradient exits 3.
#include <cstdio>
#include <new>
#include <stdexcept>
#include <vector>

#include "cli.hpp"
#include "tapegrad/tapegrad.hpp"

int main(int argc, char** argv) {
  namespace cli = tapegrad::cli;
  CLI::App app{"tapegrad: a tape-based autograd engine with SIMD CPU kernels, and the seq2seq models it trains"};
  app.set_version_flag("--version", std::string("tapegrad ") + tapegrad::version());
  app.require_subcommand(1);
  const std::vector<std::pair<CLI::App*, cli::Runner>> commands = [&] {
    std::vector<std::pair<CLI::App*, cli::Runner>> c;
    for (auto add : {cli::add_train, cli::add_eval, cli::add_translate, cli::add_score, cli::add_attention, cli::add_experiment, cli::add_plot,
                     cli::add_gradcheck, cli::add_tape, cli::add_profile, cli::add_info}) {
      const size_t before = app.get_subcommands({}).size();
      cli::Runner r = add(app);
      c.emplace_back(app.get_subcommands({}).at(before), std::move(r));
    }
    return c;
  }();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tapegrad: %s\n", e.what());
    return 2;
  }
  const char* running = "";
  try {
    for (const auto& [sub, run] : commands)
      if (sub->parsed()) {
        running = sub->get_name().c_str();
        return run();
      }
  } catch (const tapegrad::NonFiniteError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tapegrad: %s\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    // Tensor storage reports its own OutOfMemory with the bytes; this is any other allocation.
    std::fflush(stdout);
    std::fprintf(
        stderr,
        "tapegrad %s: out of memory (an allocation outside tensor storage failed; try smaller sizes)\n",
        running);
    return 2;
  } catch (const std::length_error& e) {  // a container asked for more than max_size(): a size out of range
    std::fflush(stdout);
    std::fprintf(stderr, "tapegrad %s: a size is too large to allocate (%s)\n", running, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tapegrad: %s\n", e.what());
    return 2;
  }
  return 0;
}
