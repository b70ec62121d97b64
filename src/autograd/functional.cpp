// The functional transforms (functional.hpp): vjp, jvp by the double-vjp construction, hvp, and
// whole Jacobians and Hessians assembled from one backward per output element.
#include "tapegrad/functional.hpp"

#include <memory>
#include <optional>

namespace tapegrad {

namespace {

// What a transform calls f with, and on which tape: with create_graph the inputs themselves where they
// require grad, on the caller's tape; else new handles on their storage that require grad, recorded on a
// private tape that dies with the session. Recording is on either way.
class Session {
 public:
  Session(const std::vector<Tensor>& inputs, bool create_graph, const char* who) {
    if (!create_graph) tape_ = std::make_unique<Tape>(), scope_.emplace(*tape_);
    for (const Tensor& x : inputs) {
      if (!x.defined()) throw AutogradError(std::string(who) + ": an input is undefined");
      if (!x.is_floating()) {
        xs.push_back(x);
        continue;
      }
      xs.push_back(create_graph && x.requires_grad() ? x : x.detach().requires_grad_());
      diff_index.push_back(xs.size() - 1);
      diff.push_back(xs.back());
    }
    if (diff.empty()) throw AutogradError(std::string(who) + ": no floating-point input to differentiate");
  }
  std::vector<Tensor> xs;          // f's arguments
  std::vector<Tensor> diff;        // the floating ones, which are differentiated
  std::vector<size_t> diff_index;  // where each of diff is in xs

  // One per input: the value for each of diff in its place, undefined for the integer inputs.
  std::vector<Tensor> spread(const std::vector<Tensor>& per_diff) const {
    std::vector<Tensor> out(xs.size());
    for (size_t k = 0; k < diff.size(); ++k) out[diff_index[k]] = per_diff[k];
    return out;
  }
  // The per-input vectors of the floating inputs (v or tangents), checked against their shapes.
  std::vector<Tensor> per_diff(const std::vector<Tensor>& given, const char* who, const char* what) const {
    if (given.size() != xs.size())
      throw AutogradError(std::string(who) + ": " + std::to_string(given.size()) + " " + what + " for " +
                          std::to_string(xs.size()) +
                          " inputs (one per input; undefined for an integer input)");
    std::vector<Tensor> out;
    for (size_t k = 0; k < diff.size(); ++k) {
      const Tensor& t = given[diff_index[k]];
      const Tensor& x = diff[k];
      if (!t.defined() || t.shape() != x.shape() || t.dtype() != x.dtype())
        throw AutogradError(std::string(who) + ": " + what + " " + std::to_string(diff_index[k]) + " is " +
                            (t.defined() ? t.describe() : std::string("undefined")) + " for input " +
                            x.describe());
      out.push_back(t);
    }
    return out;
  }

 private:
  std::unique_ptr<Tape> tape_;
  std::optional<TapeScope> scope_;
  EnableGrad on_;
};

Tensor call(const TensorFn& f, const Session& s, const char* who) {
  const Tensor y = f(s.xs);
  if (!y.defined()) throw AutogradError(std::string(who) + ": f returned an undefined tensor");
  if (!y.is_floating())
    throw AutogradError(std::string(who) + ": f returned " + y.describe() + ", not floating-point");
  return y;
}

void require_scalar(const Tensor& y, const char* who) {
  if (y.numel() != 1) throw AutogradError(std::string(who) + ": f must return a scalar, got " + y.describe());
}

std::vector<Tensor> zeros_like(const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(Tensor::zeros(x.shape(), x.dtype()));
  return out;
}

// The rows of a product: of the gradients gs and their vectors vs, those gradients with history.
struct OnTape {
  std::vector<Tensor> grads, vectors;
};
OnTape with_history(const std::vector<Tensor>& gs, const std::vector<Tensor>& vs) {
  OnTape r;
  for (size_t i = 0; i < gs.size(); ++i)
    if (gs[i].requires_grad()) r.grads.push_back(gs[i]), r.vectors.push_back(vs[i]);
  return r;
}

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape s = a;
  for (int d = 0; d < b.ndim(); ++d) s.push_back(b[d]);
  return s;
}

// One-hot seed: zeros of `like`'s shape with element k set to 1.
Tensor one_hot(const Tensor& like, int64_t k) {
  std::vector<double> v(size_t(like.numel()), 0.0);
  v[size_t(k)] = 1.0;
  return Tensor::from_vector(v, like.shape(), like.dtype());
}

// Row k (of `rows` rows) of each block: blocks[j] viewed as [rows, numel(cols[j])], row k = cols[j].
void write_row(std::vector<std::vector<double>>& blocks, int64_t k, const std::vector<Tensor>& cols) {
  for (size_t j = 0; j < cols.size(); ++j) {
    const std::vector<double> v = cols[j].to_vector();
    std::copy(v.begin(), v.end(), blocks[j].begin() + k * int64_t(v.size()));
  }
}

// The rows of d(outs)/d(s.diff): for every element of `out` a backward seeded with its one-hot,
// written as out.shape ++ diff[j].shape per input.
std::vector<Tensor> rows_of(const Tensor& out, const Session& s) {
  std::vector<std::vector<double>> blocks;
  for (const Tensor& x : s.diff) blocks.emplace_back(size_t(out.numel() * x.numel()), 0.0);
  if (out.requires_grad())
    for (int64_t k = 0; k < out.numel(); ++k)
      write_row(blocks, k,
                grad({out}, s.diff,
                     {.grad_outputs = {one_hot(out, k)}, .retain_graph = true, .unused = Unused::zeros}));
  std::vector<Tensor> result;
  for (size_t j = 0; j < s.diff.size(); ++j)
    result.push_back(
        Tensor::from_vector(blocks[j], concat_shapes(out.shape(), s.diff[j].shape()), out.dtype()));
  return result;
}

}  // namespace

