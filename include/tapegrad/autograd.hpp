/// @file
/// The tape: reverse-mode autodiff as a Wengert list.
///
/// Every differentiable op, when some input requires grad and recording is on, appends one entry to
/// the current (thread-local) tape: the op's kind, its inputs, its output and a backward closure that
/// captures only what the derivative needs. backward(loss) seeds d(loss) = 1 and walks the entries in
/// reverse; each closure reads its output's gradient and *accumulates* into its inputs' gradients, so
/// a tensor used twice gets both contributions. The walk is a loop, not recursion, so a 10,000-op
/// chain is fine. Afterwards the tape is cleared (activations freed) unless retain_graph is set;
/// backward over a tensor whose tape was cleared is an error, never a silent double count.
/// Leaves (parameters) keep .grad across backward calls until zero_grad; intermediate gradients are
/// freed as soon as their entry has run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/tensor.hpp"

namespace tapegrad {

/// Every kind of tape entry: one enumerator per row of the op list (tapegrad/op_list.hpp), in its
/// order, which also gives op_name() its names; `custom` is a function defined outside the library
/// (record_custom). A test asserts the gradcheck registry records every kind but `custom`.
enum class OpKind : uint8_t {
/// @cond
#define TAPEGRAD_OP(name) name,
#include "tapegrad/op_list.hpp"
#undef TAPEGRAD_OP
  /// @endcond
  count_  ///< not an op: the number of kinds
};
/// Number of op kinds (the size of tables indexed by OpKind).
inline constexpr int kOpCount = static_cast<int>(OpKind::count_);
/// The op's name as in ops.hpp and tape dumps, e.g. "matmul", "gelu_tanh".
const char* op_name(OpKind op);

/// One recorded op: what backward needs to send d(output) on to the inputs. The entry holds its
/// inputs and output (shared handles) until the tape is cleared.
struct TapeEntry {
  OpKind op;                   ///< which op recorded it
  std::vector<Tensor> inputs;  ///< the op's tensor inputs, as the op passed them to record()
  Tensor output;               ///< the op's result
  /// Reads d(output) and accumulates into the inputs' .grad (only those that require grad).
  std::function<void(const Tensor& grad_output)> backward;
  std::string name;  ///< a custom op's own name (record_custom); empty for the library's ops
  /// Tensors the backward keeps besides the inputs and the output (a fused op's intermediate), for
  /// the memory instruments; the closure holds its own references.
  std::vector<Tensor> saved = {};
};

/// The name an entry shows in tape dumps and error messages: a custom op's own name, else op_name(op).
const char* entry_name(const TapeEntry& entry);

/// The Wengert list: recorded entries in execution order. Not thread-safe; each thread records on
/// its own current tape (see current_tape, TapeScope).
class Tape {
 public:
  /// Appends an entry (record() calls it; ops do not call it directly).
  void push(TapeEntry entry) { entries_.push_back(std::move(entry)); }
  /// The entries in execution order; backward visits them last to first.
  /// @{
  const std::vector<TapeEntry>& entries() const { return entries_; }
  std::vector<TapeEntry>& entries() { return entries_; }
  /// @}
  size_t size() const { return entries_.size(); }  ///< Number of entries.
  /// Bumped on every clear, so tensors recorded before can tell their history is gone.
  int64_t generation() const { return generation_; }
  /// Drops every entry (freeing the activations they kept) and bumps generation().
  void clear();
  /// One line per entry: index, op, input descriptions (names or dtype+shape), output shape.
  std::string dump() const;

