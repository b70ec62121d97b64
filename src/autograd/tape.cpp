// The tape, recording, gradient accumulation and the reverse walk (see autograd.hpp).
#include <array>
#include <optional>
#include <sstream>
#include <unordered_set>
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
thread_local bool t_create_graph = false;      // the running walk records the backward (create_graph)
thread_local const char* t_running = "";       // the entry whose closure is running, for error messages

// The running walk's deferred gradient parts (detail::deferred_grad), in the order first asked for.
// Each remembers the entry whose closure asked first, so observers can charge the settling to it.
struct DeferredSlot {
  const TensorImpl* tensor;
  const void* tag;
  int64_t sub;
  std::unique_ptr<detail::DeferredGrad> part;
  const Tape* tape;
  size_t entry;
};
thread_local std::vector<DeferredSlot> t_deferred;
thread_local const Tape* t_entry_tape = nullptr;  // the entry whose closure is running
thread_local size_t t_entry_index = 0;

// Settles and drops, first asked first, the deferred parts of `tensor`, or with a null tensor those
// that entries of `tape` asked for.
void settle_deferred(const TensorImpl* tensor, const Tape* tape = nullptr) {
  for (size_t i = 0; i < t_deferred.size();) {
    if (tensor ? t_deferred[i].tensor != tensor : t_deferred[i].tape != tape) {
      ++i;
      continue;
    }
    // Taken out before settling: a settle that throws leaves no half-settled part behind.
    const DeferredSlot slot = std::move(t_deferred[i]);
    t_deferred.erase(t_deferred.begin() + std::ptrdiff_t(i));
    slot.part->settle();
    for (TapeObserver* o : t_observers) o->deferred_settled(*slot.tape, slot.entry);
  }
}
}  // namespace

namespace detail {
DeferredGrad* deferred_grad(const Tensor& t, const void* tag, int64_t sub,
                            const std::function<std::unique_ptr<DeferredGrad>()>& make) {
  if (!t_walking || t_create_graph || t.is_leaf()) return nullptr;
  for (DeferredSlot& s : t_deferred)
    if (s.tensor == t.impl() && s.tag == tag && s.sub == sub) return s.part.get();
  t_deferred.push_back({t.impl(), tag, sub, make(), t_entry_tape, t_entry_index});
  return t_deferred.back().part.get();
}
}  // namespace detail

bool creating_graph() {
  return t_create_graph;
}

void at_backward_end(std::function<void()> fn) {
  if (!t_walking) throw AutogradError("at_backward_end: called outside a backward pass");
  t_backward_end.push_back(std::move(fn));
}

ObserveScope::ObserveScope(TapeObserver& observer) {
  t_observers.push_back(&observer);
}
ObserveScope::~ObserveScope() {
  t_observers.pop_back();
}

const char* op_name(OpKind op) {
  return kOpNames[size_t(op)];
}
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

Tape& current_tape() {
  return *t_current_tape;
}

TapeScope::TapeScope(Tape& tape) : previous_(t_current_tape) {
  t_current_tape = &tape;
}
TapeScope::~TapeScope() {
  t_current_tape = previous_;
}

NoGrad::NoGrad() : previous_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGrad::~NoGrad() {
  t_grad_enabled = previous_;
}

EnableGrad::EnableGrad() : previous_(t_grad_enabled) {
  t_grad_enabled = true;
}
EnableGrad::~EnableGrad() {
  t_grad_enabled = previous_;
}

bool grad_enabled() {
  return t_grad_enabled;
}

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
    if (in.defined() && in.requires_grad() && !in.is_leaf() &&
        in.impl()->tape_generation != tape.generation())
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

