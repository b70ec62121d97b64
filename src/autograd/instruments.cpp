// The instruments of instruments.hpp: the tape recorder (rows, critical path, DOT, JSON), the per-op
// profile and anomaly mode. They only watch the tape through TapeObserver; nothing here changes what
// a step computes.
#include "tapegrad/instruments.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <sstream>

#include "kernels/kernels.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/memory.hpp"

namespace tapegrad {

namespace {

struct Summary {
  bool finite = true;
  double min = 0, max = 0, mean = 0;
};

template <class T>
Summary summarise(const T* p, int64_t n) {
  Summary s;
  if (n == 0) return s;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(p[i]);
    s.finite &= std::isfinite(v);
    lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
  }
  s.min = lo, s.max = hi, s.mean = sum / double(n);
  return s;
}

// Finiteness, min, max and mean of a floating tensor (integer tensors: finite, no statistics).
Summary summary_of(const Tensor& t) {
  if (!t.defined() || !t.is_floating()) return {};
  const Tensor c = t.is_contiguous() ? t : t.clone();
  return c.dtype() == DType::f64 ? summarise(c.data<double>(), c.numel()) : summarise(c.data<float>(), c.numel());
}

template <class T>
bool finite_values(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

double l2_norm(const Tensor& t) {
  if (!t.defined() || !t.is_floating()) return 0;
  const Tensor c = t.is_contiguous() ? t : t.clone();
  return std::sqrt(c.dtype() == DType::f64 ? kernels::sum_squares<double>(c.numel(), c.data<double>())
                                           : double(kernels::sum_squares<float>(c.numel(), c.data<float>())));
}

bool is_parameter(const Tensor& t) { return t.is_leaf() && t.requires_grad(); }

std::string source_of(const Tensor& t, const std::unordered_map<const TensorImpl*, int64_t>& producer, int64_t* entry) {
  *entry = -1;
  if (auto it = producer.find(t.impl()); it != producer.end()) {
    *entry = it->second;
    return "#" + std::to_string(it->second);
  }
  if (!t.impl()->name.empty()) return t.impl()->name;
  return "input";
}

double micros(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

std::string describe_with_stats(const Tensor& t, const std::string& source) {
  std::ostringstream os;
  os << source << " " << t.describe();
  if (t.is_floating()) {
    const Summary s = summary_of(t);
    os << " min " << s.min << " max " << s.max << " mean " << s.mean;
  }
  return os.str();
}

// The inputs of an entry, each with its source ("#k", a parameter name or "input") and statistics.
std::string inputs_report(const Tape& tape, size_t index) {
  std::unordered_map<const TensorImpl*, int64_t> producer;
  for (size_t k = 0; k < index; ++k) producer[tape.entries()[k].output.impl()] = int64_t(k);
  std::string out;
  for (const Tensor& in : tape.entries()[index].inputs) {
    int64_t entry = -1;
    out += (out.empty() ? "" : "; ") + describe_with_stats(in, source_of(in, producer, &entry));
  }
  return out;
}

}  // namespace

bool all_finite(const Tensor& t) {
  if (!t.defined() || !t.is_floating()) return true;
  const Tensor c = t.is_contiguous() ? t : t.clone();
  return c.dtype() == DType::f64 ? finite_values(c.data<double>(), c.numel()) : finite_values(c.data<float>(), c.numel());
}

// ---- TapeRecorder -------------------------------------------------------------------------------

TapeRecorder::TapeRecorder(const std::vector<Tensor>& resident)
    : tape_(&current_tape()),
      last_(Clock::now()),
      bytes_at_start_(memory::stats().bytes_in_use),
      bytes_at_last_record_(bytes_at_start_) {
  for (const Tensor& t : resident)
    if (t.defined() && t.impl()->storage) saved_.insert(t.impl()->storage.get());
}

void TapeRecorder::recorded(const Tape& tape, size_t index) {
  if (&tape != tape_) return;
  const auto now = Clock::now();
  if (base_ == SIZE_MAX) base_ = index;
  const TapeEntry& e = tape.entries()[index];
  TapeRow row;
  row.index = int64_t(index - base_);
  row.op = e.op;
  row.output_shape = e.output.shape();
  row.forward_us = micros(now - last_);
  for (const Tensor& in : e.inputs) {
    if (!in.defined()) continue;
    int64_t k = -1;
    row.inputs.push_back(source_of(in, producer_, &k));
    row.input_entries.push_back(k);
    if (k >= 0) row.depth = std::max(row.depth, rows_[size_t(k)].depth);
  }
  row.depth += 1;
  // What this entry keeps alive: its inputs', output's and saved storages, unless a parameter's or seen.
  auto keep = [&](const Tensor& t) {
    if (!t.defined() || is_parameter(t) || !t.impl()->storage) return;
    if (saved_.insert(t.impl()->storage.get()).second) row.saved_bytes += t.impl()->storage->capacity;
  };
  for (const Tensor& in : e.inputs) keep(in);
  keep(e.output);
  for (const Tensor& t : e.saved) keep(t);
  producer_[e.output.impl()] = row.index;
  rows_.push_back(std::move(row));
  bytes_at_last_record_ = memory::stats().bytes_in_use;
  last_ = Clock::now();  // the bookkeeping above is not charged to the next op
}

void TapeRecorder::before_backward(const Tape& tape, size_t index, const Tensor& grad_output) {
  if (&tape != tape_ || base_ == SIZE_MAX || index < base_) return;
  rows_[index - base_].grad_norm = l2_norm(grad_output);
  backward_start_ = Clock::now();
}

void TapeRecorder::after_backward(const Tape& tape, size_t index) {
  if (&tape != tape_ || base_ == SIZE_MAX || index < base_) return;
  rows_[index - base_].backward_us = micros(Clock::now() - backward_start_);
}

int64_t TapeRecorder::saved_bytes() const {
  int64_t total = 0;
  for (const TapeRow& r : rows_) total += r.saved_bytes;
  return total;
}

int64_t TapeRecorder::critical_path() const {
  int64_t deepest = 0;
  for (const TapeRow& r : rows_) deepest = std::max(deepest, r.depth);
  return deepest;
}

std::string TapeRecorder::dot() const {
  std::ostringstream os;
  os << "digraph tape {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  std::unordered_map<std::string, int> leaves;  // parameter and input nodes, one per name
  for (const TapeRow& r : rows_) {
    os << "  e" << r.index << " [label=\"#" << r.index << " " << op_name(r.op) << "\\n" << to_string(r.output_shape)
       << "\"];\n";
    for (size_t j = 0; j < r.inputs.size(); ++j) {
      if (r.input_entries[j] >= 0) {
        os << "  e" << r.input_entries[j] << " -> e" << r.index << ";\n";
        continue;
      }
      const std::string& name = r.inputs[j];
      if (name == "input") {  // unnamed inputs (batch ids, masks): one node each
        os << "  in" << r.index << "_" << j << " [label=\"input\", shape=ellipse, style=dashed];\n";
        os << "  in" << r.index << "_" << j << " -> e" << r.index << ";\n";
        continue;
      }
      auto [it, fresh] = leaves.emplace(name, int(leaves.size()));
      if (fresh) os << "  p" << it->second << " [label=\"" << name << "\", shape=ellipse, color=\"#1f77b4\"];\n";
      os << "  p" << it->second << " -> e" << r.index << ";\n";
    }
  }
  os << "}\n";
  return os.str();
}

std::string TapeRecorder::json() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const TapeRow& r : rows_) {
    std::vector<int64_t> shape(r.output_shape.begin(), r.output_shape.end());
    entries.push_back({{"index", r.index},
                       {"op", op_name(r.op)},
                       {"output_shape", shape},
                       {"inputs", r.inputs},
                       {"input_entries", r.input_entries},
                       {"saved_bytes", r.saved_bytes},
                       {"forward_us", r.forward_us},
                       {"backward_us", r.backward_us},
                       {"grad_norm", r.grad_norm < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.grad_norm)},
                       {"depth", r.depth}});
  }
  return nlohmann::json{{"entries", entries}, {"saved_bytes", saved_bytes()}, {"critical_path", critical_path()}}
      .dump(1);
}

