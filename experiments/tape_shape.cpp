// The shape of one training step as the tape records it: how many entries, the critical path (the
// longest chain of entries each waiting for the one before: TapeRecorder::critical_path) and the work
// (FLOPs), hence the parallel width, the FLOPs available per dependent level. What gradient-path and
// parallelism report beside their measurements; a property of the model and the length, not of this
// machine's cores.
#include <algorithm>

#include "experiments/harness.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/instruments.hpp"

namespace tapegrad::experiment::detail {

namespace {

// Views and copies move data but compute nothing.
bool moves_only(OpKind op) {
  return op == OpKind::permute || op == OpKind::reshape || op == OpKind::contiguous || op == OpKind::concat ||
         op == OpKind::narrow || op == OpKind::embedding;
}

// Forward FLOPs of one entry under the convention stated in tape_shape's comment.
double entry_flops(const TapeEntry& e) {
  if (e.op == OpKind::matmul || e.op == OpKind::linear) return forward_flops(e);
  if (moves_only(e.op)) return 0;
  double largest = double(e.output.numel());
  for (const Tensor& in : e.inputs)
    if (in.defined()) largest = std::max(largest, double(in.numel()));
  return largest;
}

// The tape recorder plus the work of every entry it sees.
class WorkRecorder : public TapeRecorder {
 public:
  explicit WorkRecorder(const std::vector<Tensor>& resident) : TapeRecorder(resident) {}
  void recorded(const Tape& tape, size_t index) override {
    TapeRecorder::recorded(tape, index);
    forward_flops_ += entry_flops(tape.entries()[index]);
  }
  double forward_flops_total() const { return forward_flops_; }

 private:
  double forward_flops_ = 0;
};

}  // namespace

double TapeShape::parallel_width() const {
  return critical_path > 0 ? work_flops / (2.0 * double(critical_path)) : 0;
}

TapeShape record_step(train::Session& session, const data::Batch& batch) {
  WorkRecorder recorder(session.model->buffers());
  {
    ObserveScope scope(recorder);
    train::train_step(session, batch);
  }
  if (recorder.rows().empty()) throw Error("experiment: a training step recorded no tape entries");
  TapeShape shape;
  shape.entries = int64_t(recorder.rows().size());
  shape.critical_path = recorder.critical_path();
  shape.work_flops = 3 * recorder.forward_flops_total();  // backward: twice the forward
  return shape;
}

TapeShape tape_shape(const models::ModelConfig& config, const std::string& task, int length,
                     int64_t batch_size, uint64_t seed) {
  models::ModelConfig c = config;
  c.max_len = std::max<int64_t>(config.max_len, length + 2);  // room for <bos> + target + <eos>
  const train::TrainOptions o = run_options(c, task, {length, length, 10}, 1, batch_size, 0, Recipe{}.lr, seed, 0);
  train::Session s = train::make_session(o);
  return record_step(s, s.batch_for_step(1));
}

}  // namespace tapegrad::experiment::detail