void record(OpKind op, std::vector<Tensor> inputs, const Tensor& output,
            std::function<void(const Tensor&)> backward, std::vector<Tensor> saved) {
  push_entry(TapeEntry{op, std::move(inputs), output, std::move(backward), {}, std::move(saved)});
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

// A gradient with history left in .grad by a create_graph walk may share its storage with tensors on the
// tape: before a first-order walk writes into it in place, it becomes a copy of its own.
void own_grad(TensorImpl& ti) {
  if (ti.grad.defined() && ti.grad.requires_grad()) ti.grad = ti.grad.detach().clone();
}

// a + b recorded, for adding gradients under create_graph (same shape; the inputs may be views).
// d(a + b)/da = d(a + b)/db = 1: the backward hands dy to both, so it differentiates to any order.
Tensor recorded_sum(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.is_contiguous() ? a : a.clone(), bc = b.is_contiguous() ? b : b.clone();
  Tensor y = ac.clone();
  detail::visit_float(y.dtype(), "backward", [&]<class T>() {
    kernels::affine<T>(y.numel(), bc.template data<T>(), T(1), T(0), y.template data<T>(), true);
  });
  if (should_record({&a, &b}))
    record(OpKind::add, {a, b}, y, [a, b](const Tensor& dy) {
      for (const Tensor* x : {&a, &b})
        if (x->requires_grad()) accumulate_grad(*x, dy);
    });
  return y;
}

void refuse_buffer_under_create_graph() {
  if (t_create_graph)
    throw AutogradError(
        std::string(t_running) +
        ": this op has no double backward (its gradient is written by a kernel into a buffer), so "
        "create_graph cannot differentiate through it");
}
}  // namespace

void accumulate_grad(const Tensor& t, const Tensor& g) {
  TensorImpl& ti = *t.impl();
  if (g.numel() != ti.shape.numel())
    throw AutogradError("backward: gradient shape " + to_string(g.shape()) + " does not match tensor " +
                        t.describe());
  if (t_create_graph && (g.requires_grad() || (ti.grad.defined() && ti.grad.requires_grad()))) {
    // The gradient keeps its history: taken as it is, or added with a recorded op, never in place.
    if (g.shape() != ti.shape)
      throw AutogradError(std::string(t_running) +
                          ": under create_graph a gradient must come in its tensor's shape: " +
                          to_string(g.shape()) + " for " + t.describe());
    ti.grad = ti.grad.defined() ? recorded_sum(ti.grad, g) : g;
    return;
  }
  own_grad(ti);
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
  refuse_buffer_under_create_graph();
  TensorImpl& ti = *t.impl();
  own_grad(ti);
  *fresh = !ti.grad.defined();
  if (*fresh) ti.grad = Tensor::empty(ti.shape, ti.dtype);
  return ti.grad;
}

Tensor grad_buffer_zeroed(const Tensor& t) {
  bool fresh = false;
  Tensor g = grad_buffer(t, &fresh);
  if (fresh)
    detail::visit_float(t.dtype(), "backward",
                        [&]<class T>() { kernels::fill<T>(g.numel(), T(0), g.template data<T>()); });
  return g;
}

// ---- the reverse walk ------------------------------------------------------------------------------

