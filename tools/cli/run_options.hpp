// The options of `train`, registered from the option table (train::option_table()): the model, task
// and optimisation rows are shared by `train`, `tape` and `profile`, so the three commands spell and
// check every option the same way; `train` adds its own rows (length, checkpoints, logging).
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <string>

#include "tapegrad/train.hpp"

namespace tapegrad::cli {

// The options as CLI11 fills them. Set the defaults in `o` before add_run_options, which shows them
// in --help.
struct RunArgs {
  train::TrainOptions o;
  /// Set by load_run_config: the keys its file gave ("lr", "model.dropout"); the file's values stand
  /// unless the same option is given on the command line.
  std::set<std::string> config_keys;
};

// Registers the table's rows of `scope` on `sub`: each parses its value into args.o as it is read,
// with the table's range (a bad value exits 2 naming the option before anything is built).
void add_run_options(CLI::App* sub, RunArgs& args,
                     train::OptionScope scope = train::OptionScope::run);
// Sets the option `flag` of the table from command-line text, as add_run_options's options do (for a
// command that reads an option its own way first, such as tape's --model mlp); a bad value throws
// CLI::ValidationError naming the option and its range.
void set_run_option(RunArgs& args, const std::string& flag, const std::string& text);
// After parsing: dropout's and warmup's data- and schedule-dependent defaults, the explicitly given
// options recorded (for --resume) and everything validated. Returns args.o.
train::TrainOptions& resolve_run_options(const CLI::App* sub, RunArgs& args);
/// After parsing, before resolve_run_options: the options of `path` (a config.json that `train`
/// wrote, or any subset of its keys: train::TrainOptions::from_config_file) replace the defaults, and
/// every option given on the command line is applied again over them, so the command line wins.
/// Throws the file's Error (naming the file and the key) unchanged.
void load_run_config(CLI::App* sub, RunArgs& args, const std::string& path);

}  // namespace tapegrad::cli
