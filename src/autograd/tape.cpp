// The tape, recording, gradient accumulation and the reverse walk (see autograd.hpp).
#include <array>
#include <sstream>
#include <vector>

#include "kernels/kernels.hpp"
#include "src/internal.hpp"
#include "tapegrad/autograd.hpp"

namespace tapegrad {

namespace {
// op_name's table, generated from the same rows as OpKind, so entry i is the name of kind i.
constexpr std::array kOpNames = {
#define TAPEGRAD_OP(name) #name,
#include "tapegrad/op_list.hpp"
#undef TAPEGRAD_OP
};
static_assert(kOpNames.size() == size_t(kOpCount), "OpKind and kOpNames come from one op list");

thread_local Tape t_default_tape;
thread_local Tape* t_current_tape = &t_default_tape;
thread_local bool t_grad_enabled = true;
thread_local std::vector<TapeObserver*> t_observers;
thread_local std::vector<std::function<void()>> t_backward_end;  // at_backward_end's queue
thread_local const Tape* t_walking = nullptr;  // the tape the running reverse walk visits (null outside one)
}  // namespace

void at_backward_end(std::function<void()> fn) {
  if (!t_walking) throw AutogradError("at_backward_end: called outside a backward pass");
  t_backward_end.push_back(std::move(fn));
}

ObserveScope::ObserveScope(TapeObserver& observer) { t_observers.push_back(&observer); }
ObserveScope::~ObserveScope() { t_observers.pop_back(); }

const char* op_name(OpKind op) { return kOpNames[size_t(op)]; }
const char* entry_name(const TapeEntry& entry) {
  return entry.name.empty() ? op_name(entry.op) : entry.name.c_str();
}

void Tape::clear() {
  entries_.clear();
  ++generation_;
}

std::string Tape::dump() const {
  std::ostringstream os;
  auto describe = [](const Tensor& t) {
    const std::string& name = t.impl()->name;
    return name.empty() ? t.describe() : name + ":" + t.describe();
  };
  for (size_t i = 0; i < entries_.size(); ++i) {
    const TapeEntry& e = entries_[i];
    os << "#" << i << " " << entry_name(e) << "(";
    for (size_t j = 0; j < e.inputs.size(); ++j) os << (j ? ", " : "") << describe(e.inputs[j]);
    os << ") -> " << e.output.describe() << "\n";
  }
  return os.str();
}

Tape& current_tape() { return *t_current_tape; }

TapeScope::TapeScope(Tape& tape) : previous_(t_current_tape) { t_current_tape = &tape; }
TapeScope::~TapeScope() { t_current_tape = previous_; }

NoGrad::NoGrad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = previous_; }

EnableGrad::EnableGrad() : previous_(t_grad_enabled) { t_grad_enabled = true; }
EnableGrad::~EnableGrad() { t_grad_enabled = previous_; }

bool grad_enabled() { return t_grad_enabled; }

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
// record and record_custom: checks the inputs' tapes are alive, marks the output, appends the entry.
void push_entry(TapeEntry entry) {
  Tape& tape = current_tape();
  for (const Tensor& in : entry.inputs) {
    if (in.defined() && in.requires_grad() && !in.is_leaf() && in.impl()->tape_generation != tape.generation())
      throw AutogradError(std::string(entry_name(entry)) + ": input " + in.describe() +
                          " was produced on a tape that has since been freed (by backward); recompute it, or "
                          "pass retain_graph=true to the earlier backward");
  }
  entry.output.impl()->requires_grad = true;
  entry.output.impl()->tape_generation = tape.generation();
  tape.push(std::move(entry));
  if (!t_observers.empty())
    for (TapeObserver* o : t_observers) o->recorded(tape, tape.size() - 1);
}
}  // namespace

void record(OpKind op, std::vector<Tensor> inputs, const Tensor& output, std::function<void(const Tensor&)> backward) {
  push_entry(TapeEntry{op, std::move(inputs), output, std::move(backward), {}});
}

void record_custom(std::string name, std::vector<Tensor> inputs, const Tensor& output,
                   std::function<void(const Tensor&)> backward) {
  if (name.empty()) throw AutogradError("record_custom: the op needs a name");
  if (!output.defined()) throw AutogradError("record_custom(" + name + "): output is undefined");
  if (output.requires_grad())
    throw AutogradError("record_custom(" + name + "): output " + output.describe() +
                        " already requires grad (a parameter, or a result recorded on the tape); compute the "
                        "forward into a new tensor under NoGrad");
  push_entry(TapeEntry{OpKind::custom, std::move(inputs), output, std::move(backward), std::move(name)});
}

// ---- writing gradients ---------------------------------------------------------------------------

