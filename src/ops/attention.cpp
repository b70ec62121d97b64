// Scaled dot-product attention as one op: the fused kernels (kernels/simd/sdpa.hpp) forward and
// backward, so the tape keeps q, k, v, o and the rows' log-sum-exp instead of the [B, H, Tq, Tk]
// weights, and no permute of q, k, v or o is ever copied. Here only the shape checks, the mask's
// broadcast strides and the layouts handed to the kernels. Under create_graph the backward goes through
// scaled_dot_product_attention_composite (the unfused ops, recorded) so it can be differentiated again.
#include <array>
#include <cmath>
#include <functional>

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

namespace {

// One operand of the kernels: its [B, T, H, d] view, read in place (rows contiguous), and where its
// gradient goes: `col` features into the last dimension of `source`, a recorded input of the op
// (the operand itself, col 0, for scaled_dot_product_attention; the stacked projection for
// scaled_dot_product_attention_stacked).
struct Operand {
  Tensor view, source;
  int64_t col = 0;
};

// The [B, T, H, d] view of features [col, col + H d) of source [B, T, n] (its rows contiguous).
Tensor heads_view(const Tensor& source, int64_t col, int64_t H, int64_t d) {
  const Shape& s = source.strides();
  return make_view(source, {source.size(0), source.size(1), H, d}, {s[0], s[1], d, 1},
                   source.impl()->offset + col);
}

// The op on operands q [B,Tq,H,dk], k [B,Tk,H,dk], v [B,Tk,H,dv] -> o [B,Tq,H,dv], recorded with
// `inputs` (the operands' distinct sources); under create_graph the backward goes through
// `composite`, the same attention with recorded ops on the recorded inputs.
Tensor attention(const char* op, const std::array<Operand, 3>& x, std::vector<Tensor> inputs,
                 const AttentionSpec& spec, std::function<Tensor()> composite) {
  detail::check_probability(spec.dropout, std::string(op) + ": dropout");
  const Tensor q = rows_contiguous(x[0].view), k = rows_contiguous(x[1].view), v = rows_contiguous(x[2].view);
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
  if (should_record(inputs)) {
    const std::array<Tensor, 3> sources = {x[0].source, x[1].source, x[2].source};
    const std::array<int64_t, 3> cols = {x[0].col, x[1].col, x[2].col};
    record(OpKind::scaled_dot_product_attention, std::move(inputs), o,
           [sources, cols, q, k, v, mask, o, lse, l, composite](const Tensor& dy) {
             // w = softmax(s), s = scale q k^T + mask; do -> dv = w^T do, ds = w (do v^T - rowsum(do o)),
             // dq = scale ds k, dk = scale ds^T q (dropout on w as in forward)
             if (creating_graph()) return backward_through(composite, dy);
             // Each source's gradient buffer once. Operands write their columns of a fresh buffer
             // (nothing there yet: the stacked form's operands cover the buffer between them) and
             // add to an old one. Operands on the same columns (q, k, v one tensor) all add, to a
             // buffer zeroed first: the kernels write and add their three outputs interleaved.
             kernels::AttentionLayout g = l;
             kernels::AttentionStrides* strides[3] = {&g.dq, &g.dk_, &g.dv_};
             Tensor buffers[3];
             bool overwrite[3] = {false, false, false};
             auto same_place = [&](int a, int b) {
               return sources[size_t(a)].same(sources[size_t(b)]) && cols[size_t(a)] == cols[size_t(b)];
             };
             const bool aliased = same_place(0, 1) || same_place(0, 2) || same_place(1, 2);
             for (int i = 0; i < 3; ++i) {
               if (!sources[size_t(i)].requires_grad()) continue;
               int first = 0;  // the first operand with this source
               while (!sources[size_t(first)].same(sources[size_t(i)])) ++first;
               bool fresh = false;
               if (first < i)
                 buffers[i] = buffers[first], overwrite[i] = overwrite[first];
               else if (aliased)
                 buffers[i] = grad_buffer_zeroed(sources[size_t(i)]);
               else
                 buffers[i] = grad_buffer(sources[size_t(i)], &fresh), overwrite[i] = fresh;
               const Shape& bs = buffers[i].strides();
               *strides[i] = {bs[0], i == 2 ? l.dv : l.dk, bs[1]};
             }
             visit_float(dy.dtype(), "backward", [&]<class T>() {
               auto out = [&](int i) {
                 return kernels::GradOutput<T>{
                     buffers[i].defined() ? buffers[i].data<T>() + cols[size_t(i)] : nullptr, overwrite[i]};
               };
               kernels::sdpa_backward<T>(g, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse.data<T>(),
                                         dy.data<T>(), out(0), out(1), out(2));
             });
           });
  }
  return o;
}

}  // namespace

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
  // Each operand is its own source, at column 0 of its gradient buffer ([B, T, H, d], contiguous).
  return attention(op, {Operand{q_in, q_in, 0}, Operand{k_in, k_in, 0}, Operand{v_in, v_in, 0}},
                   {q_in, k_in, v_in}, spec,
                   [=] { return detail::scaled_dot_product_attention_composite(q_in, k_in, v_in, spec); });
}

Tensor scaled_dot_product_attention_stacked(const Tensor& q_in, const Tensor& kv_in, int64_t heads,
                                            const AttentionSpec& spec) {
  const char* op = "scaled_dot_product_attention_stacked";
  const bool self = !kv_in.defined();
  const Tensor& kv_src = self ? q_in : kv_in;
  detail::check_same_float(q_in, kv_src, op);
  const int64_t n = q_in.ndim() == 3 ? q_in.size(2) : 0, C = heads > 0 && n > 0 ? (self ? n / 3 : n) : 0;
  if (heads <= 0 || q_in.ndim() != 3 || kv_src.ndim() != 3 || kv_src.size(0) != q_in.size(0) ||
      C % heads != 0 || C == 0 || (self ? n != 3 * C : kv_src.size(2) != 2 * C))
    throw ShapeError(std::string(op) +
                     ": expected qkv [B,T,3C] (kv undefined) or q [B,Tq,C] and kv [B,Tk,2C], C "
                     "a multiple of heads=" +
                     std::to_string(heads) + ", got q=" + to_string(q_in.shape()) +
                     (self ? std::string() : " kv=" + to_string(kv_in.shape())));
  const int64_t d = C / heads, kc = self ? C : 0;  // k's first column in kv_src
  const Tensor qr = rows_contiguous(q_in), kvr = self ? qr : rows_contiguous(kv_src);
  const std::array<Operand, 3> x = {Operand{heads_view(qr, 0, heads, d), q_in, 0},
                                    Operand{heads_view(kvr, kc, heads, d), kv_src, kc},
                                    Operand{heads_view(kvr, kc + C, heads, d), kv_src, kc + C}};
  std::vector<Tensor> inputs = {q_in};
  if (!self) inputs.push_back(kv_in);
  auto part = [=](const Tensor& t, int64_t col) {
    return narrow(t, 2, col, C).reshape({t.size(0), t.size(1), heads, d});
  };
  return attention(op, x, std::move(inputs), spec, [=] {
    return detail::scaled_dot_product_attention_composite(part(q_in, 0), part(kv_src, kc),
                                                          part(kv_src, kc + C), spec);
  });
}

}  // namespace tapegrad
