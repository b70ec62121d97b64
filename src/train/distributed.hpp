// One rank's side of data-parallel training (implemented in distributed.cpp): shards each global
// batch, sums the loss and the gradients across ranks, and checks that the ranks stay in step.
#pragma once

#include <memory>
#include <string>

#include "tapegrad/train.hpp"

namespace tapegrad::train {

class DataParallel {
 public:
  // Null when this process was not launched by mpirun. Otherwise checks, on every rank together,
  // that the ranks were given the same options and hold the same parameters, and that every rank
  // gets at least one sequence per step (CollectiveError otherwise).
  static std::unique_ptr<DataParallel> start(Session& session);
  virtual ~DataParallel() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Step session.step + 1 on this rank's shard of its global batch, advancing session.step.
  virtual StepResult step(Session& session) = 0;
  // Compares a hash of the parameters across ranks: CollectiveError naming `when` if they differ.
  virtual void check_in_sync(const models::Seq2Seq& model, const std::string& when) = 0;

 protected:
  int rank_ = 0, size_ = 1;
};

// Rank `rank`'s shard of a global batch of `batch` sequences over `ranks` ranks: [begin, end).
// Contiguous; the first batch % ranks ranks take one sequence more.
std::pair<int64_t, int64_t> shard_range(int64_t batch, int rank, int ranks);

}  // namespace tapegrad::train
