// Batches by padded tokens with length bucketing (see token_batches.hpp).
#include "src/train/token_batches.hpp"

#include <algorithm>

#include "tapegrad/tensor.hpp"

namespace tapegrad::train {

namespace {

// The same permutation stream as batches by sequence count (trainer.cpp), and one of its own for the
// order of the batches.
constexpr uint64_t kSplitStream = 0x73706c74ull, kBatchOrderStream = 0x6f726472ull;

}  // namespace

TokenBatches::TokenBatches(const std::vector<data::Example>& examples, int64_t budget, uint64_t seed)
    : budget_(budget), seed_(seed) {
  for (const auto& e : examples) costs_.push_back(cost(e));
}

int64_t TokenBatches::cost(const data::Example& e) {
  return std::max(int64_t(e.src.size()), int64_t(e.tgt.size()) + 1);
}

std::vector<std::vector<int64_t>> TokenBatches::epoch_batches(int64_t epoch) const {
  const int64_t n = int64_t(costs_.size());
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) perm[size_t(j)] = j;
  Generator::derive(seed_ ^ kSplitStream, uint64_t(epoch)).shuffle(perm);
  std::vector<std::vector<int64_t>> batches;
  for (size_t pool_begin = 0; pool_begin < perm.size();) {
    size_t pool_end = pool_begin;
    for (int64_t tokens = 0; pool_end < perm.size() && tokens < kPoolBatches * budget_; ++pool_end)
      tokens += costs_[size_t(perm[pool_end])];
    // Stable: equal lengths keep the permutation's order, so the cut depends on nothing else.
    std::stable_sort(perm.begin() + long(pool_begin), perm.begin() + long(pool_end), [&](int64_t a, int64_t b) {
      return costs_[size_t(a)] < costs_[size_t(b)];
    });
    std::vector<int64_t> batch;
    int64_t longest = 0;
    for (size_t k = pool_begin; k < pool_end; ++k) {
      const int64_t c = costs_[size_t(perm[k])];
      if (!batch.empty() && int64_t(batch.size() + 1) * std::max(longest, c) > budget_) {
        batches.push_back(std::move(batch));
        batch.clear();
        longest = 0;
      }
      batch.push_back(perm[k]);
      longest = std::max(longest, c);
    }
    if (!batch.empty()) batches.push_back(std::move(batch));
    pool_begin = pool_end;
  }
  Generator::derive(seed_ ^ kBatchOrderStream, uint64_t(epoch)).shuffle(batches);
  return batches;
}

std::vector<int64_t> TokenBatches::batch(int64_t step) {
  const int64_t k = step - 1;  // steps taken before this one
  // Epochs hold different numbers of batches: count them up to the one holding step k.
  while (k >= epoch_first_step_.back()) {
    const int64_t epoch = int64_t(epoch_first_step_.size()) - 1;
    cached_ = epoch_batches(epoch), cached_epoch_ = epoch;
    epoch_first_step_.push_back(epoch_first_step_.back() + int64_t(cached_.size()));
  }
  const int64_t epoch =
      int64_t(std::upper_bound(epoch_first_step_.begin(), epoch_first_step_.end(), k) - epoch_first_step_.begin()) - 1;
  if (epoch != cached_epoch_) cached_ = epoch_batches(epoch), cached_epoch_ = epoch;
  return cached_[size_t(k - epoch_first_step_[size_t(epoch)])];
}

}  // namespace tapegrad::train
