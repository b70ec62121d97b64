// Fused recurrent-model ops: the GRU gate math and additive (Bahdanau) attention scores.
//
// Both replace a chain of small elementwise ops that an RNN seq2seq model runs at every time step:
// one tape entry instead of ten and no intermediate tensors kept alive. The GRU cell's
// transcendental functions go through the vectorised unary kernels and the rest is plain loops; the
// attention scores are one kernel each way (kernels::additive_score, which keeps no [B, S, A]
// activation: backward recomputes tanh).
#include <omp.h>

#include <algorithm>

#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// Row stride of a 2-D operand whose rows are contiguous (a narrowed or reshaped time step).
bool rows_contiguous(const Tensor& t) { return t.ndim() == 2 && (t.strides()[1] == 1 || t.size(1) == 1); }
Tensor with_contiguous_rows(const Tensor& t) { return rows_contiguous(t) ? t : t.clone(); }
int64_t row_stride(const Tensor& t) { return t.size(0) > 1 ? t.strides()[0] : t.size(1); }

// Runs body(i0, i1, thread) over [0, n) split into one contiguous range per thread: a team only when
// there is enough work, since the kernels called inside (on a thread's small slices) then run on
// one thread each instead of forking their own team for every call.
template <class F>
void parallel_rows(int64_t n, int64_t work, F&& body) {
  const int nt = work >= (int64_t(1) << 16) ? int(std::min<int64_t>(kernels::num_threads(), n)) : 1;
  if (nt <= 1) {
    if (n > 0) body(int64_t(0), n, 0);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    const int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    if (i0 < i1) body(i0, i1, t);
  }
}

}  // namespace

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
  visit_float(h.dtype(), "gru_cell", [&](auto zero) {
    using T = decltype(zero);
    const T *x = xp.data<T>(), *p = hp.data<T>(), *hv = h.data<T>();
    T *g = rz.data<T>(), *nn = n.data<T>(), *out = y.data<T>();
    parallel_rows(B, B * H * 16, [&](int64_t b0, int64_t b1, int) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t i = 0; i < 2 * H; ++i) g[b * 2 * H + i] = x[b * xs + i] + p[b * ps + i];
      kernels::unary<T>(kernels::Unary::sigmoid, (b1 - b0) * 2 * H, g + b0 * 2 * H, g + b0 * 2 * H);  // r | z
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t i = 0; i < H; ++i)
          nn[b * H + i] = x[b * xs + 2 * H + i] + g[b * 2 * H + i] * p[b * ps + 2 * H + i];
      kernels::unary<T>(kernels::Unary::tanh, (b1 - b0) * H, nn + b0 * H, nn + b0 * H);
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t i = 0; i < H; ++i) {
          const T z = g[b * 2 * H + H + i], nv = nn[b * H + i];
          out[b * H + i] = nv + z * (hv[b * H + i] - nv);  // (1 - z) n + z h
        }
    });
  });
  if (should_record({&xp_in, &hp_in, &h_in})) {
    record(OpKind::gru_cell, {xp_in, hp_in, h_in}, y, [xp_in, hp_in, h_in, hp, h, rz, n, B, H, ps](const Tensor& dy) {
      // dn = dy (1-z), dz = dy (h-n), dh = dy z;  da_n = dn (1-n^2) = dxp_n, dhp_n = da_n r;
      // dr = da_n hp_n;  da_r = dr r (1-r), da_z = dz z (1-z) (= dxp and dhp for r and z)
      visit_float(dy.dtype(), "backward", [&](auto zero) {
        using T = decltype(zero);
        const T *d = dy.data<T>(), *g = rz.data<T>(), *nn = n.data<T>(), *p = hp.data<T>(), *hv = h.data<T>();
        Tensor dxp_t, dhp_t, dh_t;
        bool fx = false, fp = false, fh = false;
        T* dxp = xp_in.requires_grad() ? (dxp_t = grad_buffer(xp_in, &fx)).template data<T>() : nullptr;
        T* dhp = hp_in.requires_grad() ? (dhp_t = grad_buffer(hp_in, &fp)).template data<T>() : nullptr;
        T* dh = h_in.requires_grad() ? (dh_t = grad_buffer(h_in, &fh)).template data<T>() : nullptr;
        // Per row: the three gate gradients and dh into a scratch row (one branch-free, vectorisable
        // loop), then written or added to each destination with a plain loop.
        Tensor scratch = Tensor::empty({kernels::num_threads(), 4, H}, dy.dtype());
        parallel_rows(B, B * H * 8, [&](int64_t b_begin, int64_t b_end, int th) {
          T* __restrict ar = scratch.data<T>() + th * 4 * H;
          T* __restrict az = ar + H;
          T* __restrict an = az + H;
          T* __restrict ahd = an + H;
          auto put = [H](T* __restrict dst, const T* __restrict src, bool fresh) {
            if (fresh)
              for (int64_t i = 0; i < H; ++i) dst[i] = src[i];
            else
              for (int64_t i = 0; i < H; ++i) dst[i] += src[i];
          };
          for (int64_t b = b_begin; b < b_end; ++b) {
            const T* __restrict gr = g + b * 2 * H;
            const T* __restrict dr = d + b * H;
            const T* __restrict nr = nn + b * H;
            const T* __restrict hr = hv + b * H;
            const T* __restrict pn = p + b * ps + 2 * H;
            for (int64_t i = 0; i < H; ++i) {
              const T dv = dr[i], r = gr[i], z = gr[H + i], nv = nr[i];
              const T da_n = dv * (T(1) - z) * (T(1) - nv * nv);
              an[i] = da_n;
              ar[i] = da_n * pn[i] * r * (T(1) - r);
              az[i] = dv * (hr[i] - nv) * z * (T(1) - z);
              ahd[i] = dv * z;
            }
            if (dxp) {
              put(dxp + b * 3 * H, ar, fx);
              put(dxp + b * 3 * H + H, az, fx);
              put(dxp + b * 3 * H + 2 * H, an, fx);
            }
            if (dhp) {
              put(dhp + b * 3 * H, ar, fp);
              put(dhp + b * 3 * H + H, az, fp);
              for (int64_t i = 0; i < H; ++i) an[i] *= gr[i];  // dhp_n = da_n r
              put(dhp + b * 3 * H + 2 * H, an, fp);
            }
            if (dh) put(dh + b * H, ahd, fh);
          }
        });
      });
    });
  }
  return y;
}

