// Shared pieces of the `tapegrad` command line: each subcommand registers its options on the app and
// returns a runner called after parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace tapegrad::cli {

using Runner = std::function<int()>;

Runner add_info(CLI::App& app);
Runner add_gradcheck(CLI::App& app);
Runner add_tape(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_eval(CLI::App& app);
Runner add_translate(CLI::App& app);
Runner add_attention(CLI::App& app);
Runner add_experiment(CLI::App& app);

// True when stdout is a terminal (live progress lines instead of periodic log lines).
bool stdout_is_tty();

}  // namespace tapegrad::cli
