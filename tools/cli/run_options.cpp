// Registration and resolution of the options shared by train, tape and profile (run_options.hpp).
#include "run_options.hpp"

#include <cstdint>

#include "cli.hpp"

namespace tapegrad::cli {

void add_run_options(CLI::App* sub, RunArgs& a) {
  train::TrainOptions& o = a.o;
  sub->add_option("--model", a.model, "transformer | attention-rnn | rnn")->capture_default_str();
  sub->add_option("--task", o.task, "Built-in task: copy, reverse, sort, recall, rotate")
      ->capture_default_str();
  sub->add_option("--min-len", o.task_options.min_len, "Shortest task source")
      ->capture_default_str()
      ->check(int_range(1, 100000));
  sub->add_option("--max-len", o.task_options.max_len, "Longest task source")
      ->capture_default_str()
      ->check(int_range(1, 100000));
  sub->add_option("--symbols", o.task_options.symbols, "Distinct task symbols (at most 26)")
      ->capture_default_str()
      ->check(int_range(1, 26));
  sub->add_option("--train", o.train_file,
                  "TSV file of source<TAB>target lines (instead of --task); every line is data ('#' too), "
                  "blank lines are skipped and counted");
  sub->add_option("--valid", o.valid_file,
                  "Held-out TSV file (default: hold out --valid-fraction of --train)");
  sub->add_option("--valid-fraction", o.valid_fraction, "Fraction of --train held out without --valid")
      ->capture_default_str()
      ->check(finite_range(0, 1, true));
  sub->add_option("--tokens", a.tokens, "TSV tokenisation: chars | whitespace")->capture_default_str();
  sub->add_option("--batch-size", o.batch_size, "Sequences per step")
      ->capture_default_str()
      ->check(int_range(1, 1 << 20));
  sub->add_option("--optimizer", o.optimizer, "adamw | adam | sgd")->capture_default_str();
  sub->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str()->check(positive_number());
  sub->add_option("--schedule", a.schedule,
                  "Learning-rate schedule: cosine (linear warm-up to --lr, then cosine annealing to 0 at the "
                  "last step), inverse_sqrt (linear warm-up to --lr, then --lr * sqrt(warmup / step)), "
                  "constant (--lr at every step: no warm-up unless --warmup is given)")
      ->capture_default_str();
  sub->add_option("--warmup", o.warmup,
                  "Linear warm-up steps from 0 to --lr (default: 0 with --schedule constant, else " +
                      std::to_string(o.warmup) + ")")
      ->check(int_range(0, int64_t(1) << 40));
  sub->add_option("--weight-decay", o.weight_decay, "Weight decay (decoupled for adamw)")
      ->capture_default_str()
      ->check(finite_range(0, 1e3));
  sub->add_option("--momentum", o.momentum, "SGD momentum")
      ->capture_default_str()
      ->check(finite_range(0, 1, true));
  sub->add_option("--clip", o.clip_norm, "Clip gradients to this global L2 norm (0: off)")
      ->capture_default_str()
      ->check(finite_range(0, 1e30));
  sub->add_option("--label-smoothing", o.label_smoothing, "Label smoothing epsilon")
      ->capture_default_str()
      ->check(finite_range(0, 1, true));
  sub->add_option("--layers", o.model.layers, "Layers per side (encoder and decoder)")
      ->capture_default_str()
      ->check(int_range(1, INT64_MAX));
  sub->add_option("--d-model", o.model.d_model, "Model / embedding width")
      ->capture_default_str()
      ->check(int_range(1, INT64_MAX));
  sub->add_option("--heads", o.model.heads, "Attention heads (transformer)")
      ->capture_default_str()
      ->check(int_range(1, INT64_MAX));
  sub->add_option("--d-ff", o.model.d_ff, "Feed-forward width (transformer)")
      ->capture_default_str()
      ->check(int_range(1, INT64_MAX));
  a.dropout =
      sub->add_option("--dropout", o.model.dropout,
                      "Dropout probability (default: 0 for a built-in task, whose data is unlimited "
                      "and fresh every step; 0.1 for TSV data)")
          ->check(finite_range(0, 1, true));
  sub->add_option("--positional", a.positional, "sinusoidal | learned | none (transformer)")
      ->capture_default_str();
  sub->add_flag("--pre-ln", a.pre_ln, "Layer norm before each sub-layer instead of after (transformer)");
  sub->add_flag("--tie-embeddings", a.tie_embeddings,
                "One table for the source embedding, the target embedding and the output projection "
                "(logits = x E^T, no bias), as in the paper; source and target share one vocabulary, so "
                "all three are tied (transformer). Default: untied, two embeddings and an output "
                "projection with its own weight and bias");
  sub->add_option("--activation", a.activation,
                  "Feed-forward activation (transformer): relu | gelu-tanh (the tanh approximation, "
                  "PyTorch's gelu(approximate='tanh'); 'gelu' is an alias of it) | gelu-exact (x Phi(x) "
                  "with erf, PyTorch's default gelu)")
      ->capture_default_str();
  sub->add_option("--rnn-cell", a.cell, "elman | gru | lstm (rnn models)")->capture_default_str();
  sub->add_option("--hidden", o.model.hidden, "RNN hidden size")
      ->capture_default_str()
      ->check(int_range(1, INT64_MAX));
  sub->add_option("--attention", a.attention,
                  "Attention score (attention-rnn): additive (Bahdanau, v^T tanh(W_q s + W_k h)) | general "
                  "(Luong, s^T W h) | dot (Luong, s^T h, no parameters). Checkpoints from before general "
                  "existed called it dot; they load as general")
      ->capture_default_str();
  sub->add_option("--threads", o.threads, "Kernel threads (default: all cores)")->check(int_range(1, 1024));
  add_seed_option(sub, &o.seed, "Seed for initialisation, data and dropout (an unsigned 64-bit integer)");
}

train::TrainOptions& resolve_run_options(const CLI::App* sub, RunArgs& a) {
  train::TrainOptions& o = a.o;
  auto on_command_line = [&](const char* name) { return sub->get_option(name)->count() > 0; };
  // A string option is parsed from the command line, or from its default unless a config file set it.
  auto chosen = [&](const char* name) { return !a.from_config || on_command_line(name); };
  if (!a.dropout->count() && !a.config_keys.count("model.dropout"))
    o.model.dropout = o.train_file.empty() ? 0.0 : 0.1;
  for (const CLI::Option* opt : sub->get_options())
    if (opt->count() && !opt->get_lnames().empty()) o.given.insert("--" + opt->get_lnames().front());
  if (chosen("--model")) o.model.kind = models::parse_model(a.model);
  if (chosen("--positional")) o.model.positional = nn::parse_positional(a.positional);
  if (chosen("--activation")) o.model.activation = nn::parse_activation(a.activation);
  if (chosen("--rnn-cell")) o.model.cell = nn::parse_cell(a.cell);
  if (chosen("--attention")) o.model.score = nn::parse_score(a.attention);
  if (chosen("--pre-ln")) o.model.norm_first = a.pre_ln;
  if (chosen("--tie-embeddings")) o.model.tie_embeddings = a.tie_embeddings;
  if (chosen("--schedule")) o.schedule = optim::parse_schedule(a.schedule);
  if (chosen("--tokens")) o.tokenization = data::parse_tokenization(a.tokens);
  // `constant` means constant: its warm-up is 0 unless asked for. (A resumed run keeps the warm-up
  // its checkpoint stored, whatever this says.)
  if (o.schedule == optim::Schedule::constant && !on_command_line("--warmup") &&
      !a.config_keys.count("warmup"))
    o.warmup = 0;
  o.validate();
  return o;
}

void load_run_config(CLI::App* sub, RunArgs& a, const std::string& path) {
  a.o = train::TrainOptions::from_config_file(path, &a.config_keys);
  a.from_config = true;
  for (CLI::Option* opt : sub->get_options())
    if (opt->count()) opt->run_callback();
}

}  // namespace tapegrad::cli
