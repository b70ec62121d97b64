// Batches by padded tokens (--batch-tokens), length-bucketed (internal to src/train).
//
// Each epoch visits the same seeded permutation as batches by sequence count; it is cut into pools of
// about kPoolBatches batches' worth of examples, each pool is sorted by length and cut into batches
// that fit the budget, and the order of the epoch's batches is shuffled. Sorting within pools (not the
// whole epoch) keeps batches of similar lengths together, so little is padding, while the examples
// a batch meets still change from epoch to epoch. Everything follows from (seed, epoch), so the batch
// of step s is a pure function of (seed, s) and a resumed run takes the same batches.
#pragma once

#include <cstdint>
#include <vector>

#include "tapegrad/data.hpp"

namespace tapegrad::train {

class TokenBatches {
 public:
  // Pools hold about this many batches' worth of tokens.
  static constexpr int64_t kPoolBatches = 100;

  // Batches of `examples` (only their lengths are kept); `budget` is the padded tokens a batch may hold.
  TokenBatches(const std::vector<data::Example>& examples, int64_t budget, uint64_t seed);
  // An example's padded cost per batch row: the longer of its source and its target + 1 (<bos>/<eos>).
  static int64_t cost(const data::Example& e);
  // Indices into the examples of the batch of 1-based `step`.
  std::vector<int64_t> batch(int64_t step);
  // The batches of epoch `epoch` in the order the steps take them.
  std::vector<std::vector<int64_t>> epoch_batches(int64_t epoch) const;

 private:
  std::vector<int64_t> costs_;  // cost() of each example
  int64_t budget_;
  uint64_t seed_;
  // Steps taken before each epoch computed so far (epoch_first_step_[e] for e < its size).
  std::vector<int64_t> epoch_first_step_{0};
  int64_t cached_epoch_ = -1;
  std::vector<std::vector<int64_t>> cached_;
};

}  // namespace tapegrad::train