// ---- OpProfile ------------------------------------------------------------------------------------

double forward_flops(const TapeEntry& e) {
  if (e.op == OpKind::feed_forward_relu) {  // inputs x [.., in], w1 [hidden, in], w2 [out, hidden], ..
    const double hidden = double(e.inputs[1].size(0)), in = double(e.inputs[1].size(1));
    const double out = double(e.inputs[2].size(0)), rows = double(e.output.numel()) / out;
    return 2.0 * rows * hidden * (in + out);
  }
  if ((e.op != OpKind::matmul && e.op != OpKind::linear) || e.inputs.empty()) return 0;
  const Shape& a = e.inputs[0].shape();
  return 2.0 * double(e.output.numel()) * double(a.ndim() ? a[a.ndim() - 1] : 1);
}

OpProfile::OpProfile() : last_(Clock::now()) {}

void OpProfile::recorded(const Tape& tape, size_t index) {
  const auto now = Clock::now();
  Row& r = rows_[size_t(tape.entries()[index].op)];
  r.calls += 1;
  r.forward_s += std::chrono::duration<double>(now - last_).count();
  r.flops += forward_flops(tape.entries()[index]);
  last_ = Clock::now();
}

// A closure that records and walks a tape of its own (checkpoint's recomputation) nests entries inside
// its own: each clock restarts at every hook, so the nested entries are charged their own forward and
// backward time and the outer entry only what is left of it, and no second counts anything twice.
void OpProfile::before_backward(const Tape&, size_t, const Tensor&) { backward_start_ = last_ = Clock::now(); }

