// The kernel list: every kernel that is routed by element type, one row each, in the form
//
//   TG_KERNEL(return type, name, (parameters, written with the element type T), (argument names))
//
// This is the only place a listed kernel's signature is written outside its implementations. The
// including file defines TG_KERNEL and includes this file to generate what it needs from the rows
// (no include guard, on purpose):
//   kernels/kernels.hpp      the public function template name<T>(parameters) that routes the call
//   kernels/table.hpp        one dispatch-table entry per row, typed by the row, and KernelId::name
//   kernels/dispatch.cpp     the reference fill: entry = ref::name<T> for float and double
//   kernels/simd/install.hpp each ISA's override: entry = the SIMD version, where one is registered
// float calls go through the table (the SIMD version of the active instruction set, else the scalar
// reference); double calls always reach the scalar reference (kernels/ref/ref.hpp).
//
// To add a kernel: a row here, ref::name<T> in kernels/ref/ref.hpp and, optionally, a float32 SIMD
// version registered with TG_SIMD_KERNEL(name, function) beside it in kernels/simd/. Without one the
// kernel runs the reference on every ISA. Kernels with other routes (GEMM, strided copies) are in
// the table at the top of kernels/kernels.hpp.
//
// Conventions: row-major; sizes are int64_t; "rows x cols" means `rows` contiguous rows of `cols`.
// Backward kernels *accumulate* into their gradient outputs (dx += ...), so a tensor used twice
// gets both contributions; forward kernels overwrite their outputs.

// ---------------------------------------------------------------------------------------------
// Elementwise.

// y[i] = f(x[i])
TG_KERNEL(void, unary, (Unary op, int64_t n, const T* x, T* y), (op, n, x, y))
// dx[i] = (accumulate ? dx[i] : 0) + dy[i] * f'(x[i]); y = f(x) is passed because several
// derivatives are cheaper from it. Without accumulate, dx is never read (a fresh gradient buffer).
TG_KERNEL(void, unary_backward,
          (Unary op, int64_t n, const T* x, const T* y, const T* dy, T* dx, bool accumulate),
          (op, n, x, y, dy, dx, accumulate))
// y = x * scale + shift, elementwise (covers scalar add/mul and their backwards when accumulate).
TG_KERNEL(void, affine, (int64_t n, const T* x, T scale, T shift, T* y, bool accumulate),
          (n, x, scale, shift, y, accumulate))
// y[i] = pow(x[i], p) (reference only)
TG_KERNEL(void, pow_scalar, (int64_t n, const T* x, T p, T* y), (n, x, p, y))
// dx += dy * p * pow(x, p-1) (reference only)
TG_KERNEL(void, pow_scalar_backward, (int64_t n, const T* x, T p, const T* dy, T* dx), (n, x, p, dy, dx))
// Broadcasting binary op over an nd index space `shape` (ndim <= 8); a_strides / b_strides are in
// elements, 0 on broadcast dimensions; y is contiguous in `shape`. Fast paths inside for
// same-shape, scalar and row-broadcast operands.
TG_KERNEL(void, binary,
          (Binary op, int ndim, const int64_t* shape, const T* a, const int64_t* a_strides, const T* b,
           const int64_t* b_strides, T* y),
          (op, ndim, shape, a, a_strides, b, b_strides, y))
// Gradients of y = a op b w.r.t. a (which = 0) or b (which = 1), *before* any broadcast reduction:
// g[i] = dy[i] * d(a op b)/d(operand) at index i, written (not accumulated) to g, contiguous in shape.
TG_KERNEL(void, binary_backward,
          (Binary op, int which, int ndim, const int64_t* shape, const T* a, const int64_t* a_strides,
           const T* b, const int64_t* b_strides, const T* dy, T* g),
          (op, which, ndim, shape, a, a_strides, b, b_strides, dy, g))
// out[map(i)] += x[i] over the index space `shape`, where out_strides are 0 on the dimensions being
// reduced: the adjoint of broadcasting (sum over broadcast dimensions). out is accumulated.
TG_KERNEL(void, sum_to, (int ndim, const int64_t* shape, const T* x, const int64_t* out_strides, T* out),
          (ndim, shape, x, out_strides, out))
// y = cond != 0 ? a : b over the index space `shape`, all three strided (0 on broadcast dims); y
// contiguous (reference only).
TG_KERNEL(void, where,
          (int ndim, const int64_t* shape, const T* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* y),
          (ndim, shape, cond, cond_strides, a, a_strides, b, b_strides, y))
// y[i] = value (reference only)
TG_KERNEL(void, fill, (int64_t n, T value, T* y), (n, value, y))

// ---------------------------------------------------------------------------------------------
// Reductions over the middle axis of an (outer x n x inner) view: y[o, i] = reduce_k x[o, k, i].