VjpResult vjp(const TensorFn& f, const std::vector<Tensor>& inputs, const Tensor& v,
              const FunctionalOptions& options) {
  const Session s(inputs, options.create_graph, "vjp");
  const Tensor y = call(f, s, "vjp");
  if (!v.defined() || v.shape() != y.shape() || v.dtype() != y.dtype())
    throw AutogradError("vjp: v is " + (v.defined() ? v.describe() : std::string("undefined")) +
                        " for f's output " + y.describe());
  const std::vector<Tensor> g =
      y.requires_grad()
          ? grad({y}, s.diff,
                 {.grad_outputs = {v}, .create_graph = options.create_graph, .unused = Unused::zeros})
          : zeros_like(s.diff);
  return {options.create_graph ? y : y.detach(), s.spread(g)};
}

JvpResult jvp(const TensorFn& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& tangents,
              const FunctionalOptions& options) {
  const Session s(inputs, options.create_graph, "jvp");
  const std::vector<Tensor> t = s.per_diff(tangents, "jvp", "tangents");
  const Tensor y = call(f, s, "jvp");
  const Tensor out = options.create_graph ? y : y.detach();
  if (!y.requires_grad()) return {out, Tensor::zeros(y.shape(), y.dtype())};
  // g(u) = J^T u, recorded and linear in u; d<g(u), t>/du = J t whatever u is, so u = 0.
  const Tensor u = Tensor::zeros(y.shape(), y.dtype()).requires_grad_();
  const OnTape g = with_history(
      grad({y}, s.diff, {.grad_outputs = {u}, .create_graph = true, .unused = Unused::zeros}), t);
  if (g.grads.empty()) return {out, Tensor::zeros(y.shape(), y.dtype())};
  Tensor jt =
      grad(g.grads, {u},
           {.grad_outputs = g.vectors, .create_graph = options.create_graph, .unused = Unused::zeros})[0];
  return {out, jt};
}

HvpResult hvp(const TensorFn& f, const std::vector<Tensor>& inputs, const std::vector<Tensor>& v,
              const FunctionalOptions& options) {
  const Session s(inputs, options.create_graph, "hvp");
  const std::vector<Tensor> vs = s.per_diff(v, "hvp", "vectors");
  const Tensor y = call(f, s, "hvp");
  require_scalar(y, "hvp");
  if (!y.requires_grad()) return {y, s.spread(zeros_like(s.diff)), s.spread(zeros_like(s.diff))};
  const std::vector<Tensor> g = grad({y}, s.diff, {.create_graph = true, .unused = Unused::zeros});
  const OnTape on = with_history(g, vs);
  const std::vector<Tensor> hv =
      on.grads.empty()
          ? zeros_like(s.diff)
          : grad(on.grads, s.diff,
                 {.grad_outputs = on.vectors, .create_graph = options.create_graph, .unused = Unused::zeros});
  if (options.create_graph) return {y, s.spread(g), s.spread(hv)};
  std::vector<Tensor> plain;
  for (const Tensor& gi : g) plain.push_back(gi.detach());
  return {y.detach(), s.spread(plain), s.spread(hv)};
}

std::vector<Tensor> jacobian(const TensorFn& f, const std::vector<Tensor>& inputs) {
  const Session s(inputs, false, "jacobian");
  return s.spread(rows_of(call(f, s, "jacobian"), s));
}

Tensor jacobian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return jacobian([&](const std::vector<Tensor>& in) { return f(in[0]); }, std::vector<Tensor>{x})[0];
}

std::vector<std::vector<Tensor>> hessian(const TensorFn& f, const std::vector<Tensor>& inputs) {
  const Session s(inputs, false, "hessian");
  const Tensor y = call(f, s, "hessian");
  require_scalar(y, "hessian");
  std::vector<Tensor> g = y.requires_grad()
                              ? grad({y}, s.diff, {.create_graph = true, .unused = Unused::zeros})
                              : zeros_like(s.diff);
  std::vector<std::vector<Tensor>> blocks(inputs.size(), std::vector<Tensor>(inputs.size()));
  for (size_t i = 0; i < s.diff.size(); ++i) {
    const std::vector<Tensor> row = s.spread(rows_of(g[i], s));
    for (size_t j = 0; j < inputs.size(); ++j) blocks[s.diff_index[i]][j] = row[j];
  }
  return blocks;
}

Tensor hessian(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  return hessian([&](const std::vector<Tensor>& in) { return f(in[0]); }, std::vector<Tensor>{x})[0][0];
}

}  // namespace tapegrad