void OpProfile::after_backward(const Tape& tape, size_t index) {
  const TapeEntry& e = tape.entries()[index];
  Row& r = rows_[size_t(e.op)];
  const auto now = Clock::now();
  r.backward_s += std::chrono::duration<double>(now - backward_start_).count();
  r.flops += 2 * forward_flops(e);
  backward_start_ = last_ = now;
}

// Settling runs between closures, after some entry's after_backward restarted the clock.
void OpProfile::deferred_settled(const Tape& tape, size_t index) {
  const auto now = Clock::now();
  rows_[size_t(tape.entries()[index].op)].backward_s +=
      std::chrono::duration<double>(now - backward_start_).count();
  backward_start_ = last_ = now;
}

// ---- AnomalyMode ----------------------------------------------------------------------------------

AnomalyMode::AnomalyMode() : scope_(*this) {}
AnomalyMode::~AnomalyMode() = default;

void AnomalyMode::recorded(const Tape& tape, size_t index) {
  const TapeEntry& e = tape.entries()[index];
  if (all_finite(e.output)) return;
  throw NonFiniteError("anomaly in forward: " + std::string(entry_name(e)) + " at tape entry #" +
                       std::to_string(index) + " of " + std::to_string(tape.size()) +
                       (step_ >= 0 ? " (step " + std::to_string(step_) + ")" : std::string()) +
                       " produced a non-finite output " + e.output.describe() + "; inputs: " +
                       inputs_report(tape, index));
}

void AnomalyMode::after_backward(const Tape& tape, size_t index) {
  const TapeEntry& e = tape.entries()[index];
  for (size_t j = 0; j < e.inputs.size(); ++j) {
    const Tensor& in = e.inputs[j];
    if (!in.defined() || !in.requires_grad() || all_finite(in.grad())) continue;
    throw NonFiniteError("anomaly in backward: the backward of " + std::string(entry_name(e)) + " at tape entry #" +
                         std::to_string(index) + " of " + std::to_string(tape.size()) +
                         (step_ >= 0 ? " (step " + std::to_string(step_) + ")" : std::string()) +
                         " made the gradient of input " + std::to_string(j) +
                         (in.impl()->name.empty() ? std::string() : " (" + in.impl()->name + ")") + " non-finite, " +
                         in.grad().describe() + "; inputs: " + inputs_report(tape, index));
  }
}

}  // namespace tapegrad
