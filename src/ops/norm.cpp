// Layer normalisation over the last axis, fused forward and backward.
#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// What the fused kernels compute, with recorded ops (layer_norm's double backward goes through this):
// y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias over the last axis, var the biased variance.
Tensor layer_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor xc = sub(x, mean(x, -1, true));
  Tensor y = mul(xc, pow(add(mean(mul(xc, xc), -1, true), eps), -0.5));
  if (weight.defined()) y = mul(y, weight);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace

// x [.., C], weight [C], bias [C] (either may be undefined) -> y [.., C]
Tensor layer_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_float(x_in, "layer_norm");
  if (x_in.ndim() == 0) throw ShapeError("layer_norm: expected at least one dimension, got a scalar");
  const int64_t C = x_in.shape().at(-1);
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    detail::check_same_float(x_in, *p, "layer_norm");
    if (p->ndim() != 1 || p->size(0) != C)
      throw ShapeError("layer_norm: weight and bias must be [" + std::to_string(C) + "] for x=" +
                       to_string(x_in.shape()) + ", got " + to_string(p->shape()));
  }
  if (eps <= 0) throw Error("layer_norm: eps must be positive, got " + std::to_string(eps));
  const Tensor x = detail::contiguous_data(x_in);
  const Tensor w = weight.defined() ? detail::contiguous_data(weight) : Tensor();
  const Tensor b = bias.defined() ? detail::contiguous_data(bias) : Tensor();
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({rows}, x.dtype()), rstd = Tensor::empty({rows}, x.dtype());
  visit_float(x.dtype(), "layer_norm", [&]<class T>() {
    kernels::layer_norm<T>(rows, C, x.data<T>(), w.defined() ? w.data<T>() : nullptr,
                           b.defined() ? b.data<T>() : nullptr, eps, y.data<T>(), mean.data<T>(), rstd.data<T>());
  });
  if (should_record({&x_in, &weight, &bias})) {
    std::vector<Tensor> inputs = {x_in};
    if (weight.defined()) inputs.push_back(weight);
    if (bias.defined()) inputs.push_back(bias);
    record(OpKind::layer_norm, std::move(inputs), y,
           [x_in, x, weight, w, bias, mean, rstd, rows, C, eps](const Tensor& dy) {
      // xhat = (x - mean) * rstd;  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight;
      // dweight = sum_rows(dy * xhat);  dbias = sum_rows(dy)
      if (creating_graph()) return backward_through([&] { return layer_norm_composite(x_in, weight, bias, eps); }, dy);
      bool fresh = false;  // a fresh dx is written, not accumulated into (no zero-fill pass)
      Tensor dx = x_in.requires_grad() ? grad_buffer(x_in, &fresh) : Tensor();
      Tensor dw = weight.defined() && weight.requires_grad() ? grad_buffer_zeroed(weight) : Tensor();
      Tensor db = bias.defined() && bias.requires_grad() ? grad_buffer_zeroed(bias) : Tensor();
      visit_float(x.dtype(), "backward", [&]<class T>() {
        kernels::layer_norm_backward<T>(
            rows, C, x.data<T>(), w.defined() ? w.data<T>() : nullptr, mean.data<T>(), rstd.data<T>(),
            dy.data<T>(), dx.defined() ? dx.data<T>() : nullptr, dw.defined() ? dw.data<T>() : nullptr,
            db.defined() ? db.data<T>() : nullptr, !fresh);
      });
    });
  }
  return y;
}

}  // namespace tapegrad
