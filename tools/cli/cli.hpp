// Shared pieces of the `tapegrad` command line: each subcommand registers its options on the app and
// returns a runner called after parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <cstdint>
#include <string>

namespace tapegrad::cli {

using Runner = std::function<int()>;

Runner add_info(CLI::App& app);
Runner add_gradcheck(CLI::App& app);
Runner add_tape(CLI::App& app);
Runner add_profile(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_eval(CLI::App& app);
Runner add_translate(CLI::App& app);
Runner add_attention(CLI::App& app);
Runner add_experiment(CLI::App& app);
Runner add_plot(CLI::App& app);
Runner add_score(CLI::App& app);

// Checks an option's value at parse time, so a bad value exits 2 before anything is built or written.
// Each names the option and its range, e.g. "--beam 0: expected an integer in [1, 64]".
CLI::Validator int_range(int64_t lo, int64_t hi);
CLI::Validator finite_range(double lo, double hi, bool hi_open = false);
CLI::Validator positive_number();  // finite and > 0
// An exact unsigned 64-bit integer (no sign, no rounding, no saturation), for seeds.
uint64_t parse_u64(const std::string& option, const std::string& text);
// Adds a --seed option read as an exact unsigned 64-bit integer into `*seed`.
CLI::Option* add_seed_option(CLI::App* sub, uint64_t* seed, const std::string& help);

// True when stdout is a terminal (live progress lines instead of periodic log lines).
bool stdout_is_tty();

}  // namespace tapegrad::cli
