// Fused recurrent-model ops: the GRU gate math and additive (Bahdanau) attention scores.
//
// Both replace a chain of small elementwise ops that an RNN seq2seq model runs at every time step:
// one tape entry instead of ten and no intermediate tensors kept alive. Each is one kernel each way:
// kernels::gru_cell (which keeps its gates r, z and n for backward) and kernels::additive_score
// (which keeps no [B, S, A] activation: backward recomputes tanh). Under create_graph their backward
// goes through a composite of recorded ops instead (gru_cell_composite, additive_score_composite:
// what the kernels compute, written out), so it can be differentiated again.
#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// Row stride of a 2-D operand whose rows are contiguous (a narrowed or reshaped time step).
bool rows_contiguous(const Tensor& t) {
  return t.ndim() == 2 && (t.strides()[1] == 1 || t.size(1) == 1);
}
Tensor with_contiguous_rows(const Tensor& t) {
  return rows_contiguous(t) ? t : t.clone();
}
int64_t row_stride(const Tensor& t) {
  return t.size(0) > 1 ? t.strides()[0] : t.size(1);
}

}  // namespace

namespace detail {

// kernels::gru_cell with recorded ops (gate order r, z, n; the kernel's h' = n + z (h - n)):
//   r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r h_n), h' = n + z (h - n)
Tensor gru_cell_composite(const Tensor& xp, const Tensor& hp, const Tensor& h) {
  const int64_t H = h.size(1);
  auto gate = [H](const Tensor& t, int i) { return narrow(t, 1, i * H, H); };
  const Tensor r = sigmoid(add(gate(xp, 0), gate(hp, 0)));
  const Tensor z = sigmoid(add(gate(xp, 1), gate(hp, 1)));
  const Tensor n = tanh(add(gate(xp, 2), mul(r, gate(hp, 2))));
  return add(n, mul(z, sub(h, n)));
}

// kernels::additive_score with recorded ops: scores[b, s] = sum_a v[a] tanh(keys[b, s, a] + query[b, a])
Tensor additive_score_composite(const Tensor& keys, const Tensor& query, const Tensor& v) {
  const Tensor t = tanh(add(keys, reshape(query, {query.size(0), 1, query.size(1)})));
  return sum(mul(t, v), 2);
}

}  // namespace detail

// xp, hp [B, 3H] (rows may be strided), h [B, H] -> h' [B, H]
Tensor gru_cell(const Tensor& xp_in, const Tensor& hp_in, const Tensor& h_in) {
  detail::check_same_float(xp_in, hp_in, "gru_cell");
  detail::check_same_float(xp_in, h_in, "gru_cell");
  const int64_t B = h_in.ndim() == 2 ? h_in.size(0) : -1, H = h_in.ndim() == 2 ? h_in.size(1) : -1;
  auto bad = [&](const Tensor& t) { return t.ndim() != 2 || t.size(0) != B || t.size(1) != 3 * H; };
  if (B < 0 || bad(xp_in) || bad(hp_in))
    throw ShapeError("gru_cell: expected xp=[B,3H] hp=[B,3H] h=[B,H], got xp=" + to_string(xp_in.shape()) +
                     " hp=" + to_string(hp_in.shape()) + " h=" + to_string(h_in.shape()));
  const Tensor xp = with_contiguous_rows(xp_in), hp = with_contiguous_rows(hp_in);
  const Tensor h = detail::contiguous_data(h_in);
  const int64_t xs = row_stride(xp), ps = row_stride(hp);
  Tensor y = Tensor::empty({B, H}, h.dtype());
  Tensor rz = Tensor::empty({B, 2 * H}, h.dtype()), n = Tensor::empty({B, H}, h.dtype());  // saved gates
  visit_float(h.dtype(), "gru_cell", [&]<class T>() {
    kernels::gru_cell<T>(B, H, xp.data<T>(), xs, hp.data<T>(), ps, h.data<T>(), rz.data<T>(), n.data<T>(),
                         y.data<T>());
  });
  if (should_record({&xp_in, &hp_in, &h_in})) {
    record(OpKind::gru_cell, {xp_in, hp_in, h_in}, y,
           [xp_in, hp_in, h_in, hp, h, rz, n, B, H, ps](const Tensor& dy) {
             // dn = dy (1-z), dz = dy (h-n), dh = dy z;  da_n = dn (1-n^2) = dxp_n, dhp_n = da_n r;
             // dr = da_n hp_n;  da_r = dr r (1-r), da_z = dz z (1-z) (= dxp and dhp for r and z)
             if (creating_graph()) {
               backward_through([&] { return detail::gru_cell_composite(xp_in, hp_in, h_in); }, dy);
               return;
             }
             visit_float(dy.dtype(), "backward", [&]<class T>() {
               auto output = [](const Tensor& t, Tensor* keep) -> kernels::GradOutput<T> {
                 if (!t.requires_grad()) return {};
                 bool fresh = false;
                 *keep = grad_buffer(t, &fresh);
                 return {keep->template data<T>(), fresh};
               };
               Tensor dxp, dhp, dh;
               kernels::gru_cell_backward<T>(B, H, rz.data<T>(), n.data<T>(), hp.data<T>(), ps, h.data<T>(),
                                             dy.data<T>(), output(xp_in, &dxp), output(hp_in, &dhp),
                                             output(h_in, &dh));
             });
           },
           {rz, n, hp, h});  // the gates, and the copies made of strided inputs (views of them otherwise)
  }
  return y;
}