TG_KERNEL(void, sum_axis, (int64_t outer, int64_t n, int64_t inner, const T* x, T* y),
          (outer, n, inner, x, y))
// Also writes the index of the first maximum (for backward).
TG_KERNEL(void, max_axis, (int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* argmax),
          (outer, n, inner, x, y, argmax))
// Sum of all n elements in a fixed order (independent of thread count; reference only).
TG_KERNEL(T, sum_all, (int64_t n, const T* x), (n, x))
// Sum of squares, for gradient-norm clipping.
TG_KERNEL(T, sum_squares, (int64_t n, const T* x), (n, x))

// ---------------------------------------------------------------------------------------------
// Softmax family over rows x cols.

// y = softmax(scale * x + mask) row-wise; the options are described at SoftmaxOptions (types.hpp).
TG_KERNEL(void, softmax, (int64_t rows, int64_t cols, const T* x, T* y, const SoftmaxOptions& opts = {}),
          (rows, cols, x, y, opts))
// dx = (accumulate ? dx : 0) + scale * y * (dy - sum(dy * y)); without accumulate dx is never read.
TG_KERNEL(void, softmax_backward,
          (int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, double scale, bool accumulate),
          (rows, cols, y, dy, dx, scale, accumulate))
// y = x - max - log(sum(exp(x - max)))
TG_KERNEL(void, log_softmax, (int64_t rows, int64_t cols, const T* x, T* y), (rows, cols, x, y))
// dx = (accumulate ? dx : 0) + dy - exp(y) * sum(dy); without accumulate dx is never read.
TG_KERNEL(void, log_softmax_backward,
          (int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, bool accumulate),
          (rows, cols, y, dy, dx, accumulate))
// Cross-entropy from logits, fused. For each row with target t != ignore_index:
//   loss_r = -(1 - eps) * logp[t] - eps / V * sum_v logp[v],  logp = log_softmax(logits_r)
// Writes loss per row (0 for ignored rows) and, if grad is non-null, the gradient of the *sum* of
// row losses scaled by grad_scale: grad_r = grad_scale * (softmax(logits_r) - (1-eps) onehot(t) - eps/V)
// (zero for ignored rows). Returns the number of non-ignored rows.
TG_KERNEL(int64_t, cross_entropy,
          (int64_t rows, int64_t V, const T* logits, const int32_t* targets, int32_t ignore_index,
           double label_smoothing, T* row_loss, T* grad, double grad_scale),
          (rows, V, logits, targets, ignore_index, label_smoothing, row_loss, grad, grad_scale))

// ---------------------------------------------------------------------------------------------
// Layer norm over the last axis: y = (x - mean) * rstd * gamma + beta. gamma/beta may be null.
// mean and rstd (rows) are saved for backward.
TG_KERNEL(void, layer_norm,
          (int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean,
           T* rstd),
          (rows, cols, x, gamma, beta, eps, y, mean, rstd))
// Accumulates dgamma and dbeta; dx is accumulated when accumulate is set, else written without being
// read (a fresh gradient buffer). Each of the three may be null to skip.
TG_KERNEL(void, layer_norm_backward,
          (int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
           T* dx, T* dgamma, T* dbeta, bool accumulate),
          (rows, cols, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, accumulate))

// ---------------------------------------------------------------------------------------------
// Indexing.

// y[i, :] = table[ids[i], :]; ids already validated by the caller.
TG_KERNEL(void, embedding, (int64_t n, int64_t dim, const T* table, const int32_t* ids, T* y),
          (n, dim, table, ids, y))
// dtable[ids[i], :] += dy[i, :] (repeated ids accumulate, in index order) over a table of `rows`
// rows (every id below it); without accumulate dtable is overwritten: rows no id names become zero.
TG_KERNEL(void, embedding_backward,
          (int64_t n, int64_t dim, int64_t rows, const int32_t* ids, const T* dy, T* dtable, bool accumulate),
          (n, dim, rows, ids, dy, dtable, accumulate))

// ---------------------------------------------------------------------------------------------
// Additive (Bahdanau) attention scores, fused: keys [B, S, A], query [B, A], v [A], all contiguous.

// scores[b, s] = sum_a v[a] tanh(keys[b, s, a] + query[b, a])
TG_KERNEL(void, additive_score,
          (int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v, T* scores),
          (B, S, A, keys, query, v, scores))
// Its backward for dscores [B, S], t = tanh(keys + query) recomputed, g = dscores[b, s] v (1 - t^2):
// dkeys[b, s, :] += g;  dquery[b, :] += sum_s g;  dv += sum_{b,s} dscores[b, s] t[b, s, :].
// Accumulates; any output may be null to skip it. dv is summed over b in order, so it does not
// depend on the thread count.
TG_KERNEL(void, additive_score_backward,
          (int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v, const T* dscores,
           T* dkeys, T* dquery, T* dv),
          (B, S, A, keys, query, v, dscores, dkeys, dquery, dv))

