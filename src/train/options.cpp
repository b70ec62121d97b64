// TrainOptions <-> JSON: stored in checkpoints so that --resume and `tapegrad eval` know what was trained.
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

namespace {

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void require(bool ok, const std::string& option, const std::string& value, const std::string& expected) {
  if (!ok) throw Error(option + " " + value + ": expected " + expected);
}

void require_int(int64_t v, int64_t lo, int64_t hi, const std::string& option) {
  require(v >= lo && v <= hi, option, std::to_string(v),
          hi == INT64_MAX ? "an integer of at least " + std::to_string(lo)
                          : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// A finite number in [lo, hi] (or [lo, hi) when hi_open).
void require_real(double v, double lo, double hi, bool hi_open, const std::string& option) {
  const bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
  require(ok, option, number(v),
          "a finite number in [" + number(lo) + ", " + number(hi) + (hi_open ? ")" : "]"));
}

}  // namespace

void TrainOptions::validate() const {
  require(std::isfinite(lr) && lr > 0 && lr <= 1e3, "--lr", number(lr), "a finite number in (0, 1000]");
  require_int(steps, 0, int64_t(1) << 40, "--steps");
  require_int(batch_size, 1, int64_t(1) << 20, "--batch-size");
  require_int(warmup, 0, int64_t(1) << 40, "--warmup");
  require_real(valid_fraction, 0, 1, true, "--valid-fraction");
  require_real(clip_norm, 0, 1e30, false, "--clip");
  require_real(label_smoothing, 0, 1, true, "--label-smoothing");
  require_real(weight_decay, 0, 1e3, false, "--weight-decay");
  require_real(momentum, 0, 1, true, "--momentum");
  require_real(model.dropout, 0, 1, true, "--dropout");
  require(optimizer == "adamw" || optimizer == "adam" || optimizer == "sgd", "--optimizer", optimizer,
          "adamw, adam or sgd");
  require_int(threads, 0, 1024, "--threads");
  require_int(valid_size, 0, int64_t(1) << 24, "--valid-size");
  require_int(eval_every, 0, INT64_MAX, "--eval-every");
  require_int(log_every, 1, INT64_MAX, "--log-every");
  require_int(save_every, 0, INT64_MAX, "--save-every");
  if (train_file.empty()) data::validate_task_options(task, task_options);
  if (!resume_dir.empty() && overwrite && (out_dir.empty() || out_dir == resume_dir))
    throw Error("--overwrite: cannot replace the checkpoint being resumed (--resume " + resume_dir +
                "); pass --out NEW_DIR to continue elsewhere");
}

const std::vector<std::string> kResumableOptions = {
    "--steps", "--threads", "--log-every", "--eval-every", "--save-every", "--out", "--resume"};

namespace {

// Every option that shapes the run, with how its value reads: what a resume compares.
using Field = std::function<std::string(const TrainOptions&)>;
const std::vector<std::pair<std::string, Field>>& run_shaping_options() {
  static const std::vector<std::pair<std::string, Field>> table = {
      {"--model", [](const TrainOptions& o) { return std::string(models::model_name(o.model.kind)); }},
      {"--task", [](const TrainOptions& o) { return o.task; }},
      {"--min-len", [](const TrainOptions& o) { return std::to_string(o.task_options.min_len); }},
      {"--max-len", [](const TrainOptions& o) { return std::to_string(o.task_options.max_len); }},
      {"--symbols", [](const TrainOptions& o) { return std::to_string(o.task_options.symbols); }},
      {"--train", [](const TrainOptions& o) { return o.train_file; }},
      {"--valid", [](const TrainOptions& o) { return o.valid_file; }},
      {"--valid-fraction", [](const TrainOptions& o) { return number(o.valid_fraction); }},
      {"--tokens",
       [](const TrainOptions& o) { return std::string(data::tokenization_name(o.tokenization)); }},
      {"--batch-size", [](const TrainOptions& o) { return std::to_string(o.batch_size); }},
      {"--optimizer", [](const TrainOptions& o) { return o.optimizer; }},
      {"--lr", [](const TrainOptions& o) { return number(o.lr); }},
      {"--schedule", [](const TrainOptions& o) { return std::string(optim::schedule_name(o.schedule)); }},
      {"--warmup", [](const TrainOptions& o) { return std::to_string(o.warmup); }},
      {"--weight-decay", [](const TrainOptions& o) { return number(o.weight_decay); }},
      {"--momentum", [](const TrainOptions& o) { return number(o.momentum); }},
      {"--clip", [](const TrainOptions& o) { return number(o.clip_norm); }},
      {"--label-smoothing", [](const TrainOptions& o) { return number(o.label_smoothing); }},
      {"--layers", [](const TrainOptions& o) { return std::to_string(o.model.layers); }},
      {"--d-model", [](const TrainOptions& o) { return std::to_string(o.model.d_model); }},
      {"--heads", [](const TrainOptions& o) { return std::to_string(o.model.heads); }},
      {"--d-ff", [](const TrainOptions& o) { return std::to_string(o.model.d_ff); }},
      {"--dropout", [](const TrainOptions& o) { return number(o.model.dropout); }},
      {"--positional",
       [](const TrainOptions& o) { return std::string(nn::positional_name(o.model.positional)); }},
      {"--pre-ln", [](const TrainOptions& o) { return std::string(o.model.norm_first ? "on" : "off"); }},
      {"--activation",
       [](const TrainOptions& o) { return std::string(nn::activation_name(o.model.activation)); }},
      {"--rnn-cell", [](const TrainOptions& o) { return std::string(nn::cell_name(o.model.cell)); }},
      {"--hidden", [](const TrainOptions& o) { return std::to_string(o.model.hidden); }},
      {"--attention", [](const TrainOptions& o) { return std::string(nn::score_name(o.model.score)); }},
      {"--seed", [](const TrainOptions& o) { return std::to_string(o.seed); }},
      {"--valid-size", [](const TrainOptions& o) { return std::to_string(o.valid_size); }},
  };
  return table;
}

}  // namespace

void TrainOptions::check_resume(const TrainOptions& saved) const {
  std::string conflicts;
  for (const auto& [name, value] : run_shaping_options()) {
    if (!given.count(name)) continue;
    const std::string want = value(*this), have = value(saved);
    if (want != have)
      conflicts += (conflicts.empty() ? "" : "; ") + name + " " + want + " (checkpoint: " + have + ")";
  }
  if (conflicts.empty()) return;
  std::string allowed;
  for (const auto& n : kResumableOptions) allowed += (allowed.empty() ? "" : ", ") + n;
  throw Error("--resume " + resume_dir + ": options conflict with the checkpoint: " + conflicts +
              ". A resumed run keeps the checkpoint's options; only " + allowed + " may change");
}

std::string TrainOptions::to_json() const {
  nlohmann::json j = {
      {"model", nlohmann::json::parse(model.to_json())},
      {"task", task},
      {"task_min_len", task_options.min_len},
      {"task_max_len", task_options.max_len},
      {"task_symbols", task_options.symbols},
      {"train_file", train_file},
      {"valid_file", valid_file},
      {"tokenization", data::tokenization_name(tokenization)},
      {"valid_fraction", valid_fraction},
      {"steps", steps},
      {"batch_size", batch_size},
      {"optimizer", optimizer},
      {"lr", lr},
      {"momentum", momentum},
      {"weight_decay", weight_decay},
      {"schedule", optim::schedule_name(schedule)},
      {"warmup", warmup},
      {"clip_norm", clip_norm},
      {"label_smoothing", label_smoothing},
      {"seed", seed},
      {"threads", threads},
      {"valid_size", valid_size},
      {"eval_every", eval_every},
      {"log_every", log_every},
      {"save_every", save_every},
      {"decode_max_len", decode_max_len},
  };
  return j.dump();
}

TrainOptions TrainOptions::from_json(const std::string& text) {
  TrainOptions o;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    o.model = models::ModelConfig::from_json(j.at("model").dump());
    o.task = j.at("task").get<std::string>();
    o.task_options.min_len = j.at("task_min_len").get<int>();
    o.task_options.max_len = j.at("task_max_len").get<int>();
    o.task_options.symbols = j.at("task_symbols").get<int>();
    o.train_file = j.at("train_file").get<std::string>();
    o.valid_file = j.at("valid_file").get<std::string>();
    o.tokenization = data::parse_tokenization(j.at("tokenization").get<std::string>());
    o.valid_fraction = j.at("valid_fraction").get<double>();
    o.steps = j.at("steps").get<int64_t>();
    o.batch_size = j.at("batch_size").get<int64_t>();
    o.optimizer = j.at("optimizer").get<std::string>();
    o.lr = j.at("lr").get<double>();
    o.momentum = j.at("momentum").get<double>();
    o.weight_decay = j.at("weight_decay").get<double>();
    o.schedule = optim::parse_schedule(j.at("schedule").get<std::string>());
    o.warmup = j.at("warmup").get<int64_t>();
    o.clip_norm = j.at("clip_norm").get<double>();
    o.label_smoothing = j.at("label_smoothing").get<double>();
    o.seed = j.at("seed").get<uint64_t>();
    o.threads = j.at("threads").get<int>();
    o.valid_size = j.at("valid_size").get<int64_t>();
    o.eval_every = j.at("eval_every").get<int64_t>();
    o.log_every = j.at("log_every").get<int64_t>();
    o.save_every = j.at("save_every").get<int64_t>();
    o.decode_max_len = j.at("decode_max_len").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("training options: ") + e.what());
  }
  return o;
}

}  // namespace tapegrad::train
