// The softmax family, each a fused kernel for speed and numerical stability: softmax (with an
// optional scale, additive mask and causal mask fused in), log_softmax, and cross-entropy from logits.
#include <algorithm>
#include <limits>

#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// Rows of x's last axis: [.., cols] -> rows = numel / cols.
int64_t row_count(const Tensor& x) { return x.shape().at(-1) ? x.numel() / x.shape().at(-1) : 0; }

// The maximum of s over its last axis [.., 1], as a constant (no history): the shift that keeps exp in
// range. A row whose every element is -inf gets shift 0; when there is such a row and `empty` is given,
// *empty is set to 1 on those rows and 0 elsewhere (else left undefined).
Tensor row_max_constant(const Tensor& s, Tensor* empty = nullptr) {
  NoGrad no_grad;
  std::vector<double> m = max(s.detach(), -1, true).to_vector(), flags(m.size(), 0.0);
  bool any_empty = false;
  for (size_t r = 0; r < m.size(); ++r)
    if (m[r] == -std::numeric_limits<double>::infinity()) m[r] = 0, flags[r] = 1, any_empty = true;
  Shape shape = s.shape();
  shape[shape.ndim() - 1] = 1;
  if (empty && any_empty) *empty = Tensor::from_vector(flags, shape, s.dtype());
  return Tensor::from_vector(m, shape, s.dtype());
}

// 1 where query i [Tq] may see key j [Tk] (j <= i + Tk - Tq: queries aligned to the last keys), else 0.
Tensor causal_keep(int64_t tq, int64_t tk, DType dtype) {
  std::vector<double> keep(size_t(tq * tk));
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j) keep[size_t(i * tk + j)] = j <= i + tk - tq ? 1.0 : 0.0;
  return Tensor::from_vector(keep, {tq, tk}, dtype);
}

// What the fused softmax kernel computes, with recorded ops (its double backward goes through this):
// s = scale * x + mask, the causal keys set to -inf, y = exp(s - m) / sum(exp(s - m)) over the last axis,
// with m the row maximum taken as a constant: softmax is shift-invariant, so that is exact. A row with
// every key masked is zeros (its denominator gets 1 added). The mask is a constant, as in the kernel.
Tensor softmax_composite(const Tensor& x, const SoftmaxSpec& spec) {
  Tensor s = spec.scale == 1.0 ? x : mul(x, spec.scale);
  if (spec.mask.defined()) s = add(s, spec.mask.detach());
  if (spec.causal)
    s = where(causal_keep(x.shape().at(-2), x.shape().at(-1), x.dtype()), s,
              Tensor::full({}, -std::numeric_limits<double>::infinity(), x.dtype()));
  Tensor empty;
  const Tensor e = exp(sub(s, row_max_constant(s, &empty)));
  const Tensor den = sum(e, -1, true);
  return div(e, empty.defined() ? add(den, empty) : den);
}

// log_softmax with recorded ops: z - log(sum(exp(z))) over the last axis with z = x - m, m the row
// maximum as a constant (exact: log_softmax is shift-invariant).
Tensor log_softmax_composite(const Tensor& x) {
  const Tensor z = sub(x, row_max_constant(x));
  return sub(z, log(sum(exp(z), -1, true)));
}

// cross_entropy with recorded ops: -sum(log_softmax(logits) * W) where row r of the constant W is
// ((1 - eps) onehot(t_r) + eps / V) / count, and zero for an ignored target (count: the others).
// targets: contiguous int32, checked by cross_entropy.
Tensor cross_entropy_composite(const Tensor& logits, const Tensor& targets, int ignore_index, double label_smoothing) {
  const int64_t V = logits.shape().at(-1), rows = targets.numel();
  const int32_t* t = targets.data<int32_t>();
  const int64_t count = std::count_if(t, t + rows, [&](int32_t v) { return v != ignore_index; });
  std::vector<double> w(size_t(logits.numel()), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] != ignore_index)
      for (int64_t v = 0; v < V; ++v)
        w[size_t(r * V + v)] = -(label_smoothing / double(V) + (v == t[r] ? 1 - label_smoothing : 0.0)) / double(count);
  return sum(mul(log_softmax_composite(logits), Tensor::from_vector(w, logits.shape(), logits.dtype())));
}

}  // namespace