// ---------------------------------------------------------------------------------------------
// Scaled-dot-product attention, fused (AttentionLayout in kernels/types.hpp gives the layouts and
// options). Per (b, h) and query row i, with s_ij = scale * q_i . k_j + mask_ij (-inf where causal):
//   w_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij),  o_i = sum_j drop_ij(w_ij) v_j
// The T x T weights are never stored: forward keeps lse [B, H, Tq] (contiguous) for backward. A row
// with every key at -inf (causal with Tq > Tk) gets o_i = 0 and lse_i = +inf, as softmax defines
// such a row as zeros.
TG_KERNEL(void, sdpa_forward, (const AttentionLayout& l, const T* q, const T* k, const T* v, T* o, T* lse),
          (l, q, k, v, o, lse))
// Its backward for dout (o's layout), recomputing w from lse, with D_i = dout_i . o_i:
//   dv_j += sum_i drop(w_ij) dout_i;  ds_ij = w_ij (drop'(dout_i . v_j) - D_i);
//   dq_i += scale sum_j ds_ij k_j;  dk_j += scale sum_i ds_ij q_i
// dq, dk, dv are each written or added to as its GradOutput says, or skipped when null. Each (b, h)
// is one thread's, so no result depends on the thread count.
TG_KERNEL(void, sdpa_backward,
          (const AttentionLayout& l, const T* q, const T* k, const T* v, const T* o, const T* lse,
           const T* dout, GradOutput<T> dq, GradOutput<T> dk, GradOutput<T> dv),
          (l, q, k, v, o, lse, dout, dq, dk, dv))

// ---------------------------------------------------------------------------------------------
// GRU cell gates, fused. xp and hp [B, 3H] are the input and hidden projections in r | z | n blocks,
// their rows x_stride and h_stride apart; h [B, H] is contiguous. Writes, all contiguous:
//   rz = sigmoid(xp[:, :2H] + hp[:, :2H])   [B, 2H]: r | z, kept for backward
//   n  = tanh(xp_n + r * hp_n)              [B, H], kept for backward
//   y  = (1 - z) n + z h, computed as n + z (h - n)   [B, H]
TG_KERNEL(void, gru_cell,
          (int64_t B, int64_t H, const T* xp, int64_t x_stride, const T* hp, int64_t h_stride, const T* h,
           T* rz, T* n, T* y),
          (B, H, xp, x_stride, hp, h_stride, h, rz, n, y))
// Its backward for dy [B, H] from the saved rz and n (hp as forward; dxp, dhp [B, 3H] and dh [B, H]
// contiguous, each written or added to as its GradOutput says, or skipped when null):
//   dxp_n = dy (1 - z) (1 - n^2);  dhp_n = dxp_n r;  dxp_r = dhp_r = dxp_n hp_n r (1 - r);
//   dxp_z = dhp_z = dy (h - n) z (1 - z);  dh = dy z.
TG_KERNEL(void, gru_cell_backward,
          (int64_t B, int64_t H, const T* rz, const T* n, const T* hp, int64_t h_stride, const T* h,
           const T* dy, GradOutput<T> dxp, GradOutput<T> dhp, GradOutput<T> dh),
          (B, H, rz, n, hp, h_stride, h, dy, dxp, dhp, dh))

// ---------------------------------------------------------------------------------------------
// Optimizer updates (in place).

// Adam / AdamW over `count` tensors in one call (one thread team for all of a model's parameters).
TG_KERNEL(void, adam_update, (int64_t count, const AdamTensor<T>* tensors, const AdamParams& p),
          (count, tensors, p))

// ---------------------------------------------------------------------------------------------
// Dropout: y[i] = (accumulate ? y[i] : 0) + (keep(i) ? x[i] * (1 / (1 - p)) : 0), keep(i) iff
// uniform_at(seed, i) >= p (kernels/counter_rng.hpp). A pure function of (seed, i): the backward is the
// same call on dy with accumulate, so no mask is stored.
TG_KERNEL(void, dropout, (int64_t n, const T* x, double p, uint64_t seed, T* y, bool accumulate),
          (n, x, p, seed, y, accumulate))

// ---------------------------------------------------------------------------------------------
// Measurement, not compute: `iterations` rounds of independent multiply-adds on this ISA's widest
// registers (enough chains in flight to fill every FMA unit), written to sink[0] so they cannot be
// optimised away. Returns the floating-point operations done, 2 per lane per multiply-add. What
// runtime::peak_gflops times.
TG_KERNEL(double, fma_loop, (int64_t iterations, T* sink), (iterations, sink))
