// Elementwise ops: broadcasting binary arithmetic, scalar variants, unary functions, where.
// Derived ops (masked_fill, the operators with a scalar on the left) compose these and need no
// backward of their own.
#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::broadcast_strides;
using detail::check_float;
using detail::check_same_float;
using detail::contiguous_data;
using detail::sum_to_shape;
using detail::visit_float;

namespace {

// t.grad += g, where g was computed in the broadcast index space g.shape(): summed back over the
// dimensions along which t was broadcast.
void accumulate_summed_grad(const Tensor& t, const Tensor& g) {
  if (g.shape() == t.shape()) {
    accumulate_grad(t, g);
    return;
  }
  Tensor dt = grad_buffer_zeroed(t);
  const Shape rs = detail::reduction_strides(t.shape(), g.shape());
  visit_float(t.dtype(), "backward", [&]<class T>() {
    kernels::sum_to<T>(g.ndim(), g.shape().data(), g.template data<T>(), rs.data(), dt.template data<T>());
  });
}

// y = a (op) b with numpy broadcasting; shapes: a, b broadcast to y.
Tensor binary_op(OpKind kind, kernels::Binary kop, const Tensor& a, const Tensor& b) {
  const char* name = op_name(kind);
  check_same_float(a, b, name);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor y = Tensor::empty(out_shape, a.dtype());
  const Shape sa = broadcast_strides(a, out_shape), sb = broadcast_strides(b, out_shape);
  visit_float(a.dtype(), name, [&]<class T>() {
    kernels::binary<T>(kop, out_shape.ndim(), out_shape.data(), a.data<T>(), sa.data(), b.data<T>(),
                       sb.data(), y.data<T>());
  });
  if (should_record({&a, &b})) {
    record(kind, {a, b}, y, [a, b, y, kop, sa, sb](const Tensor& dy) {
      // add: da = dy, db = dy;  sub: db = -dy;  mul: da = dy*b, db = dy*a;  div: da = dy/b, db = -dy*a/b^2;
      // pow: da = dy * b * a^(b-1), db = dy * a^b * log(a)   (then summed over broadcast dims)
      if (creating_graph()) {  // the same derivatives, with recorded ops
        auto send = [&](const Tensor& x, const Tensor& g) {
          if (x.requires_grad()) accumulate_grad(x, sum_to_shape(g, x.shape()));
        };
        switch (kop) {
          case kernels::Binary::add:
            send(a, dy), send(b, dy);
            break;
          case kernels::Binary::sub:
            send(a, dy), send(b, neg(dy));
            break;
          case kernels::Binary::mul:
            send(a, mul(dy, b)), send(b, mul(dy, a));
            break;
          case kernels::Binary::div:
            send(a, div(dy, b)), send(b, neg(div(mul(dy, y), b)));
            break;
          case kernels::Binary::pow:
            send(a, mul(dy, mul(b, pow(a, add(b, -1.0))))), send(b, mul(dy, mul(y, log(a))));
        }
        return;
      }
      const Tensor* inputs[2] = {&a, &b};
      for (int which = 0; which < 2; ++which) {
        const Tensor& x = *inputs[which];
        if (!x.requires_grad()) continue;
        if (kop == kernels::Binary::add || (kop == kernels::Binary::sub && which == 0)) {
          accumulate_summed_grad(x, dy);  // the first same-shape input may adopt dy's storage
          continue;
        }
        Tensor g = Tensor::empty(dy.shape(), dy.dtype());
        visit_float(dy.dtype(), "backward", [&]<class T>() {
          kernels::binary_backward<T>(kop, which, dy.ndim(), dy.shape().data(), a.data<T>(), sa.data(),
                                      b.data<T>(), sb.data(), dy.data<T>(), g.data<T>());
        });
        accumulate_summed_grad(x, g);
      }
    });
  }
  return y;
}

Tensor unary_backward(kernels::Unary kop, const Tensor& a, const Tensor& y, const Tensor& dy);

// y = f(a) elementwise.
Tensor unary_op(OpKind kind, kernels::Unary kop, const Tensor& a) {
  const char* name = op_name(kind);
  check_float(a, name);
  const Tensor x = contiguous_data(a);
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  visit_float(a.dtype(), name,
              [&]<class T>() { kernels::unary<T>(kop, x.numel(), x.data<T>(), y.data<T>()); });
  if (should_record({&a})) {
    record(kind, {a}, y, [a, x, y, kop](const Tensor& dy) {
      // da += dy * f'(x)  (the derivative table is in kernels/ref/ref.hpp: unary_derivative)
      if (creating_graph()) return accumulate_grad(a, unary_backward(kop, a, y, dy));
      bool fresh = false;
      Tensor da = grad_buffer(a, &fresh);
      visit_float(a.dtype(), "backward", [&]<class T>() {
        kernels::unary_backward<T>(kop, x.numel(), x.data<T>(), y.data<T>(), dy.data<T>(), da.data<T>(),
                                   !fresh);
      });
    });
  }
  return y;
}

// dx = dy * f'(x), the gradient of y = f(x) (unary_op), as an op of its own so that a gradient computed
// under create_graph can be differentiated again. f' is the kernels' table; the backward below adds f''
// by function, with recorded ops:
//   d(dx)/d(dy) = f'(x): this op again;   d(dx)/dx or d(dx)/dy = dy * f'' (through y where f' is in y)
Tensor unary_backward(kernels::Unary kop, const Tensor& a, const Tensor& y, const Tensor& dy) {
  const Tensor x = contiguous_data(a), yc = contiguous_data(y), g = contiguous_data(dy);
  Tensor dx = Tensor::empty(a.shape(), a.dtype());
  visit_float(a.dtype(), "unary_backward", [&]<class T>() {
    kernels::unary_backward<T>(kop, x.numel(), x.data<T>(), yc.data<T>(), g.data<T>(), dx.data<T>(), false);
  });
  if (should_record({&a, &y, &dy})) {
    record(OpKind::unary_backward, {a, y, dy}, dx, [kop, a, y, dy](const Tensor& gg) {
      if (dy.requires_grad()) accumulate_grad(dy, unary_backward(kop, a, y, gg));
      const Tensor h = mul(gg, dy);  // times f'' below
      auto to_x = [&](const Tensor& t) {
        if (a.requires_grad()) accumulate_grad(a, t);
      };
      auto to_y = [&](const Tensor& t) {
        if (y.requires_grad()) accumulate_grad(y, t);
      };
      using U = kernels::Unary;
      switch (kop) {
        case U::neg:
        case U::abs:
        case U::relu:
          break;  // f' is constant (piecewise)
        case U::exp:
          to_y(h);
          break;  // f' = y
        case U::log:
          to_x(neg(div(h, mul(a, a))));
          break;  // f' = 1/x
        case U::sqrt:
          to_y(mul(div(h, mul(y, y)), -0.5));
          break;  // f' = 0.5/y
        case U::tanh:
          to_y(mul(mul(h, y), -2.0));
          break;  // f' = 1 - y^2
        case U::sigmoid:
          to_y(mul(h, add(mul(y, -2.0), 1.0)));
          break;             // f' = y - y^2
        case U::softplus: {  // f' = s = sigmoid(x), f'' = s (1 - s)
          const Tensor sg = sigmoid(a);
          to_x(mul(h, mul(sg, add(neg(sg), 1.0))));
          break;
        }
        case U::gelu_erf: {  // f' = Phi(x) + x phi(x), f'' = phi(x) (2 - x^2)
          const Tensor x2 = mul(a, a);
          const Tensor phi = mul(exp(mul(x2, -0.5)), kernels::kInvSqrt2Pi);
          to_x(mul(h, mul(phi, add(neg(x2), 2.0))));
          break;
        }
        case U::gelu_tanh: {  // t = tanh(u), u = c (x + k x^3): f'' = (1 - t^2) (u' + x (u''/2 - t u'^2))
          const Tensor x2 = mul(a, a);
          const Tensor t = tanh(mul(add(a, mul(mul(x2, a), kernels::kGeluCubic)), kernels::kSqrt2OverPi));
          const Tensor up = mul(add(mul(x2, 3 * kernels::kGeluCubic), 1.0), kernels::kSqrt2OverPi);  // u'
          const Tensor half_upp = mul(a, 3 * kernels::kGeluCubic * kernels::kSqrt2OverPi);           // u''/2
          const Tensor inner = add(up, mul(a, sub(half_upp, mul(t, mul(up, up)))));
          to_x(mul(h, mul(add(neg(mul(t, t)), 1.0), inner)));
          break;
        }
      }
    });
  }
  return dx;
}

// y = a * scale + shift
Tensor affine_op(OpKind kind, const Tensor& a, double scale, double shift) {
  const char* name = op_name(kind);
  check_float(a, name);
  const Tensor x = contiguous_data(a);
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  visit_float(a.dtype(), name, [&]<class T>() {
    kernels::affine<T>(x.numel(), x.data<T>(), T(scale), T(shift), y.data<T>(), false);
  });
  if (should_record({&a})) {
    record(kind, {a}, y, [a, scale](const Tensor& dy) {
      // da += scale * dy
      if (creating_graph()) return accumulate_grad(a, scale == 1.0 ? dy : mul(dy, scale));
      bool fresh = false;
      Tensor da = grad_buffer(a, &fresh);
      visit_float(a.dtype(), "backward", [&]<class T>() {
        kernels::affine<T>(dy.numel(), dy.data<T>(), T(scale), T(0), da.data<T>(), !fresh);
      });
    });
  }
  return y;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op(OpKind::add, kernels::Binary::add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op(OpKind::sub, kernels::Binary::sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(OpKind::mul, kernels::Binary::mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(OpKind::div, kernels::Binary::div, a, b);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_op(OpKind::pow, kernels::Binary::pow, a, b);
}

Tensor add(const Tensor& a, double s) {
  return affine_op(OpKind::add_scalar, a, 1.0, s);
}
Tensor mul(const Tensor& a, double s) {
  return affine_op(OpKind::mul_scalar, a, s, 0.0);
}

Tensor pow(const Tensor& a, double p) {
  check_float(a, "pow_scalar");
  const Tensor x = contiguous_data(a);
  Tensor y = Tensor::empty(a.shape(), a.dtype());
  visit_float(a.dtype(), "pow_scalar",
              [&]<class T>() { kernels::pow_scalar<T>(x.numel(), x.data<T>(), T(p), y.data<T>()); });
  if (should_record({&a})) {
    record(OpKind::pow_scalar, {a}, y, [a, x, p](const Tensor& dy) {
      // da += dy * p * x^(p-1)
      if (creating_graph()) return accumulate_grad(a, mul(mul(dy, pow(a, p - 1)), p));
      Tensor da = grad_buffer_zeroed(a);
      visit_float(a.dtype(), "backward", [&]<class T>() {
        kernels::pow_scalar_backward<T>(x.numel(), x.data<T>(), T(p), dy.data<T>(), da.data<T>());
      });
    });
  }
  return y;
}

Tensor neg(const Tensor& a) {
  return unary_op(OpKind::neg, kernels::Unary::neg, a);
}
Tensor exp(const Tensor& a) {
  return unary_op(OpKind::exp, kernels::Unary::exp, a);
}
Tensor log(const Tensor& a) {
  return unary_op(OpKind::log, kernels::Unary::log, a);
}
Tensor sqrt(const Tensor& a) {
  return unary_op(OpKind::sqrt, kernels::Unary::sqrt, a);
}
Tensor abs(const Tensor& a) {
  return unary_op(OpKind::abs, kernels::Unary::abs, a);
}
Tensor tanh(const Tensor& a) {
  return unary_op(OpKind::tanh, kernels::Unary::tanh, a);
}
Tensor sigmoid(const Tensor& a) {
  return unary_op(OpKind::sigmoid, kernels::Unary::sigmoid, a);
}
Tensor relu(const Tensor& a) {
  return unary_op(OpKind::relu, kernels::Unary::relu, a);
}
Tensor gelu(const Tensor& a, GeluApprox approx) {
  return approx == GeluApprox::tanh ? unary_op(OpKind::gelu_tanh, kernels::Unary::gelu_tanh, a)
                                    : unary_op(OpKind::gelu_exact, kernels::Unary::gelu_erf, a);
}
// y = log(1 + e^a) = max(a, 0) + log1p(e^-|a|);  da = dy * sigmoid(a). Unlike PyTorch's default
// threshold = 20 it never switches to y = a: the term it drops, log1p(e^-a) < 2.1e-9 for a > 20, is
// below float32's resolution there, and float64 keeps it.
Tensor softplus(const Tensor& a) {
  return unary_op(OpKind::softplus, kernels::Unary::softplus, a);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_float(a, b, "where");
  detail::check_defined(cond, "where", "condition");
  const Shape out_shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const Tensor c = cond.dtype() == a.dtype() ? cond : cond.to(a.dtype());
  const Shape sc = broadcast_strides(c, out_shape), sa = broadcast_strides(a, out_shape),
              sb = broadcast_strides(b, out_shape);
  Tensor y = Tensor::empty(out_shape, a.dtype());
  visit_float(a.dtype(), "where", [&]<class T>() {
    kernels::where<T>(out_shape.ndim(), out_shape.data(), c.data<T>(), sc.data(), a.data<T>(), sa.data(),
                      b.data<T>(), sb.data(), y.data<T>());
  });
  if (should_record({&a, &b})) {
    record(OpKind::where, {a, b}, y, [a, b, c, sc](const Tensor& dy) {
      // da = dy where cond, else 0;  db = dy where !cond, else 0  (then summed over broadcast dims)
      if (creating_graph()) {
        const Tensor zero = Tensor::zeros({}, dy.dtype());
        if (a.requires_grad()) accumulate_grad(a, sum_to_shape(where(c, dy, zero), a.shape()));
        if (b.requires_grad()) accumulate_grad(b, sum_to_shape(where(c, zero, dy), b.shape()));
        return;
      }
      visit_float(dy.dtype(), "backward", [&]<class T>() {
        const T zero = 0;
        const Shape zs = Shape(std::vector<int64_t>(size_t(dy.ndim()), 0));
        const Shape ds = dy.strides();
        for (int which = 0; which < 2; ++which) {
          const Tensor& x = which == 0 ? a : b;
          if (!x.requires_grad()) continue;
          Tensor g = Tensor::empty(dy.shape(), dy.dtype());
          kernels::where<T>(dy.ndim(), dy.shape().data(), c.data<T>(), sc.data(),
                            which == 0 ? dy.data<T>() : &zero, which == 0 ? ds.data() : zs.data(),
                            which == 0 ? &zero : dy.data<T>(), which == 0 ? zs.data() : ds.data(),
                            g.data<T>());
          accumulate_summed_grad(x, g);
        }
      });
    });
  }
  return y;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_float(x, "masked_fill");
  detail::check_defined(mask, "masked_fill", "mask");
  const Shape out = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  if (out != x.shape())
    throw ShapeError("masked_fill: mask must broadcast to the input: x=" + to_string(x.shape()) +
                     " mask=" + to_string(mask.shape()));
  return where(mask, Tensor::full({}, value, x.dtype()), x);
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}
Tensor operator+(const Tensor& a, double s) {
  return add(a, s);
}
Tensor operator+(double s, const Tensor& a) {
  return add(a, s);
}
Tensor operator-(const Tensor& a, double s) {
  return add(a, -s);
}
Tensor operator-(double s, const Tensor& a) {
  return add(neg(a), s);
}
Tensor operator*(const Tensor& a, double s) {
  return mul(a, s);
}
Tensor operator*(double s, const Tensor& a) {
  return mul(a, s);
}
Tensor operator/(const Tensor& a, double s) {
  return mul(a, 1.0 / s);
}

}  // namespace tapegrad