 private:
  std::vector<TapeEntry> entries_;
  int64_t generation_ = 0;
};

/// The calling thread's current tape.
Tape& current_tape();

/// Makes `tape` the current tape for this scope.
class TapeScope {
 public:
  /// `tape` must outlive the scope.
  explicit TapeScope(Tape& tape);
  ~TapeScope();  ///< Restores the previous current tape.
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

/// Switches recording off for this scope (evaluation, optimizer updates, inside backward).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

/// Switches recording back on for this scope, e.g. inside a backward closure that records a
/// computation of its own (checkpoint's recomputation).
class EnableGrad {
 public:
  EnableGrad();
  ~EnableGrad();
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool previous_;
};

/// False inside a NoGrad scope (on this thread).
bool grad_enabled();

/// Watches the tape as it is written and walked: what instruments (instruments.hpp: the tape
/// recorder, the per-op profile, anomaly mode) attach to. With no observer active the tape pays one
/// branch per entry. Hooks run on the recording thread; backward hooks run under NoGrad.
class TapeObserver {
 public:
  virtual ~TapeObserver() = default;
  /// Entry `index` of `tape` was just appended (its output is computed).
  virtual void recorded(const Tape& tape, size_t index) { (void)tape, (void)index; }
  /// backward is about to run entry `index`'s closure with d(output) = grad_output.
  virtual void before_backward(const Tape& tape, size_t index, const Tensor& grad_output) {
    (void)tape, (void)index, (void)grad_output;
  }
  /// Entry `index`'s closure has run: its inputs' gradients hold its contribution, or part of it is
  /// held back to be written together with its siblings' (the slices of a tensor narrowed once per
  /// time step, the rows of small products that share an operand) before that gradient is read.
  virtual void after_backward(const Tape& tape, size_t index) { (void)tape, (void)index; }
  /// The held-back gradient work that entry `index`'s closure began (and later entries joined) has
  /// just been written, between two entries' closures or at the end of the walk. For timing it.
  virtual void deferred_settled(const Tape& tape, size_t index) { (void)tape, (void)index; }
};

/// Makes `observer` watch this thread's tapes for this scope (observers nest; all active ones run).
class ObserveScope {
 public:
  /// `observer` must outlive the scope.
  explicit ObserveScope(TapeObserver& observer);
  ~ObserveScope();
  ObserveScope(const ObserveScope&) = delete;
  ObserveScope& operator=(const ObserveScope&) = delete;
};

/// Reverse pass from `output`: adds d(output)/d(leaf) into every leaf's .grad that requires grad.
/// A non-scalar output needs `grad_output` of the same shape (for a scalar it defaults to 1). Unless
/// `retain_graph`, the tape is cleared afterwards.
/// @throws AutogradError when `output` does not require grad, its tape was already cleared, the seed's
/// shape differs, or backward is called from inside a backward closure on the tape being walked (a closure
/// may walk a tape of its own, as checkpoint does).
void backward(const Tensor& output, const Tensor& grad_output = {}, bool retain_graph = false);

/// How a reverse walk runs (backward's and grad's options).
struct BackwardOptions {
  /// Keep the tape after the walk (default: only when create_graph, as a graph built on it needs it).
  std::optional<bool> retain_graph = {};
  /// Record the backward itself: every gradient is computed with recorded ops, so it is a tensor on the
  /// tape that can be differentiated again (a Hessian-vector product, a gradient penalty, a meta-gradient),
  /// to any order. Each op kind's closure then takes its differentiable path (op_checks.hpp lists how each
  /// kind does it); an op without one refuses with an AutogradError naming it, never a silent zero.
  bool create_graph = false;
};

/// backward with options: with create_graph the leaves' .grad are on the tape (and the tape is kept).
void backward(const Tensor& output, const Tensor& grad_output, const BackwardOptions& options);

/// What grad() returns for an input no output depends on.
enum class Unused {
  error,      ///< throw AutogradError naming the input (PyTorch's default)
  undefined,  ///< an undefined Tensor
  zeros,      ///< zeros of the input's shape
};

/// Options of grad(), written flat so `{.create_graph = true}` works (fields in this order).
struct GradOptions {
  /// d(output) seeds, one per output in its shape; may stay empty when every output is a scalar (1).
  std::vector<Tensor> grad_outputs = {};
  std::optional<bool> retain_graph = {};  ///< as BackwardOptions::retain_graph
  bool create_graph = false;              ///< as BackwardOptions::create_graph
  Unused unused = Unused::error;          ///< an input the outputs do not depend on
};

/// d(sum_i <outputs[i], grad_outputs[i]>) / d(inputs[j]) for every j, returned rather than added into
/// .grad: no tensor's .grad changes (the leaves' and inputs' gradients are put back as they were).
/// `inputs` may be leaves or intermediate results. With create_graph the results are on the tape (see
/// BackwardOptions), e.g. `grad({loss}, {x}, {.create_graph = true})`.
/// @throws AutogradError as backward does, and for an unused input under Unused::error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const GradOptions& options = {});

// ---- for op implementers (src/ops) -----------------------------------------------------------

/// True when recording is on and some defined input requires grad.
/// @{
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);
/// @}
/// Marks `output` as produced by `op` and appends the entry to the current tape. Throws AutogradError
/// if an input was produced on a tape that has since been cleared.
/// `saved`: what the backward keeps besides the inputs and the output (TapeEntry::saved).
void record(OpKind op, std::vector<Tensor> inputs, const Tensor& output,
            std::function<void(const Tensor&)> backward, std::vector<Tensor> saved = {});
/// True while a closure runs in a create_graph walk: it must compute its gradients with recorded ops
/// (tapegrad/ops.hpp) and add them with accumulate_grad, because grad_buffer and grad_buffer_zeroed
/// refuse then (a kernel's result written into a buffer cannot be differentiated again).
bool creating_graph();
/// Inside a closure in a create_graph walk: sends `grad_output` back through `composite`, a function
/// that computes the op's output again with recorded ops, and walks those entries, so the inputs'
/// gradients come out on the tape, derived by the tape from the composite rather than written by
/// hand. For fused ops whose backward is a kernel (softmax, layer_norm, attention...): their first-
/// order path keeps the kernel; only their double backward pays for the recomputation.
/// @throws AutogradError when the composite's result differs in shape from grad_output.
void backward_through(const std::function<Tensor()>& composite, const Tensor& grad_output);
/// Runs `fn` once the reverse pass that is running now has walked every entry (before the tape is
/// cleared), in the order registered. For work a closure hands on to later ones, e.g. a weight
/// gradient summed over many uses that must be written even if some use's entry is off the path
/// to the output. Only valid inside a backward closure.
void at_backward_end(std::function<void()> fn);

// ---- your own op --------------------------------------------------------------------------------

/// Records a differentiable function defined outside the library, exactly as the library's ops
/// record theirs: compute `output` from `inputs` under NoGrad (so the forward's own ops leave no
/// entries), then, when should_record(inputs), call this with a `backward` closure that reads
/// d(output) and adds each input's gradient with accumulate_grad (skipping inputs that do not
/// require grad). The entry has OpKind::custom and shows `name` in tape dumps and anomaly messages.
/// Throws AutogradError when `name` is empty, `output` is undefined, or `output` already requires
/// grad (a parameter, or the forward ran with recording on).
void record_custom(std::string name, std::vector<Tensor> inputs, const Tensor& output,
                   std::function<void(const Tensor& grad_output)> backward);

/// @name Writing gradients: the three ways a backward touches an input's .grad
///
/// Every backward closure (src/ops) writes its inputs' gradients through exactly one of these:
/// ```
///   grad_buffer         a kernel that writes every element: overwrite a new buffer, add to an old one
///   grad_buffer_zeroed  a kernel that only adds (scatters, windows, sums): a new buffer starts at zero
///   accumulate_grad     a gradient already computed as a tensor (or dy itself): add it, or adopt it
/// ```
///
/// The sole-owner rule, the one condition under which a gradient takes over another tensor's storage
/// instead of copying it: t has no gradient yet, and g is contiguous, does not require grad, and is the
/// only handle on its storage (no other Tensor shares g's impl, no other impl shares g's storage). The
/// dy a backward receives passes when nothing retains it (the walk has already dropped the output's
/// reference), so a chain of adds, reshapes and contiguous copies hands one buffer down without copying.
/// After adopting, t.grad and g share storage until the backward returns: one that reads g again must
/// not first write that t's gradient with a kernel (passing g to accumulate_grad again is fine).
/// @{

/// Under create_graph (creating_graph()), accumulate_grad records t.grad = t.grad + g (never in place)
/// and a first gradient is g itself, so gradients keep their history; grad_buffer and
/// grad_buffer_zeroed throw. A gradient with history found in .grad by a later first-order walk is
/// replaced by a detached copy before anything is written into it.
///
/// t.grad += g. g holds t's elements in row-major order: it has t's shape or, for the gradient of a
/// reshape, any shape with t's element count. Adopts g's storage under the sole-owner rule, else copies
/// (first gradient) or adds (later ones). Throws AutogradError when the element counts differ.
void accumulate_grad(const Tensor& t, const Tensor& g);
/// t's contiguous gradient buffer for a kernel that writes every element. `fresh` is set when it was
/// just created and holds uninitialised memory the kernel must overwrite (GEMM with beta = 0, a
/// gather); otherwise it holds earlier gradients the kernel must add to.
Tensor grad_buffer(const Tensor& t, bool* fresh);
/// t's contiguous gradient buffer, zero-filled when just created, for kernels that only add into it.
Tensor grad_buffer_zeroed(const Tensor& t);
/// @}

// ---- gradient checking --------------------------------------------------------------------------

/// One place for the finite-difference settings (PyTorch-like).
struct GradcheckOptions {
  double eps = 1e-6;     ///< central-difference step
  double atol = 1e-5;    ///< absolute tolerance
  double rtol = 1e-3;    ///< relative tolerance, times |numeric|
  uint64_t seed = 1234;  ///< for the fixed random weights that reduce the output to a scalar
};

/// The outcome of gradcheck: pass or fail, and the worst element seen.
struct GradcheckResult {
  bool ok = false;           ///< every element within tolerance (and not all gradients zero)
  std::string message;       ///< the worst element: op, input, index, analytic, numeric (or the failure)
  double max_abs_error = 0;  ///< max |analytic - numeric| over every checked element
  double max_rel_error = 0;  ///< max |analytic - numeric| / max(|numeric|, atol)
  int worst_input = -1;      ///< which input holds the element furthest beyond its tolerance (-1: none)
  int64_t worst_index = -1;  ///< its flat index in that input
  /// The analytic and numeric gradient at the worst element.
  /// @{
  double analytic = 0, numeric = 0;
  /// @}
  std::vector<OpKind> ops_seen;  ///< distinct ops recorded while running fn
};

/// Compares the analytic gradient of every floating input that requires grad (they must be contiguous float64
/// leaves) with central differences of L = sum(fn(inputs) * W), W fixed random weights, so errors cannot
/// cancel. An element passes when |analytic - numeric| <= atol + rtol * |numeric|. Refuses to pass vacuously:
/// all-zero gradients everywhere fail. `label` names the check in messages.
/// @throws Error when no input requires grad, `fn` does not return float64, or its output does not
/// depend on the inputs.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts = {},
                          const std::string& label = "");

/// The second-order check: the analytic gradient of the gradient against finite differences of the
/// analytic gradient. With g(x, w) = d<fn(x), w>/dx computed by a create_graph walk (w fixed random
/// weights that are themselves a variable, so the backward's dependence on d(output) is checked too),
/// it compares d<g, v>/d(x, w) (v fixed random) with central differences of <g, v>, each <g, v> from a
/// first-order walk at the perturbed point. Inputs as gradcheck; w is reported as input inputs.size().
/// An op without a double backward makes it throw (the create_graph walk refuses).
GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs, const GradcheckOptions& opts = {},
                              const std::string& label = "");

}  // namespace tapegrad
