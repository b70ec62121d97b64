// Reductions: sum and max over one axis or over everything; mean composes sum.
#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

struct AxisSplit {
  int axis;
  int64_t outer = 1, n = 1, inner = 1;
  Shape out;  // with or without the reduced dim
};

AxisSplit split_axis(const Tensor& a, int axis, bool keepdim, const char* op) {
  AxisSplit s;
  s.axis = normalize_axis(axis, a.ndim(), op, a.shape());
  for (int d = 0; d < a.ndim(); ++d) {
    const int64_t v = a.shape()[d];
    if (d < s.axis) s.outer *= v;
    else if (d == s.axis) s.n = v;
    else s.inner *= v;
    if (d != s.axis) s.out.push_back(v);
    else if (keepdim) s.out.push_back(1);
  }
  return s;
}

// a's shape with the reduced axis of `s` kept as 1: where a reduction's dy broadcasts back from.
Shape keepdim_shape(const Tensor& a, const AxisSplit& s) {
  Shape k = a.shape();
  k[s.axis] = 1;
  return k;
}

}  // namespace

Tensor sum(const Tensor& a) {
  detail::check_float(a, "sum_all");
  const Tensor x = detail::contiguous_data(a);
  Tensor y = Tensor::empty({}, a.dtype());
  visit_float(a.dtype(), "sum_all", [&]<class T>() {
    *y.data<T>() = kernels::sum_all<T>(x.numel(), x.data<T>());
  });
  if (should_record({&a})) {
    record(OpKind::sum_all, {a}, y, [a](const Tensor& dy) {
      // da[i] += dy
      if (creating_graph()) return accumulate_grad(a, add(Tensor::zeros(a.shape(), a.dtype()), dy));
      Tensor da = grad_buffer_zeroed(a);
      visit_float(a.dtype(), "backward", [&]<class T>() {
        kernels::affine<T>(da.numel(), da.data<T>(), T(1), *dy.data<T>(), da.data<T>(), false);
      });
    });
  }
  return y;
}

Tensor sum(const Tensor& a, int axis, bool keepdim) {
  detail::check_float(a, "sum_axis");
  const AxisSplit s = split_axis(a, axis, keepdim, "sum_axis");
  const Tensor x = detail::contiguous_data(a);
  Tensor y = Tensor::empty(s.out, a.dtype());
  visit_float(a.dtype(), "sum_axis", [&]<class T>() {
    kernels::sum_axis<T>(s.outer, s.n, s.inner, x.data<T>(), y.data<T>());
  });
  if (should_record({&a})) {
    record(OpKind::sum_axis, {a}, y, [a, s](const Tensor& dy) {
      // da[o, k, i] += dy[o, i]: broadcast dy back along the reduced axis
      if (creating_graph())  // the broadcast as an add of zeros, dy with the axis kept as 1
        return accumulate_grad(a, add(Tensor::zeros(a.shape(), a.dtype()), reshape(dy, keepdim_shape(a, s))));
      Tensor da = grad_buffer_zeroed(a);
      const Shape shape{s.outer, s.n, s.inner};
      const Shape da_strides{s.n * s.inner, s.inner, 1}, dy_strides{s.inner, 0, 1};
      visit_float(a.dtype(), "backward", [&]<class T>() {
        kernels::binary<T>(kernels::Binary::add, 3, shape.data(), da.data<T>(), da_strides.data(), dy.data<T>(),
                           dy_strides.data(), da.data<T>());
      });
    });
  }
  return y;
}

Tensor mean(const Tensor& a) {
  detail::check_float(a, "mean");
  return mul(sum(a), 1.0 / double(std::max<int64_t>(a.numel(), 1)));
}

Tensor mean(const Tensor& a, int axis, bool keepdim) {
  detail::check_float(a, "mean");
  const int ax = normalize_axis(axis, a.ndim(), "mean", a.shape());
  return mul(sum(a, ax, keepdim), 1.0 / double(std::max<int64_t>(a.shape()[ax], 1)));
}

Tensor max(const Tensor& a, int axis, bool keepdim) {
  detail::check_float(a, "max_axis");
  const AxisSplit s = split_axis(a, axis, keepdim, "max_axis");
  if (s.n == 0) throw ShapeError("max_axis: cannot reduce an empty axis of shape " + to_string(a.shape()));
  const Tensor x = detail::contiguous_data(a);
  Tensor y = Tensor::empty(s.out, a.dtype());
  auto argmax = std::make_shared<std::vector<int64_t>>(size_t(s.outer * s.inner));
  visit_float(a.dtype(), "max_axis", [&]<class T>() {
    kernels::max_axis<T>(s.outer, s.n, s.inner, x.data<T>(), y.data<T>(), argmax->data());
  });
  if (should_record({&a})) {
    record(OpKind::max_axis, {a}, y, [a, s, argmax](const Tensor& dy) {
      // da[o, argmax[o, i], i] += dy[o, i]  (the first maximum takes the whole gradient)
      if (creating_graph()) {  // a constant one-hot mask of the maxima times dy broadcast along the axis
        Tensor mask = Tensor::zeros(a.shape(), a.dtype());
        visit_float(a.dtype(), "backward", [&]<class T>() {
          for (int64_t o = 0; o < s.outer; ++o)
            for (int64_t i = 0; i < s.inner; ++i)
              mask.data<T>()[(o * s.n + (*argmax)[size_t(o * s.inner + i)]) * s.inner + i] = T(1);
        });
        return accumulate_grad(a, mul(mask, reshape(dy, keepdim_shape(a, s))));
      }
      Tensor da = grad_buffer_zeroed(a);
      visit_float(a.dtype(), "backward", [&]<class T>() {
        T* d = da.data<T>();
        const T* g = dy.data<T>();
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t i = 0; i < s.inner; ++i)
            d[(o * s.n + (*argmax)[size_t(o * s.inner + i)]) * s.inner + i] += g[o * s.inner + i];
      });
    });
  }
  return y;
}

Tensor max(const Tensor& a) {
  detail::check_float(a, "max");
  if (a.numel() == 0) throw ShapeError("max: cannot reduce an empty tensor of shape " + to_string(a.shape()));
  return reshape(max(reshape(a, {-1}), 0, false), {});
}

}  // namespace tapegrad
