// The model, task and optimisation options shared by `train`, `tape` and `profile`: one
// registration, so the three commands spell and check every option the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <string>

#include "tapegrad/train.hpp"

namespace tapegrad::cli {

// The options as CLI11 fills them; string-valued ones are parsed by resolve_run_options. Set the
// defaults (in `o` and the strings) before add_run_options, which shows them in --help.
struct RunArgs {
  train::TrainOptions o;
  std::string model = "transformer", positional = "sinusoidal", activation = "relu", cell = "gru",
              attention = "additive", schedule = "cosine", tokens = "chars";
  bool pre_ln = false, tie_embeddings = false;
  CLI::Option* dropout = nullptr;
  /// Set by load_run_config: the keys its file gave ("lr", "model.dropout"); the file's values stand
  /// unless the same option is given on the command line.
  bool from_config = false;
  std::set<std::string> config_keys;
};

// Registers --model, --task, lengths, data files, batch, optimizer, schedule, model sizes,
// --threads and --seed (not --steps, --out or the logging options, which differ per command).
void add_run_options(CLI::App* sub, RunArgs& args);
// After parsing: the strings parsed, dropout's data-dependent default, the explicitly given
// options recorded (for --resume) and everything validated. Returns args.o.
train::TrainOptions& resolve_run_options(const CLI::App* sub, RunArgs& args);
/// After parsing, before resolve_run_options: the options of `path` (a config.json that `train`
/// wrote, or any subset of its keys: train::TrainOptions::from_config_file) replace the defaults, and
/// every option given on the command line is applied again over them, so the command line wins.
/// Throws the file's Error (naming the file and the key) unchanged.
void load_run_config(CLI::App* sub, RunArgs& args, const std::string& path);

}  // namespace tapegrad::cli
