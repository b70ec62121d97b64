// Registration and resolution of the options of train, tape and profile (run_options.hpp): one loop
// over the option table, so the flag, help, default and range are the library's.
#include "run_options.hpp"

#include "cli.hpp"

namespace tapegrad::cli {

namespace {

void set_row(RunArgs& a, const train::OptionSpec& row, const std::string& text) {
  try {
    row.set(a.o, text);
  } catch (const Error& e) {
    throw CLI::ValidationError(e.what());
  }
}

}  // namespace

void set_run_option(RunArgs& a, const std::string& flag, const std::string& text) {
  for (const train::OptionSpec& row : train::option_table())
    if (row.flag == flag) return set_row(a, row, text);
  throw CLI::ValidationError(flag + ": not an option of train");
}

void add_run_options(CLI::App* sub, RunArgs& a, train::OptionScope scope) {
  for (const train::OptionSpec& row : train::option_table()) {
    if (row.scope != scope) continue;
    // A value is parsed into the options as soon as CLI11 reads it (and again by load_run_config).
    auto set = [&a, &row](const std::string& text) { set_row(a, row, text); };
    const bool numeric = row.type == train::OptionType::integer || row.type == train::OptionType::real;
    const std::string help = numeric ? std::string(row.help) + "; " + row.expected() : row.help;
    if (row.type == train::OptionType::flag) {
      sub->add_flag_function(row.flag, [set](int64_t) { set("on"); }, help);
      continue;
    }
    CLI::Option* opt = sub->add_option_function<std::string>(row.flag, set, help)
                           ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                           ->type_name(row.type == train::OptionType::integer ? "INT"
                                       : row.type == train::OptionType::real  ? "NUMBER"
                                       : row.type == train::OptionType::path  ? "PATH"
                                                                              : "TEXT");
    if (row.show_default) opt->default_str(row.value(a.o));
  }
}

train::TrainOptions& resolve_run_options(const CLI::App* sub, RunArgs& a) {
  train::TrainOptions& o = a.o;
  for (const CLI::Option* opt : sub->get_options())
    if (opt->count() && !opt->get_lnames().empty()) o.given.insert("--" + opt->get_lnames().front());
  if (!o.given.count("--dropout") && !a.config_keys.count("model.dropout"))
    o.model.dropout = o.train.empty() ? 0.0 : 0.1;
  // `constant` means constant: its warm-up is 0 unless asked for. (A resumed run keeps the warm-up
  // its checkpoint stored, whatever this says.)
  if (o.schedule == optim::Schedule::constant && !o.given.count("--warmup") && !a.config_keys.count("warmup"))
    o.warmup = 0;
  // --spm-model on the command line chooses the pieces: the settings for training a piece model that
  // came from a --config file (a run's config.json records the ones it trained with) give way to it,
  // as any file key does to a flag; the same settings given as flags beside it are still refused.
  if (o.given.count("--spm-model")) {
    const train::TrainOptions defaults;
    if (!o.given.count("--vocab-size")) o.vocab_size = defaults.vocab_size;
    if (!o.given.count("--spm-type")) o.spm_type = defaults.spm_type;
    if (!o.given.count("--spm-sides")) o.spm_sides = defaults.spm_sides;
  }
  o.validate();
  return o;
}

void load_run_config(CLI::App* sub, RunArgs& a, const std::string& path) {
  a.o = train::TrainOptions::from_config_file(path, &a.config_keys);
  for (CLI::Option* opt : sub->get_options())
    if (opt->count()) opt->run_callback();
}

}  // namespace tapegrad::cli