Tensor softmax(const Tensor& x_in, const SoftmaxSpec& spec) {
  detail::check_float(x_in, "softmax");
  if (x_in.ndim() == 0) throw ShapeError("softmax: expected at least one dimension, got a scalar");
  const Tensor x = detail::contiguous_data(x_in);
  const int64_t cols = x.shape().at(-1), rows = row_count(x);
  kernels::SoftmaxOptions opts;
  opts.scale = spec.scale;
  opts.causal = spec.causal;
  if (spec.causal) {
    if (x.ndim() < 2) throw ShapeError("softmax: a causal mask needs [.., Tq, Tk], got " + to_string(x.shape()));
    opts.causal_period = x.shape().at(-2);
    opts.causal_offset = cols - opts.causal_period;  // queries aligned to the last keys
  }
  Tensor mask;
  if (spec.mask.defined()) {
    if (spec.mask.dtype() != x.dtype())
      throw DTypeError("softmax: mask " + spec.mask.describe() + " and input " + x.describe() + " differ in dtype");
    const Shape b = broadcast_shapes(x.shape(), spec.mask.shape(), "softmax");
    if (b != x.shape())
      throw ShapeError("softmax: mask must broadcast to the input: x=" + to_string(x.shape()) +
                       " mask=" + to_string(spec.mask.shape()));
    // The kernel applies mask row (r % mask_rows): fine when the mask only lacks leading dims.
    // Otherwise (e.g. a key-padding mask [B,1,1,Tk]) expand it to x's shape first.
    const Shape& ms = spec.mask.shape();
    int64_t period = 1;
    bool suffix = true;
    // Usable as is when, after stripping leading ones, the mask's dims equal x's trailing dims.
    int first = 0;
    while (first < ms.ndim() && ms[first] == 1) ++first;
    for (int i = first; i < ms.ndim(); ++i) {
      const int xi = x.ndim() - ms.ndim() + i;
      if (ms[i] != x.shape()[xi]) suffix = false;
      period *= ms[i];
    }
    if (suffix && period >= cols && spec.mask.is_contiguous()) {
      mask = spec.mask;
    } else {
      mask = Tensor::empty(x.shape(), x.dtype());
      const Shape ms_strides = detail::broadcast_strides(spec.mask, x.shape());
      const Shape zero_strides = Shape(std::vector<int64_t>(size_t(x.ndim()), 0));
      visit_float(x.dtype(), "softmax", [&]<class T>() {
        const T zero = 0;
        kernels::binary<T>(kernels::Binary::add, x.ndim(), x.shape().data(), spec.mask.data<T>(), ms_strides.data(),
                           &zero, zero_strides.data(), mask.data<T>());
      });
      period = x.numel();
    }
    opts.mask = static_cast<const char*>(mask.impl()->storage->data) + mask.impl()->offset * dtype_size(mask.dtype());
    opts.mask_rows = cols ? period / cols : 0;
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  visit_float(x.dtype(), "softmax", [&]<class T>() {
    kernels::softmax<T>(rows, cols, x.data<T>(), y.data<T>(), opts);
  });
  if (should_record({&x_in})) {
    const double scale = spec.scale;
    record(OpKind::softmax, {x_in}, y, [x_in, y, rows, cols, scale, spec](const Tensor& dy) {
      // dx = scale * y * (dy - sum(dy * y))
      if (creating_graph()) return backward_through([&] { return softmax_composite(x_in, spec); }, dy);
      bool fresh = false;  // a fresh dx is written, not accumulated into (no zero-fill pass)
      Tensor dx = grad_buffer(x_in, &fresh);
      visit_float(y.dtype(), "backward", [&]<class T>() {
        kernels::softmax_backward<T>(rows, cols, y.data<T>(), dy.data<T>(), dx.data<T>(), scale, !fresh);
      });
    });
  }
  return y;
}

Tensor log_softmax(const Tensor& x_in) {
  detail::check_float(x_in, "log_softmax");
  if (x_in.ndim() == 0) throw ShapeError("log_softmax: expected at least one dimension, got a scalar");
  const Tensor x = detail::contiguous_data(x_in);
  const int64_t cols = x.shape().at(-1), rows = row_count(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  visit_float(x.dtype(), "log_softmax", [&]<class T>() {
    kernels::log_softmax<T>(rows, cols, x.data<T>(), y.data<T>());
  });
  if (should_record({&x_in})) {
    record(OpKind::log_softmax, {x_in}, y, [x_in, y, rows, cols](const Tensor& dy) {
      // dx = dy - exp(y) * sum(dy)
      if (creating_graph()) return backward_through([&] { return log_softmax_composite(x_in); }, dy);
      bool fresh = false;
      Tensor dx = grad_buffer(x_in, &fresh);
      visit_float(y.dtype(), "backward", [&]<class T>() {
        kernels::log_softmax_backward<T>(rows, cols, y.data<T>(), dy.data<T>(), dx.data<T>(), !fresh);
      });
    });
  }
  return y;
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, int ignore_index, double label_smoothing) {
  detail::check_float(logits_in, "cross_entropy");
  detail::check_defined(targets, "cross_entropy", "targets");
  auto shapes = [&] { return " logits=" + to_string(logits_in.shape()) + " targets=" + to_string(targets.shape()); };
  if (targets.dtype() != DType::i32) throw DTypeError("cross_entropy: targets must be int32, got " + targets.describe());
  if (logits_in.ndim() < 1 || targets.ndim() != logits_in.ndim() - 1)
    throw ShapeError("cross_entropy: expected logits [.., V] and targets [..]:" + shapes());
  for (int d = 0; d < targets.ndim(); ++d)
    if (targets.shape()[d] != logits_in.shape()[d])
      throw ShapeError("cross_entropy: leading dimensions differ:" + shapes());
  if (label_smoothing < 0 || label_smoothing >= 1)
    throw Error("cross_entropy: label_smoothing must be in [0, 1), got " + std::to_string(label_smoothing));
  const Tensor logits = detail::contiguous_data(logits_in);
  const Tensor tg = detail::contiguous_data(targets);
  const int64_t V = logits.shape().at(-1), rows = targets.numel();
  const int32_t* t = tg.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] != ignore_index && (t[r] < 0 || t[r] >= V))
      throw IndexError("cross_entropy: target " + std::to_string(t[r]) + " at position " + std::to_string(r) +
                       " is outside [0, " + std::to_string(V) + ")" + shapes());
  const bool recording = should_record({&logits_in});
  Tensor row_loss = Tensor::empty({rows}, logits.dtype());
  Tensor grad = recording ? Tensor::empty(logits.shape(), logits.dtype()) : Tensor();
  Tensor y = Tensor::empty({}, logits.dtype());
  visit_float(logits.dtype(), "cross_entropy", [&]<class T>() {
    // Count first so the fused gradient can be scaled by 1/count in the same pass.
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) count += t[r] != ignore_index;
    const double inv = count ? 1.0 / double(count) : 0.0;
    kernels::cross_entropy<T>(rows, V, logits.data<T>(), t, ignore_index, label_smoothing, row_loss.data<T>(),
                              recording ? grad.data<T>() : nullptr, inv);
    // Mean over non-ignored targets; an all-ignored batch has loss 0 (not NaN) and zero gradient.
    *y.data<T>() = T(double(kernels::sum_all<T>(rows, row_loss.data<T>())) * inv);
  });
  if (recording) {
    record(OpKind::cross_entropy, {logits_in}, y,
           [logits_in, grad, tg, ignore_index, label_smoothing](const Tensor& dy) {
      // dlogits = dy * (softmax(logits) - (1-eps) onehot(t) - eps/V) / count   (precomputed in forward)
      if (creating_graph())
        return backward_through(
            [&] { return cross_entropy_composite(logits_in, tg, ignore_index, label_smoothing); }, dy);
      bool fresh = false;
      Tensor dx = grad_buffer(logits_in, &fresh);
      visit_float(grad.dtype(), "backward", [&]<class T>() {
        kernels::affine<T>(grad.numel(), grad.data<T>(), *dy.data<T>(), T(0), dx.data<T>(), !fresh);
      });
    });
  }
  return y;
}

}  // namespace tapegrad
