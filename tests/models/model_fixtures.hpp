// What the model tests share: a tiny model of each kind, a quick copy-task training recipe, and a
// scratch directory per test process.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <vector>
#include <string>

#include "tapegrad/train.hpp"

namespace tapegrad::test {

// A model small enough to train in seconds on one thread.
inline models::ModelConfig tiny(models::ModelKind kind, int64_t vocab) {
  models::ModelConfig c;
  c.kind = kind;
  c.vocab_size = vocab;
  c.d_model = 32, c.layers = 1, c.heads = 2, c.d_ff = 64, c.hidden = 48, c.dropout = 0.0, c.max_len = 64;
  return c;
}

// Quick training on the copy task with `lengths`: one thread, no evaluation during training.
inline train::TrainOptions copy_training(const models::ModelConfig& model, data::TaskOptions lengths, int64_t steps,
                                         int64_t valid_size) {
  train::TrainOptions o;
  o.model = model;
  o.task = "copy";
  o.task_options = lengths;
  o.steps = steps, o.batch_size = 32, o.lr = 3e-3, o.warmup = 30, o.schedule = optim::Schedule::cosine;
  o.valid_size = valid_size, o.eval_every = 0, o.threads = 1;
  return o;
}

// An empty directory under the temporary directory, unique to this process.
// A fresh directory for this process, removed when the test program exits (however its tests ended).
inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  struct RemovedAtExit {
    std::vector<fs::path> dirs;
    ~RemovedAtExit() {
      std::error_code ignored;
      for (const fs::path& d : dirs) fs::remove_all(d, ignored);
    }
  };
  static RemovedAtExit made;
  const fs::path p = fs::temp_directory_path() / ("tapegrad-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  made.dirs.push_back(p);
  return p.string();
}

}  // namespace tapegrad::test