namespace {

// Checks `output` can be walked from and that `seed` fits it; returns the seed (ones for a scalar).
Tensor checked_seed(const Tape& tape, const Tensor& output, const Tensor& seed, const char* who) {
  const std::string w = who;
  if (!output.defined()) throw AutogradError(w + ": output is undefined");
  if (!output.requires_grad())
    throw AutogradError(w + ": output " + output.describe() +
                        " does not require grad (no input of its ops did)");
  if (!output.is_leaf() && output.impl()->tape_generation != tape.generation())
    throw AutogradError(
        w + ": the tape holding the history of " + output.describe() +
        " was already freed by an earlier backward; pass retain_graph=true to that call to go twice");
  if (seed.defined()) {
    if (seed.shape() != output.shape() || seed.dtype() != output.dtype())
      throw AutogradError(w + ": grad_output " + seed.describe() + " does not match output " +
                          output.describe());
    return seed;
  }
  if (output.numel() != 1)
    throw AutogradError(w + ": output " + output.describe() +
                        " is not a scalar; pass a grad_output of the same shape");
  return Tensor::ones(output.shape(), output.dtype());
}

// Runs the closures of entries [begin, end) last to first, each whose output has a gradient, then
// settles what they deferred and nothing settled yet. Under create_graph a closure records onto this
// tape, which may move its entries: it runs from a copy.
void run_entries(Tape& tape, size_t begin, size_t end) {
  struct EntryRestore {  // a closure may walk a tape of its own (checkpoint) and then go on
    const Tape* tape = t_entry_tape;
    size_t index = t_entry_index;
    ~EntryRestore() { t_entry_tape = tape, t_entry_index = index; }
  } restore;
  for (size_t i = end; i-- > begin;) {
    TapeEntry& e = tape.entries()[i];
    TensorImpl& out = *e.output.impl();
    if (!t_deferred.empty()) settle_deferred(&out);  // its gradient complete before it is read
    if (!out.grad.defined()) continue;  // not on a path to `output`
    const Tensor dy = out.grad;
    if (!out.retains_grad) out.grad = Tensor();  // intermediate gradients die as soon as they are used
    t_entry_tape = &tape, t_entry_index = i;
    if (!t_create_graph && t_observers.empty()) {
      e.backward(dy);
      continue;
    }
    const std::function<void(const Tensor&)> closure = t_create_graph ? e.backward : nullptr;
    const char* outer_running = t_running;
    t_running = entry_name(e);
    if (t_create_graph && e.op == OpKind::custom)
      throw AutogradError(
          std::string(t_running) +
          ": a custom op's backward is not recorded, so create_graph cannot differentiate through it");
    for (TapeObserver* o : t_observers) o->before_backward(tape, i, dy);
    closure ? closure(dy) : e.backward(dy);
    for (TapeObserver* o : t_observers) o->after_backward(tape, i);
    t_running = outer_running;
  }
  if (!t_deferred.empty()) settle_deferred(nullptr, &tape);  // tensors produced outside [begin, end)
}

// The walk over the current tape: seeds each output's gradient, runs every entry, then the closures
// queued by at_backward_end, and clears the tape unless it is retained.
void walk(const std::vector<Tensor>& outputs, const std::vector<Tensor>& seeds,
          const BackwardOptions& options, const char* who) {
  Tape& tape = current_tape();
  std::vector<Tensor> checked;
  for (size_t k = 0; k < outputs.size(); ++k)
    checked.push_back(checked_seed(tape, outputs[k], k < seeds.size() ? seeds[k] : Tensor(), who));
  // A closure may walk another tape (checkpoint recomputes onto its own), never the one being walked.
  if (t_walking == &tape)
    throw AutogradError(std::string(who) + ": called from inside another backward pass");
  // Recording stays on under create_graph (the backward's ops are the new graph), off otherwise.
  std::optional<NoGrad> no_grad;
  std::optional<EnableGrad> enable_grad;
  if (options.create_graph)
    enable_grad.emplace();
  else
    no_grad.emplace();
  // The walk's state, put back on the way out (an enclosing walk's, even when a closure throws);
  // the queue of at_backward_end starts empty.
  struct State {
    const Tape* outer_tape = t_walking;
    bool outer_create = t_create_graph;
    const char* outer_running = t_running;
    std::vector<std::function<void()>> outer_queue = std::move(t_backward_end);
    std::vector<DeferredSlot> outer_deferred = std::move(t_deferred);
    State(const Tape& t, bool create) {
      t_walking = &t, t_create_graph = create, t_backward_end.clear(), t_deferred.clear();
    }
    ~State() {
      t_walking = outer_tape, t_create_graph = outer_create, t_running = outer_running;
      t_backward_end = std::move(outer_queue), t_deferred = std::move(outer_deferred);
    }
  } state(tape, options.create_graph);
  for (size_t k = 0; k < outputs.size(); ++k)
    accumulate_grad(outputs[k], seeds.size() > k && seeds[k].defined() && !options.create_graph
                                    ? seeds[k].clone()
                                    : checked[k]);
  run_entries(tape, 0, tape.size());
  for (size_t i = 0; i < t_backward_end.size(); ++i) t_backward_end[i]();  // may queue more
  if (!options.retain_graph.value_or(options.create_graph)) tape.clear();
}

}  // namespace

