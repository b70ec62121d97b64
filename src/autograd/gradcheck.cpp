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

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts, const std::string& label) {
  GradcheckResult res;
  const std::string who = label.empty() ? std::string("gradcheck") : label;
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    if (t.dtype() != DType::f64 || !t.is_contiguous() || !t.is_leaf())
      throw Error(who + ": input " + std::to_string(i) + " must be a contiguous float64 leaf, got " + t.describe());
    checked.push_back(i);
  }
  if (checked.empty()) throw Error(who + ": no input requires grad");

  // Analytic pass, on a private tape so the caller's tape is untouched.
  Tape tape;
  TapeScope scope(tape);
  for (size_t i : checked) inputs[i].impl()->grad = Tensor();
  const Tensor out = fn(inputs);
  if (!out.defined() || out.dtype() != DType::f64) throw Error(who + ": function must return a float64 tensor");
  Generator gen(opts.seed);
  const Tensor w = Tensor::randn(out.shape(), gen, DType::f64);
  const std::vector<double> wv = w.to_vector();
  std::set<OpKind> seen;
  for (const TapeEntry& e : tape.entries()) seen.insert(e.op);
  res.ops_seen.assign(seen.begin(), seen.end());
  if (!out.requires_grad()) throw Error(who + ": output does not depend on any input that requires grad");
  backward(out, w);

  // Numeric pass.
  NoGrad no_grad;
  bool any_nonzero = false;
  res.ok = true;
  double worst_excess = -1;
  for (size_t i : checked) {
    const Tensor& x = inputs[i];
    const Tensor g = x.grad();
    const std::vector<double> analytic = g.defined() ? g.to_vector() : std::vector<double>(size_t(x.numel()), 0.0);
    double* p = x.data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      const double v = p[k];
      p[k] = v + opts.eps;
      const double lp = weighted_sum(fn(inputs), wv);
      p[k] = v - opts.eps;
      const double lm = weighted_sum(fn(inputs), wv);
      p[k] = v;
      const double numeric = (lp - lm) / (2 * opts.eps);
      const double a = analytic[size_t(k)];
      if (!std::isfinite(a) || !std::isfinite(numeric)) {
        res.ok = false;
        res.message = who + ": non-finite gradient at input " + std::to_string(i) + " index " + std::to_string(k);
        return res;
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
        res.worst_input = int(i);
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
  return res;
}

}  // namespace tapegrad
