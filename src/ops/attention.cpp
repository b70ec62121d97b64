// Scaled dot-product attention as one op: the fused kernels (kernels/simd/sdpa.hpp) forward and
// backward, so the tape keeps q, k, v, o and the rows' log-sum-exp instead of the [B, H, Tq, Tk]
// weights, and no permute of q, k, v or o is ever copied. Here only the shape checks, the mask's
// broadcast strides and the layouts handed to the kernels. Under create_graph the backward goes through
// scaled_dot_product_attention_composite (the unfused ops, recorded) so it can be differentiated again.
#include <cmath>

#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// A [B, T, H, d] operand's layout for the kernels: strides of b, h, t (its last stride is 1).
kernels::AttentionStrides heads_inner(const Tensor& x) {
  return {x.strides()[0], x.strides()[2], x.strides()[1]};
}

// x itself when its last dimension is contiguous (or of size 1), else a contiguous copy.
Tensor rows_contiguous(const Tensor& x) {
  return x.shape().at(-1) <= 1 || x.strides().at(-1) == 1 ? x : x.clone();
}

}  // namespace

namespace detail {

// The fused kernels' o with recorded ops, the heads moved out to [B, H, T, d] by views:
//   o = dropout(softmax(scale q k^T + mask, causal)) v
// softmax's causal rule is the kernels' (key j masked for query i when j > i + Tk - Tq, a row with no
// key all zeros), and the dropout op on the contiguous [B, H, Tq, Tk] weights draws the kernels' mask,
// uniform_at(seed, ((b H + h) Tq + i) Tk + j) >= p, with the same factor 1 / (1 - p).
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionSpec& spec) {
  const Tensor w = softmax(matmul(permute(q, {0, 2, 1, 3}), permute(k, {0, 2, 3, 1})),
                           {spec.scale, spec.mask, spec.causal});
  return permute(matmul(dropout(w, spec.dropout, true, spec.dropout_seed), permute(v, {0, 2, 1, 3})),
                 {0, 2, 1, 3});
}

}  // namespace detail

// q [B,Tq,H,dk], k [B,Tk,H,dk], v [B,Tk,H,dv] -> o [B,Tq,H,dv]
Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionSpec& spec) {
  const char* op = "scaled_dot_product_attention";
  detail::check_same_float(q_in, k_in, op);
  detail::check_same_float(q_in, v_in, op);
  auto shapes = [&] {
    return " q=" + to_string(q_in.shape()) + " k=" + to_string(k_in.shape()) +
           " v=" + to_string(v_in.shape());
  };
  if (q_in.ndim() != 4 || k_in.ndim() != 4 || v_in.ndim() != 4 || k_in.size(0) != q_in.size(0) ||
      v_in.size(0) != q_in.size(0) || k_in.size(2) != q_in.size(2) || v_in.size(2) != q_in.size(2) ||
      k_in.size(3) != q_in.size(3) || v_in.size(1) != k_in.size(1))
    throw ShapeError(std::string(op) + ": expected q [B,Tq,H,dk], k [B,Tk,H,dk], v [B,Tk,H,dv]," + shapes());
  if (!(spec.dropout >= 0 && spec.dropout < 1))
    throw Error(std::string(op) + ": dropout must be in [0, 1), got " + std::to_string(spec.dropout));
  const Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  const int64_t B = q.size(0), Tq = q.size(1), H = q.size(2), dk = q.size(3), Tk = k.size(1), dv = v.size(3);
  kernels::AttentionLayout l;
  l.B = B, l.H = H, l.Tq = Tq, l.Tk = Tk, l.dk = dk, l.dv = dv;
  l.q = heads_inner(q), l.k = heads_inner(k), l.v = heads_inner(v);
  l.o = {Tq * H * dv, dv, H * dv};  // o and do are contiguous [B, Tq, H, dv]
  l.scale = spec.scale;
  l.causal = spec.causal;
  l.dropout = spec.dropout;
  l.dropout_seed = spec.dropout_seed;
  Tensor mask;
  if (spec.mask.defined()) {
    if (spec.mask.dtype() != q.dtype())
      throw DTypeError(std::string(op) + ": mask " + spec.mask.describe() + " and q " + q.describe() +
                       " differ in dtype");
    const Shape full({B, H, Tq, Tk});
    const Shape& ms = spec.mask.shape();
    bool broadcasts = ms.ndim() <= 4;
    for (int i = 0; broadcasts && i < ms.ndim(); ++i)
      broadcasts = ms[i] == 1 || ms[i] == full[4 - ms.ndim() + i];
    if (!broadcasts)
      throw ShapeError(std::string(op) + ": mask must broadcast to [B,H,Tq,Tk]=" + to_string(full) +
                       ", got mask=" + to_string(spec.mask.shape()));
    mask = spec.mask;
    Shape s = detail::broadcast_strides(mask, full);
    if (Tk > 1 && s[3] != 1) {  // keys not contiguous (or broadcast): materialise the whole mask
      mask = Tensor::empty(full, q.dtype());
      const Shape zero_strides({0, 0, 0, 0});
      visit_float(q.dtype(), op, [&]<class T>() {
        const T zero = 0;
        kernels::binary<T>(kernels::Binary::add, 4, full.data(), spec.mask.data<T>(), s.data(), &zero,
                           zero_strides.data(), mask.data<T>());
      });
      s = mask.strides();
    }
    l.mask_strides = {s[0], s[1], s[2]};
    l.mask =
        static_cast<const char*>(mask.impl()->storage->data) + mask.impl()->offset * dtype_size(mask.dtype());
  }
  Tensor o = Tensor::empty({B, Tq, H, dv}, q.dtype());
  Tensor lse = Tensor::empty({B, H, Tq}, q.dtype());
  visit_float(q.dtype(), op, [&]<class T>() {
    kernels::sdpa_forward<T>(l, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse.data<T>());
  });
  if (should_record({&q_in, &k_in, &v_in})) {
    record(OpKind::scaled_dot_product_attention, {q_in, k_in, v_in}, o,
           [q_in, k_in, v_in, q, k, v, mask, o, lse, l](const Tensor& dy) {
             // w = softmax(s), s = scale q k^T + mask; do -> dv = w^T do, ds = w (do v^T - rowsum(do o)),
             // dq = scale ds k, dk = scale ds^T q (dropout on w as in forward)
             if (creating_graph()) {
               const AttentionSpec spec{l.scale, mask, l.causal, l.dropout, l.dropout_seed};
               backward_through(
                   [&] { return detail::scaled_dot_product_attention_composite(q_in, k_in, v_in, spec); },
                   dy);
               return;
             }
             kernels::AttentionLayout g = l;
             struct Grad {
               Tensor buffer;
               bool fresh = false;
             };
             auto grad = [](const Tensor& x, kernels::AttentionStrides& s) {
               Grad d;
               if (!x.requires_grad()) return d;
               d.buffer = grad_buffer(x, &d.fresh);  // the kernel writes a fresh buffer, adds to an old one
               s = heads_inner(d.buffer);
               return d;
             };
             const Grad dq = grad(q_in, g.dq), dk = grad(k_in, g.dk_), dv = grad(v_in, g.dv_);
             visit_float(dy.dtype(), "backward", [&]<class T>() {
               auto out = [](const Grad& d) {
                 return kernels::GradOutput<T>{d.buffer.defined() ? d.buffer.data<T>() : nullptr, d.fresh};
               };
               kernels::sdpa_backward<T>(g, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse.data<T>(),
                                         dy.data<T>(), out(dq), out(dk), out(dv));
             });
           });
  }
  return o;
}

}  // namespace tapegrad