void backward(const Tensor& output, const Tensor& grad_output, bool retain_graph) {
  walk({output}, {grad_output}, BackwardOptions{retain_graph, false}, "backward");
}

void backward(const Tensor& output, const Tensor& grad_output, const BackwardOptions& options) {
  walk({output}, {grad_output}, options, "backward");
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const GradOptions& options) {
  const std::vector<Tensor>& grad_outputs = options.grad_outputs;
  if (outputs.empty()) throw AutogradError("grad: no outputs");
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    throw AutogradError("grad: " + std::to_string(grad_outputs.size()) + " grad_outputs for " +
                        std::to_string(outputs.size()) + " outputs");
  for (size_t j = 0; j < inputs.size(); ++j)
    if (!inputs[j].defined() || !inputs[j].requires_grad())
      throw AutogradError("grad: input " + std::to_string(j) + " " +
                          (inputs[j].defined() ? inputs[j].describe() : std::string("(undefined)")) +
                          " does not require grad");
  // Every tensor whose .grad the walk may write: the inputs, and the leaves and outputs on the tape.
  // Their gradients are set aside and put back afterwards, so grad() changes none of them.
  struct Saved {
    TensorImpl* impl;
    Tensor grad;
    bool retains;
  };
  std::vector<Saved> saved;
  std::unordered_set<TensorImpl*> seen;
  auto set_aside = [&](const Tensor& t) {
    if (t.defined() && seen.insert(t.impl()).second) {
      saved.push_back({t.impl(), t.impl()->grad, t.impl()->retains_grad});
      t.impl()->grad = Tensor();
    }
  };
  for (const Tensor& t : inputs) set_aside(t);
  for (const TapeEntry& e : current_tape().entries()) {
    for (const Tensor& in : e.inputs)
      if (in.defined() && in.is_leaf() && in.requires_grad()) set_aside(in);
    if (e.output.impl()->retains_grad) set_aside(e.output);
  }
  for (const Tensor& t : inputs) t.impl()->retains_grad = true;  // an intermediate keeps what reaches it
  struct PutBack {
    std::vector<Saved>& s;
    ~PutBack() {
      for (Saved& x : s) x.impl->grad = std::move(x.grad), x.impl->retains_grad = x.retains;
    }
  } put_back{saved};
  walk(outputs, grad_outputs, BackwardOptions{options.retain_graph, options.create_graph}, "grad");
  std::vector<Tensor> result;
  for (size_t j = 0; j < inputs.size(); ++j) {
    Tensor g = inputs[j].impl()->grad;
    if (!g.defined()) {
      if (options.unused == Unused::error)
        throw AutogradError("grad: input " + std::to_string(j) + " " + inputs[j].describe() +
                            " is not used to compute the outputs (pass unused = Unused::undefined or zeros)");
      if (options.unused == Unused::zeros) g = Tensor::zeros(inputs[j].shape(), inputs[j].dtype());
    } else if (!options.create_graph && g.impl()->storage.use_count() > 1) {
      g = g.clone();  // the walk may have adopted storage a retained tensor still shares
    }
    result.push_back(g);
  }
  return result;
}

void backward_through(const std::function<Tensor()>& composite, const Tensor& grad_output) {
  if (!t_create_graph)
    throw AutogradError("backward_through: only inside a backward closure under create_graph");
  Tape& tape = current_tape();
  const size_t begin = tape.size();
  const Tensor y = composite();
  if (!y.defined() || y.shape() != grad_output.shape() || y.dtype() != grad_output.dtype())
    throw AutogradError(std::string(t_running) + ": its composite returned " +
                        (y.defined() ? y.describe() : std::string("nothing")) + " for a gradient " +
                        grad_output.describe());
  if (!y.requires_grad()) return;  // no input that requires grad
  accumulate_grad(y, grad_output);
  run_entries(tape, begin, tape.size());
}

}  // namespace tapegrad