// keys [B, S, A], query [B, A], v [A] -> scores [B, S]
Tensor additive_score(const Tensor& keys_in, const Tensor& query_in, const Tensor& v_in) {
  detail::check_same_float(keys_in, query_in, "additive_score");
  detail::check_same_float(keys_in, v_in, "additive_score");
  if (keys_in.ndim() != 3 || query_in.ndim() != 2 || v_in.ndim() != 1 ||
      query_in.size(0) != keys_in.size(0) || query_in.size(1) != keys_in.size(2) ||
      v_in.size(0) != keys_in.size(2))
    throw ShapeError(
        "additive_score: expected keys=[B,S,A] query=[B,A] v=[A], got keys=" + to_string(keys_in.shape()) +
        " query=" + to_string(query_in.shape()) + " v=" + to_string(v_in.shape()));
  const Tensor keys = detail::contiguous_data(keys_in), query = detail::contiguous_data(query_in),
               v = detail::contiguous_data(v_in);
  const int64_t B = keys.size(0), S = keys.size(1), A = keys.size(2);
  Tensor y = Tensor::empty({B, S}, keys.dtype());
  visit_float(keys.dtype(), "additive_score", [&]<class T>() {
    kernels::additive_score<T>(B, S, A, keys.data<T>(), query.data<T>(), v.data<T>(), y.data<T>());
  });
  if (should_record({&keys_in, &query_in, &v_in})) {
    record(OpKind::additive_score, {keys_in, query_in, v_in}, y,
           [keys_in, query_in, v_in, keys, query, v, B, S, A](const Tensor& dy) {
             // t = tanh(k + q);  g = dy[b,s] v (1 - t^2) = dk;  dq[b] = sum_s g[b,s,:];  dv = sum_{b,s}
             // dy[b,s] t
             if (creating_graph()) {
               backward_through([&] { return detail::additive_score_composite(keys_in, query_in, v_in); },
                                dy);
               return;
             }
             visit_float(dy.dtype(), "backward", [&]<class T>() {
               // The kernel accumulates: a new gradient buffer starts from zero.
               const Tensor dk = keys_in.requires_grad() ? grad_buffer_zeroed(keys_in) : Tensor();
               const Tensor dq = query_in.requires_grad() ? grad_buffer_zeroed(query_in) : Tensor();
               const Tensor dv = v_in.requires_grad() ? grad_buffer_zeroed(v_in) : Tensor();
               T* dkp = dk.defined() ? dk.data<T>() : nullptr;
               T* dqp = dq.defined() ? dq.data<T>() : nullptr;
               T* dvp = dv.defined() ? dv.data<T>() : nullptr;
               kernels::additive_score_backward<T>(B, S, A, keys.data<T>(), query.data<T>(), v.data<T>(),
                                                   dy.data<T>(), dkp, dqp, dvp);
             });
           });
  }
  return y;
}

}  // namespace tapegrad
