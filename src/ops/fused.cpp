// Fused recurrent-model ops: the GRU gate math and additive (Bahdanau) attention scores.
//
// Both replace a chain of small elementwise ops that an RNN seq2seq model runs at every time step:
// one tape entry instead of ten, no intermediate tensors kept alive, and for the attention scores no
// [B, S, A] activation saved at all (backward recomputes tanh chunk by chunk in cache). The
// transcendental functions go through the vectorised unary kernels; the rest is plain loops.
#include <omp.h>

#include <algorithm>

#include "op_util.hpp"

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

int team_size(int64_t n, int64_t work) {
  return work >= (int64_t(1) << 16) ? int(std::min<int64_t>(kernels::num_threads(), std::max<int64_t>(n, 1))) : 1;
}

// Gradient buffer of `t` and whether it must be overwritten (fresh) rather than added to.
template <class T>
T* grad_target(const Tensor& t, Tensor* keep, bool* fresh) {
  *keep = grad_buffer(t, fresh);
  return keep->template data<T>();
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
        T* dxp = xp_in.requires_grad() ? grad_target<T>(xp_in, &dxp_t, &fx) : nullptr;
        T* dhp = hp_in.requires_grad() ? grad_target<T>(hp_in, &dhp_t, &fp) : nullptr;
        T* dh = h_in.requires_grad() ? grad_target<T>(h_in, &dh_t, &fh) : nullptr;
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
  // Batch rows per chunk: a chunk's tanh values ([bc, S, A]) stay in L1/L2 between passes.
  const int64_t bc = std::clamp<int64_t>(2048 / std::max<int64_t>(S * A, 1), 1, std::max<int64_t>(B, 1));
  Tensor y = Tensor::empty({B, S}, keys.dtype());
  // tanh(keys[b0:b0+rows] + query[b0:b0+rows]) -> t
  auto tanh_chunk = [S, A](auto* t, const auto* k, const auto* q, int64_t b0, int64_t rows) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(k)>>;
    const int64_t shape[3] = {rows, S, A}, ks[3] = {S * A, A, 1}, qs[3] = {A, 0, 1};
    kernels::binary<T>(kernels::Binary::add, 3, shape, k + b0 * S * A, ks, q + b0 * A, qs, t);
    kernels::unary<T>(kernels::Unary::tanh, rows * S * A, t, t);
  };
  visit_float(keys.dtype(), "additive_score", [&](auto zero) {
    using T = decltype(zero);
    const int64_t chunks = (B + bc - 1) / bc;
    const int nt = team_size(chunks, B * S * A);
    Tensor tmp = Tensor::empty({nt, 2, bc, S, A}, keys.dtype());
    parallel_rows(chunks, B * S * A, [&](int64_t c0, int64_t c1, int th) {
    T* t = tmp.data<T>() + th * 2 * bc * S * A;
    T* tv = t + bc * S * A;
    for (int64_t b0 = c0 * bc; b0 < std::min(B, c1 * bc); b0 += bc) {
      const int64_t rows = std::min(bc, B - b0);
      tanh_chunk(t, keys.data<T>(), query.data<T>(), b0, rows);
      // scores[b, s] = tanh(..)[b, s, :] . v  (a row-broadcast multiply and row sums: ~3x a GEMV here)
      const int64_t shape[2] = {rows * S, A}, ts[2] = {A, 1}, vs[2] = {0, 1};
      kernels::binary<T>(kernels::Binary::mul, 2, shape, t, ts, v.data<T>(), vs, tv);
      kernels::sum_axis<T>(rows * S, A, 1, tv, y.data<T>() + b0 * S);
    }
    });
  });
  if (should_record({&keys_in, &query_in, &v_in})) {
    record(OpKind::additive_score, {keys_in, query_in, v_in}, y,
           [keys_in, query_in, v_in, keys, query, v, B, S, A, bc, tanh_chunk](const Tensor& dy) {
             // t = tanh(k + q);  dv = sum_{b,s} dy[b,s] t[b,s,:];  g = dy[b,s] v (1 - t^2) = dk;  dq[b] = sum_s g[b,s,:]
             visit_float(dy.dtype(), "backward", [&](auto zero) {
               using T = decltype(zero);
               Tensor dk_t, dq_t, dv_t;
               bool fk = false, fq = false, fv = false;
               T* dk = keys_in.requires_grad() ? grad_target<T>(keys_in, &dk_t, &fk) : nullptr;
               T* dq = query_in.requires_grad() ? grad_target<T>(query_in, &dq_t, &fq) : nullptr;
               T* dv = v_in.requires_grad() ? grad_target<T>(v_in, &dv_t, &fv) : nullptr;
               // Chunks run in parallel; each writes its own dv row, summed in chunk order afterwards
               // (the result does not depend on the thread count).
               const int64_t chunks = (B + bc - 1) / bc;
               const int nt = team_size(chunks, B * S * A);
               Tensor tmp = Tensor::empty({nt, 3, bc, S, A}, dy.dtype());
               Tensor cols = Tensor::empty({nt, bc, A}, dy.dtype());
               Tensor dv_rows = dv ? Tensor::empty({chunks, A}, dy.dtype()) : Tensor();
               const T* d = dy.data<T>();
               parallel_rows(chunks, B * S * A, [&](int64_t c0, int64_t c1, int th) {
               T* t = tmp.data<T>() + th * 3 * bc * S * A;
               T* u = t + bc * S * A;
               T* g = u + bc * S * A;
               T* col = cols.data<T>() + th * bc * A;
               for (int64_t c = c0; c < c1; ++c) {
                 const int64_t b0 = c * bc, rows = std::min(bc, B - b0), n = rows * S * A;
                 tanh_chunk(t, keys.data<T>(), query.data<T>(), b0, rows);
                 if (dv)  // dv_c[1, A] = dy[1, rows*S] @ t[rows*S, A]
                   kernels::gemm<T>(false, false, 1, A, rows * S, T(1), d + b0 * S, rows * S, t, A, T(0),
                                    dv_rows.data<T>() + c * A, A);
                 if (!dk && !dq) continue;
                 // u = dy[b,s] v[a];  g = u (1 - t^2)
                 const int64_t shape[2] = {rows * S, A}, ds[2] = {1, 0}, vs[2] = {0, 1};
                 kernels::binary<T>(kernels::Binary::mul, 2, shape, d + b0 * S, ds, v.data<T>(), vs, u);
                 kernels::fill<T>(n, T(0), g);
                 kernels::unary_backward<T>(kernels::Unary::tanh, n, t, t, u, g);
                 if (dk) kernels::affine<T>(n, g, T(1), T(0), dk + b0 * S * A, !fk);
                 if (dq) {
                   kernels::sum_axis<T>(rows, S, A, g, col);
                   kernels::affine<T>(rows * A, col, T(1), T(0), dq + b0 * A, !fq);
                 }
               }
               });
               if (dv) {
                 const T* r = dv_rows.data<T>();
                 for (int64_t a = 0; a < A; ++a) {
                   T s = fv ? T(0) : dv[a];
                   for (int64_t c = 0; c < chunks; ++c) s += r[c * A + a];
                   dv[a] = s;
                 }
               }
             });
           });
  }
  return y;
}

}  // namespace tapegrad
