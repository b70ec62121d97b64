// Activation checkpointing (functional.hpp): one tape entry per call, fn recomputed in backward.
#include <unordered_map>
#include <unordered_set>

#include "src/internal.hpp"
#include "tapegrad/functional.hpp"

namespace tapegrad {

namespace {
// New handles on the inputs' storage, each a root of the tape fn records on: a floating-point input
// requires grad in the copy when `all_floating` (so the scratch tape shows whether the output depends
// on it) or when the original does. An input passed twice gets one copy, as the plain call would see.
std::vector<Tensor> roots(const std::vector<Tensor>& inputs, bool all_floating) {
  std::vector<Tensor> out;
  std::unordered_map<const TensorImpl*, size_t> seen;
  for (const Tensor& x : inputs) {
    if (!x.defined()) {
      out.push_back(x);
      continue;
    }
    auto [it, fresh] = seen.emplace(x.impl(), out.size());
    if (!fresh) {
      out.push_back(out[it->second]);
      continue;
    }
    Tensor copy = x.detach();
    if (x.is_floating() && (all_floating || x.requires_grad())) copy.requires_grad_(true);
    out.push_back(copy);
  }
  return out;
}

std::vector<Generator> states(const std::vector<Generator*>& gens) {
  std::vector<Generator> s;
  for (const Generator* g : gens) s.push_back(*g);
  return s;
}
void restore(const std::vector<Generator*>& gens, const std::vector<Generator>& s) {
  for (size_t i = 0; i < gens.size(); ++i) *gens[i] = s[i];
}
}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Generator*>& generators) {
  if (!grad_enabled()) return fn(inputs);
  const std::vector<Generator*> gens =
      generators.empty() ? std::vector<Generator*>{&default_generator()} : generators;
  const std::vector<Generator> rng_at_call = states(gens);

  // The first call, on a scratch tape that is dropped on return: it shows what the output depends on.
  const std::vector<Tensor> scratch_roots = roots(inputs, true);
  Tensor out;
  std::vector<Tensor> captured;  // leaves requiring grad that fn used without taking them as inputs
  bool depends = false, has_floating_input = false;
  {
    Tape scratch;
    TapeScope scope(scratch);
    out = fn(scratch_roots);
    if (!out.defined()) throw AutogradError("checkpoint: fn returned an undefined tensor");
    std::unordered_set<const TensorImpl*> root_set, reached{out.impl()};
    for (const Tensor& r : scratch_roots)
      if (r.defined() && r.is_floating()) root_set.insert(r.impl()), has_floating_input = true;
    std::unordered_set<const TensorImpl*> captured_set;
    auto& entries = scratch.entries();
    for (size_t i = entries.size(); i-- > 0;) {
      if (!reached.count(entries[i].output.impl())) continue;
      for (const Tensor& in : entries[i].inputs) {
        if (!in.defined()) continue;
        reached.insert(in.impl());
        if (in.is_leaf() && in.requires_grad() && !root_set.count(in.impl()) &&
            captured_set.insert(in.impl()).second)
          captured.push_back(in);
      }
    }
    for (const TensorImpl* r : root_set) depends = depends || reached.count(r);
    out = out.detach();
  }
  if (has_floating_input && !depends)
    throw AutogradError(
        "checkpoint: fn's output " + out.describe() +
        " does not depend on any of its inputs; pass the tensors it is computed from as inputs");
  std::vector<Tensor> held = inputs;
  held.insert(held.end(), captured.begin(), captured.end());
  if (!should_record(held)) return out;

  const Shape out_shape = out.shape();
  const DType out_dtype = out.dtype();
  record_custom(
      "checkpoint", std::move(held), out,
      [fn, inputs, gens, rng_at_call, out_shape, out_dtype](const Tensor& dy) {
        const std::vector<Generator> rng_now = states(gens);
        restore(gens, rng_at_call);
        struct PutBack {  // the generators go on from where the forward pass left them, even on a throw
          const std::vector<Generator*>& g;
          const std::vector<Generator>& s;
          ~PutBack() { restore(g, s); }
        } put_back{gens, rng_now};

        const std::vector<Tensor> rec_roots = roots(inputs, false);
        // Hand each input's gradient so far to its root, so the recomputation adds onto it in the plain
        // call's order; it comes back afterwards.
        std::unordered_set<const TensorImpl*> handed;
        for (size_t i = 0; i < inputs.size(); ++i)
          if (inputs[i].defined() && rec_roots[i].requires_grad() && handed.insert(inputs[i].impl()).second)
            rec_roots[i].impl()->grad = inputs[i].impl()->grad;
        Tape tape;
        TapeScope scope(tape);
        EnableGrad enable;
        const Tensor again = fn(rec_roots);
        if (!again.defined() || again.shape() != out_shape || again.dtype() != out_dtype)
          throw AutogradError("checkpoint: the recomputation returned " +
                              (again.defined() ? again.describe() : "nothing") +
                              " where the first call returned " + to_string(out_shape) +
                              "; fn must compute the same thing every call");
        if (again.requires_grad()) backward(again, dy);
        handed.clear();
        for (size_t i = 0; i < inputs.size(); ++i)
          if (inputs[i].defined() && rec_roots[i].requires_grad() && handed.insert(inputs[i].impl()).second)
            inputs[i].impl()->grad = rec_roots[i].impl()->grad;
      });
  return out;
}

}  // namespace tapegrad