namespace {
// The sole-owner rule (autograd.hpp), written once.
bool may_adopt(const TensorImpl& t, const Tensor& g) {
  return !t.grad.defined() && g.is_contiguous() && !g.requires_grad() && g.impl_ptr().use_count() == 1 &&
         g.impl()->storage.use_count() == 1;
}
}  // namespace

void accumulate_grad(const Tensor& t, const Tensor& g) {
  TensorImpl& ti = *t.impl();
  if (g.numel() != ti.shape.numel())
    throw AutogradError("backward: gradient shape " + to_string(g.shape()) + " does not match tensor " + t.describe());
  if (may_adopt(ti, g)) {
    // Same shape: share g's handle (the caller's copy dies with its backward); a reshape: view it.
    ti.grad =
        g.shape() == ti.shape ? g : make_view(g, ti.shape, contiguous_strides(ti.shape), g.impl()->offset);
    return;
  }
  if (!ti.grad.defined()) {  // a first gradient that may not be adopted: a copy in t's shape
    const Tensor copy = g.clone();
    ti.grad = g.shape() == ti.shape ? copy : make_view(copy, ti.shape, contiguous_strides(ti.shape), 0);
    return;
  }
  // Later gradients add in (when t's gradient is g's own storage, as in x + x after the first x adopted
  // dy, the elementwise add reads each element before writing it).
  const Tensor gc = g.is_contiguous() ? g : g.clone();
  detail::visit_float(ti.dtype, "backward", [&]<class T>() {
    kernels::affine<T>(gc.numel(), gc.template data<T>(), T(1), T(0), ti.grad.template data<T>(), true);
  });
}

Tensor grad_buffer(const Tensor& t, bool* fresh) {
  TensorImpl& ti = *t.impl();
  *fresh = !ti.grad.defined();
  if (*fresh) ti.grad = Tensor::empty(ti.shape, ti.dtype);
  return ti.grad;
}

Tensor grad_buffer_zeroed(const Tensor& t) {
  bool fresh = false;
  Tensor g = grad_buffer(t, &fresh);
  if (fresh)
    detail::visit_float(t.dtype(), "backward", [&]<class T>() {
      kernels::fill<T>(g.numel(), T(0), g.template data<T>());
    });
  return g;
}

// ---- the reverse walk ------------------------------------------------------------------------------

void backward(const Tensor& output, const Tensor& grad_output, bool retain_graph) {
  if (!output.defined()) throw AutogradError("backward: output is undefined");
  if (!output.requires_grad())
    throw AutogradError("backward: output " + output.describe() + " does not require grad (no input of its ops did)");
  Tape& tape = current_tape();
  if (!output.is_leaf() && output.impl()->tape_generation != tape.generation())
    throw AutogradError("backward: the tape holding the history of " + output.describe() +
                        " was already freed by an earlier backward; pass retain_graph=true to that call to go twice");
  if (grad_output.defined()) {
    if (grad_output.shape() != output.shape() || grad_output.dtype() != output.dtype())
      throw AutogradError("backward: grad_output " + grad_output.describe() + " does not match output " + output.describe());
  } else if (output.numel() != 1) {
    throw AutogradError("backward: output " + output.describe() +
                        " is not a scalar; pass a grad_output of the same shape");
  }

  NoGrad no_grad;
  // A closure may walk another tape (checkpoint recomputes onto its own), never the one being walked.
  if (t_walking == &tape) throw AutogradError("backward: called from inside another backward pass");
  accumulate_grad(output, grad_output.defined() ? grad_output.clone() : Tensor::ones(output.shape(), output.dtype()));
  // The queue of at_backward_end: emptied on the way out, even when a closure throws; an enclosing
  // walk's state is put back.
  struct Walk {
    const Tape* outer_tape = t_walking;
    std::vector<std::function<void()>> outer_queue = std::move(t_backward_end);
    explicit Walk(const Tape& t) { t_walking = &t, t_backward_end.clear(); }
    ~Walk() { t_walking = outer_tape, t_backward_end = std::move(outer_queue); }
  } walk(tape);
  auto& entries = tape.entries();
  for (size_t i = entries.size(); i-- > 0;) {
    TapeEntry& e = entries[i];
    TensorImpl& out = *e.output.impl();
    if (!out.grad.defined()) continue;  // not on a path to `output`
    const Tensor dy = out.grad;
    if (!out.retains_grad) out.grad = Tensor();  // intermediate gradients die as soon as they are used
    if (t_observers.empty()) {
      e.backward(dy);
      continue;
    }
    for (TapeObserver* o : t_observers) o->before_backward(tape, i, dy);
    e.backward(dy);
    for (TapeObserver* o : t_observers) o->after_backward(tape, i);
  }
  for (size_t i = 0; i < t_backward_end.size(); ++i) t_backward_end[i]();  // may queue more
  if (!retain_graph) tape.clear();
}

}  // namespace tapegrad
