// gradcheck: analytic gradients from the tape against central finite differences in float64.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "tapegrad/autograd.hpp"

namespace tapegrad {

namespace {

// L = sum(out * W): a scalar whose gradient reaches every output element with a different weight.
// The analytic pass seeds d(out) = W, which is dL/d(out), so it needs no op of its own (autograd
// sits below the ops).
double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  const std::vector<double> v = out.to_vector();
  double acc = 0;
  for (size_t i = 0; i < v.size(); ++i) acc += v[i] * w[i];
  return acc;
}

}  // namespace

namespace {

// The inputs gradcheck differentiates: those that require grad, each a contiguous float64 leaf.
std::vector<size_t> checked_inputs(const std::vector<Tensor>& inputs, const std::string& who) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    if (t.dtype() != DType::f64 || !t.is_contiguous() || !t.is_leaf())
      throw Error(who + ": input " + std::to_string(i) + " must be a contiguous float64 leaf, got " +
                  t.describe());
    checked.push_back(i);
  }
  if (checked.empty()) throw Error(who + ": no input requires grad");
  return checked;
}

std::vector<OpKind> distinct_ops(const Tape& tape) {
  std::set<OpKind> seen;
  for (const TapeEntry& e : tape.entries()) seen.insert(e.op);
  return {seen.begin(), seen.end()};
}

// The numeric half of both checks: for every element k of every variable vars[j], the central
// difference of scalar() against analytic[j][k], scored into `res` (variable j reported as labels[j]).
void compare_with_differences(const std::vector<Tensor>& vars, const std::vector<int>& labels,
                              const std::vector<std::vector<double>>& analytic,
                              const std::function<double()>& scalar, const GradcheckOptions& opts,
                              const std::string& who, GradcheckResult& res) {
  bool any_nonzero = false;
  res.ok = true;
  double worst_excess = -1;
  for (size_t j = 0; j < vars.size(); ++j) {
    const Tensor& x = vars[j];
    double* p = x.data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      const double v = p[k];
      p[k] = v + opts.eps;
      const double lp = scalar();
      p[k] = v - opts.eps;
      const double lm = scalar();
      p[k] = v;
      const double numeric = (lp - lm) / (2 * opts.eps);
      const double a = analytic[j][size_t(k)];
      if (!std::isfinite(a) || !std::isfinite(numeric)) {
        res.ok = false;
        res.message = who + ": non-finite gradient at input " + std::to_string(labels[j]) + " index " +
                      std::to_string(k);
        return;
      }
      if (a != 0 || numeric != 0) any_nonzero = true;
      const double abs_err = std::abs(a - numeric);
      // Relative to |numeric|, floored at atol so elements whose gradient is ~0 do not dominate.
      const double rel_err = abs_err / std::max(std::abs(numeric), opts.atol);
      res.max_abs_error = std::max(res.max_abs_error, abs_err);
      res.max_rel_error = std::max(res.max_rel_error, rel_err);
      const double excess = abs_err - (opts.atol + opts.rtol * std::abs(numeric));
      if (excess > worst_excess) {
        worst_excess = excess;
        res.worst_input = labels[j];
        res.worst_index = k;
        res.analytic = a;
        res.numeric = numeric;
      }
      if (excess > 0) res.ok = false;
    }
  }
  std::ostringstream os;
  os.precision(6);
  os << who << ": worst element input " << res.worst_input << " index " << res.worst_index << " analytic "
     << res.analytic << " numeric " << res.numeric;
  res.message = os.str();
  if (!any_nonzero) {
    res.ok = false;
    res.message = who + ": vacuous check: analytic and numeric gradients are all zero";
  }
}

