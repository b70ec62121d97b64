// TrainOptions <-> JSON: stored in checkpoints so that --resume and `tapegrad eval` know what was trained.
#include <nlohmann/json.hpp>

#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

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
