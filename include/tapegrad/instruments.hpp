/// @file
/// Instruments for seeing backprop work, all built on TapeObserver (autograd.hpp), so they add no
/// state to ops and see exactly what a step does:
///
/// ```
///   TapeRecorder  one row per tape entry of a step: op, output shape, where its inputs come from,
///                 bytes it keeps alive for backward, forward and backward time, the norm of the
///                 gradient that flowed into its output; the critical path (the longest chain of
///                 dependent entries); the graph as Graphviz DOT and as JSON.
///   OpProfile     time per op kind over many steps, forward and backward, with FLOPs of matmul and
///                 linear for achieved GFLOP/s.
///   AnomalyMode   checks every op's output in forward and every gradient in backward for NaN/Inf and
///                 throws NonFiniteError at the first, naming the op, the tape entry, the step, the
///                 shapes and min/max/mean of each input.
/// ```
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tapegrad/autograd.hpp"

namespace tapegrad {

/// What TapeRecorder saw of one tape entry.
struct TapeRow {
  int64_t index = 0;   ///< position in the recorded step, from 0
  OpKind op{};         ///< the entry's op
  Shape output_shape;  ///< its output's shape
  /// Per input: a parameter's name, "#k" for the entry that produced it, or "input".
  std::vector<std::string> inputs;
  std::vector<int64_t> input_entries;  ///< k for "#k", -1 otherwise
  int64_t saved_bytes = 0;  ///< storages this entry keeps alive, each counted at the first entry holding it
  double forward_us = 0;    ///< from the previous entry's recording to this one's
  double backward_us = 0;   ///< its closure in backward (0 if no gradient reached it)
  double grad_norm = -1;    ///< L2 norm of d(output) in backward; -1 if no gradient reached it
  int64_t depth = 0;        ///< 1 + the deepest entry among its inputs' producers
};

/// Watches one step (construct it, open an ObserveScope, run forward and backward). Storages of
/// parameters (named leaves) are not counted as saved: they live whether or not a step runs. Its
/// rows are those of the tape current at its construction (the step's): the tapes a closure records
/// on for itself (checkpoint's first call and its recomputation in backward) add no rows, their
/// time falls to the entry that opened them.
class TapeRecorder : public TapeObserver {
 public:
  /// `resident`: tensors that live whether or not a step runs (a model's buffers, such as sin/cos
  /// tables); their storages are never counted as saved, also when an entry reads a view of them.
  explicit TapeRecorder(const std::vector<Tensor>& resident = {});
  void recorded(const Tape& tape, size_t index) override;
  void before_backward(const Tape& tape, size_t index, const Tensor& grad_output) override;
  void after_backward(const Tape& tape, size_t index) override;

  /// One row per entry recorded while watching, in tape order.
  const std::vector<TapeRow>& rows() const { return rows_; }
  /// The allocator's bytes in use grew by this much from the recorder's construction to the last
  /// entry's recording: what forward actually kept, to compare with saved_bytes().
  int64_t forward_growth_bytes() const { return bytes_at_last_record_ - bytes_at_start_; }
  int64_t saved_bytes() const;    ///< the sum of the rows'
  int64_t critical_path() const;  ///< the deepest row's depth
  /// Graphviz DOT: one node per entry labelled op and shape, parameter leaves by name, edges for inputs.
  std::string dot() const;
  /// {"entries": [{"index", "op", "output_shape", "inputs", "input_entries", "saved_bytes",
  /// ```
  ///   "forward_us", "backward_us", "grad_norm", "depth"}, ...], "saved_bytes", "critical_path"}
  /// ```
  /// (grad_norm null where no gradient reached the entry).
  std::string json() const;

 private:
  using Clock = std::chrono::steady_clock;
  const Tape* tape_;  ///< the tape watched
  std::vector<TapeRow> rows_;
  size_t base_ = SIZE_MAX;  ///< tape index of rows_[0]
  std::unordered_map<const TensorImpl*, int64_t> producer_;
  std::unordered_set<const Storage*> saved_;
  Clock::time_point last_, backward_start_;
  int64_t bytes_at_start_ = 0, bytes_at_last_record_ = 0;
};

/// True when every element of a floating tensor is finite (integer tensors: always). One pass that
/// stops at the first NaN or infinity; what anomaly mode and the trainer's non-finite stop use.
bool all_finite(const Tensor& t);

/// FLOPs of one forward of a matmul or linear entry (2 * output elements * inner dimension), or of
/// a feed_forward_relu entry (its two GEMMs); 0 for other ops. Backward does twice that.
double forward_flops(const TapeEntry& entry);

/// Time per op kind, accumulated over every step it watches. The entries of a tape a closure
/// records on for itself (checkpoint's first call and recomputation) count as the ops they run, and
/// the entry that opened it keeps only the time left over, so nothing is counted twice.
class OpProfile : public TapeObserver {
 public:
  /// One op kind's totals.
  struct Row {
    int64_t calls = 0;  ///< entries recorded
    /// Seconds in forward (from the previous entry's recording to this one's) and in its backward closures.
    /// @{
    double forward_s = 0, backward_s = 0;
    /// @}
    double flops = 0;  ///< forward + backward
  };
  OpProfile();
  void recorded(const Tape& tape, size_t index) override;
  void before_backward(const Tape& tape, size_t index, const Tensor& grad_output) override;
  void after_backward(const Tape& tape, size_t index) override;
  /// Charges the held-back gradient work to the op whose entry began it.
  void deferred_settled(const Tape& tape, size_t index) override;
  /// Starts a step's forward clock (time before an op is charged to that op otherwise).
  void start_step() { last_ = Clock::now(); }
  /// The totals, indexed by OpKind.
  const std::array<Row, kOpCount>& rows() const { return rows_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::array<Row, kOpCount> rows_{};
  Clock::time_point last_, backward_start_;
};

/// Anomaly mode: while active, the first non-finite op output (forward) or gradient (backward)
/// throws NonFiniteError: "anomaly in forward: log at tape entry #3 of 4 (step 7) produced a
/// non-finite output f32[4]; inputs: #2 f32[4] min -1 max 2 mean 0.5". Costs one pass over every
/// output and gradient while on; nothing when off.
class AnomalyMode : public TapeObserver {
 public:
  AnomalyMode();            ///< Starts watching this thread's tapes.
  ~AnomalyMode() override;  ///< Stops watching.
  /// The training step named in messages (-1: none).
  void set_step(int64_t step) { step_ = step; }
  void recorded(const Tape& tape, size_t index) override;
  void after_backward(const Tape& tape, size_t index) override;

 private:
  ObserveScope scope_;
  int64_t step_ = -1;
};

}  // namespace tapegrad