std::vector<double> values_or_zeros(const Tensor& g, int64_t n) {
  return g.defined() ? g.to_vector() : std::vector<double>(size_t(n), 0.0);
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts,
                          const std::string& label) {
  GradcheckResult res;
  const std::string who = label.empty() ? std::string("gradcheck") : label;
  const std::vector<size_t> checked = checked_inputs(inputs, who);

  // Analytic pass, on a private tape so the caller's tape is untouched.
  Tape tape;
  TapeScope scope(tape);
  for (size_t i : checked) inputs[i].impl()->grad = Tensor();
  const Tensor out = fn(inputs);
  if (!out.defined() || out.dtype() != DType::f64)
    throw Error(who + ": function must return a float64 tensor");
  Generator gen(opts.seed);
  const Tensor w = Tensor::randn(out.shape(), gen, DType::f64);
  const std::vector<double> wv = w.to_vector();
  res.ops_seen = distinct_ops(tape);
  if (!out.requires_grad()) throw Error(who + ": output does not depend on any input that requires grad");
  backward(out, w);

  // Numeric pass.
  NoGrad no_grad;
  std::vector<Tensor> vars;
  std::vector<int> labels;
  std::vector<std::vector<double>> analytic;
  for (size_t i : checked) {
    vars.push_back(inputs[i]);
    labels.push_back(int(i));
    analytic.push_back(values_or_zeros(inputs[i].grad(), inputs[i].numel()));
  }
  compare_with_differences(
      vars, labels, analytic, [&] { return weighted_sum(fn(inputs), wv); }, opts, who, res);
  return res;
}

GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs, const GradcheckOptions& opts,
                              const std::string& label) {
  GradcheckResult res;
  const std::string who = label.empty() ? std::string("gradgradcheck") : label;
  const std::vector<size_t> checked = checked_inputs(inputs, who);
  std::vector<Tensor> xs;
  for (size_t i : checked) xs.push_back(inputs[i]);

  // g(x, w) = d<fn(x), w>/dx, on a private tape; with create_graph it is differentiable in x and w.
  Tape tape;
  TapeScope scope(tape);
  EnableGrad enable;
  const Tensor out = fn(inputs);
  if (!out.defined() || out.dtype() != DType::f64)
    throw Error(who + ": function must return a float64 tensor");
  if (!out.requires_grad()) throw Error(who + ": output does not depend on any input that requires grad");
  Generator gen(opts.seed);
  const Tensor w = Tensor::randn(out.shape(), gen, DType::f64).requires_grad_();
  const std::vector<Tensor> g =
      grad({out}, xs, {.grad_outputs = {w}, .create_graph = true, .unused = Unused::zeros});
  res.ops_seen = distinct_ops(tape);
  std::vector<Tensor> v, g_on_tape, v_on_tape;
  for (const Tensor& gi : g) {
    v.push_back(Tensor::randn(gi.shape(), gen, DType::f64));
    if (gi.requires_grad()) g_on_tape.push_back(gi), v_on_tape.push_back(v.back());
  }
  std::vector<Tensor> vars = xs;
  vars.push_back(w);
  std::vector<int> labels;
  for (size_t i : checked) labels.push_back(int(i));
  labels.push_back(int(inputs.size()));  // w reported as the input after the last
  // Analytic: d<g, v>/d(x, w) by a first-order walk over the recorded backward (zero where g is constant).
  std::vector<std::vector<double>> analytic;
  std::vector<Tensor> a;
  if (!g_on_tape.empty()) a = grad(g_on_tape, vars, {.grad_outputs = v_on_tape, .unused = Unused::zeros});
  for (size_t j = 0; j < vars.size(); ++j)
    analytic.push_back(values_or_zeros(a.empty() ? Tensor() : a[j], vars[j].numel()));

  // Numeric: <g, v> from first-order gradients at perturbed x and w.
  const std::vector<std::vector<double>> vv = [&] {
    std::vector<std::vector<double>> r;
    for (const Tensor& t : v) r.push_back(t.to_vector());
    return r;
  }();
  auto inner = [&] {
    Tape t;
    TapeScope s(t);
    const std::vector<Tensor> gp =
        grad({fn(inputs)}, xs, {.grad_outputs = {w.detach()}, .unused = Unused::zeros});
    double acc = 0;
    for (size_t i = 0; i < gp.size(); ++i) acc += weighted_sum(gp[i], vv[i]);
    return acc;
  };
  compare_with_differences(vars, labels, analytic, inner, opts, who, res);
  return res;
}

}  // namespace tapegrad