// keys [B, S, A], query [B, A], v [A] -> scores [B, S]
Tensor additive_score(const Tensor& keys_in, const Tensor& query_in, const Tensor& v_in) {
  detail::check_same_float(keys_in, query_in, "additive_score");
  detail::check_same_float(keys_in, v_in, "additive_score");
  if (keys_in.ndim() != 3 || query_in.ndim() != 2 || v_in.ndim() != 1 || query_in.size(0) != keys_in.size(0) ||
      query_in.size(1) != keys_in.size(2) || v_in.size(0) != keys_in.size(2))
    throw ShapeError("additive_score: expected keys=[B,S,A] query=[B,A] v=[A], got keys=" +
                     to_string(keys_in.shape()) + " query=" + to_string(query_in.shape()) +
                     " v=" + to_string(v_in.shape()));
  const Tensor keys = detail::contiguous_data(keys_in), query = detail::contiguous_data(query_in),
               v = detail::contiguous_data(v_in);
  const int64_t B = keys.size(0), S = keys.size(1), A = keys.size(2);
  Tensor y = Tensor::empty({B, S}, keys.dtype());
  visit_float(keys.dtype(), "additive_score", [&](auto zero) {
    using T = decltype(zero);
    kernels::additive_score<T>(B, S, A, keys.data<T>(), query.data<T>(), v.data<T>(), y.data<T>());
  });
  if (should_record({&keys_in, &query_in, &v_in})) {
    record(OpKind::additive_score, {keys_in, query_in, v_in}, y,
           [keys_in, query_in, v_in, keys, query, v, B, S, A](const Tensor& dy) {
             // t = tanh(k + q);  g = dy[b,s] v (1 - t^2) = dk;  dq[b] = sum_s g[b,s,:];  dv = sum_{b,s} dy[b,s] t
             visit_float(dy.dtype(), "backward", [&](auto zero) {
               using T = decltype(zero);
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
