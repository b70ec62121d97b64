// Scalar reference kernels: the oracle every SIMD kernel is tested against, and the double path.
//
// Plain loops written for obviousness, not speed (GEMM here is a triple loop). Same contracts as
// kernels/kernels.hpp. No OpenMP here: the reference must be deterministic and simple.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/nd_index.hpp"

namespace tapegrad::kernels::ref {

// ----------------------------------------------------------------------------------------------
// GEMM

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc, GemmEpilogue<T> ep = {}) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const T a = ta ? A[k * lda + i] : A[i * lda + k];
        const T b = tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      const T add = (ep.bias ? ep.bias[j] : T(0)) + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
      C[i * ldc + j] = gemm_activate(ep, i, j, alpha * acc + add);
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Elementwise

template <class T>
T unary_one(Unary op, T x) {
  switch (op) {
    case Unary::neg: return -x;
    case Unary::exp: return std::exp(x);
    case Unary::log: return std::log(x);
    case Unary::sqrt: return std::sqrt(x);
    case Unary::abs: return std::abs(x);
    case Unary::tanh: return std::tanh(x);
    case Unary::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case Unary::relu: return x > T(0) ? x : T(0);
    case Unary::gelu_tanh: return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x)));
    case Unary::gelu_erf: return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
    // log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|), the second term in (0, log 2]
    case Unary::softplus: return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
  }
  return x;
}

// d f(x) / dx, given x and y = f(x).
template <class T>
T unary_derivative(Unary op, T x, T y) {
  switch (op) {
    case Unary::neg: return T(-1);
    case Unary::exp: return y;                                   // d exp = exp
    case Unary::log: return T(1) / x;                            // d log = 1/x
    case Unary::sqrt: return T(0.5) / y;                         // d sqrt = 1/(2 sqrt x)
    case Unary::abs: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    case Unary::tanh: return T(1) - y * y;                       // d tanh = 1 - tanh^2
    case Unary::sigmoid: return y * (T(1) - y);                  // d sigmoid = s (1 - s)
    case Unary::relu: return x > T(0) ? T(1) : T(0);
    case Unary::gelu_tanh: {
      // d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3c x^2)
      const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x));
      return T(0.5) * (T(1) + t) +
             T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
    }
    case Unary::gelu_erf:
      // d/dx x Phi(x) = Phi(x) + x phi(x)
      return T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2))) + x * T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
    case Unary::softplus: return T(1) / (T(1) + std::exp(-x));  // d softplus = sigmoid(x)
  }
  return T(0);
}

template <class T>
void unary(Unary op, int64_t n, const T* x, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = unary_one(op, x[i]);
}

template <class T>
void unary_backward(Unary op, int64_t n, const T* x, const T* y, const T* dy, T* dx, bool accumulate) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = (accumulate ? dx[i] : T(0)) + dy[i] * unary_derivative(op, x[i], y[i]);
}

template <class T>
void affine(int64_t n, const T* x, T scale, T shift, T* y, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) y[i] = (accumulate ? y[i] : T(0)) + x[i] * scale + shift;
}

template <class T>
void pow_scalar(int64_t n, const T* x, T p, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::pow(x[i], p);
}

template <class T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* dy, T* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * p * std::pow(x[i], p - T(1));
}

template <class T>
T binary_one(Binary op, T a, T b) {
  switch (op) {
    case Binary::add: return a + b;
    case Binary::sub: return a - b;
    case Binary::mul: return a * b;
    case Binary::div: return a / b;
    case Binary::pow: return std::pow(a, b);
  }
  return T(0);
}

// d(a op b)/da (which = 0) or d(a op b)/db (which = 1).
template <class T>
T binary_partial(Binary op, int which, T a, T b) {
  switch (op) {
    case Binary::add: return T(1);
    case Binary::sub: return which == 0 ? T(1) : T(-1);
    case Binary::mul: return which == 0 ? b : a;
    case Binary::div: return which == 0 ? T(1) / b : -a / (b * b);
    case Binary::pow: return which == 0 ? b * std::pow(a, b - T(1)) : std::pow(a, b) * std::log(a);
  }
  return T(0);
}

// The strided kernels visit every index of their nd space in row-major order (kernels/nd_index.hpp);
// o[k] is operand k's offset at index i.

template <class T>
void binary(Binary op, int ndim, const int64_t* shape, const T* a, const int64_t* sa, const T* b,
            const int64_t* sb, T* y) {
  const int64_t* st[] = {sa, sb};
  nd::for_each_index(ndim, shape, 2, st, [&](int64_t i, const int64_t* o) { y[i] = binary_one(op, a[o[0]], b[o[1]]); });
}

template <class T>
void binary_backward(Binary op, int which, int ndim, const int64_t* shape, const T* a, const int64_t* sa,
                     const T* b, const int64_t* sb, const T* dy, T* g) {
  const int64_t* st[] = {sa, sb};
  nd::for_each_index(ndim, shape, 2, st,
                     [&](int64_t i, const int64_t* o) { g[i] = dy[i] * binary_partial(op, which, a[o[0]], b[o[1]]); });
}

template <class T>
void sum_to(int ndim, const int64_t* shape, const T* x, const int64_t* out_strides, T* out) {
  nd::for_each_index(ndim, shape, 1, &out_strides, [&](int64_t i, const int64_t* o) { out[o[0]] += x[i]; });
}

template <class T>
void copy_strided(int ndim, const int64_t* shape, const T* x, const int64_t* xs, T* y) {
  nd::for_each_index(ndim, shape, 1, &xs, [&](int64_t i, const int64_t* o) { y[i] = x[o[0]]; });
}

template <class T>
void where(int ndim, const int64_t* shape, const T* cond, const int64_t* cs, const T* a, const int64_t* as,
           const T* b, const int64_t* bs, T* y) {
  const int64_t* st[] = {cs, as, bs};
  nd::for_each_index(ndim, shape, 3, st,
                     [&](int64_t i, const int64_t* o) { y[i] = cond[o[0]] != T(0) ? a[o[1]] : b[o[2]]; });
}

template <class T>
void add_strided(int ndim, const int64_t* shape, const T* dy, T* dx, const int64_t* dxs) {
  nd::for_each_index(ndim, shape, 1, &dxs, [&](int64_t i, const int64_t* o) { dx[o[0]] += dy[i]; });
}

template <class T>
void write_strided(int ndim, const int64_t* shape, const T* x, T* y, const int64_t* ys) {
  nd::for_each_index(ndim, shape, 1, &ys, [&](int64_t i, const int64_t* o) { y[o[0]] = x[i]; });
}

template <class T>
void fill(int64_t n, T value, T* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

// ----------------------------------------------------------------------------------------------
// Reductions

template <class T>
void sum_axis(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      T acc = 0;
      for (int64_t k = 0; k < n; ++k) acc += x[(o * n + k) * inner + i];
      y[o * inner + i] = acc;
    }
}

template <class T>
void max_axis(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* argmax) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k)
        if (x[(o * n + k) * inner + i] > x[(o * n + best) * inner + i]) best = k;
      y[o * inner + i] = x[(o * n + best) * inner + i];
      if (argmax) argmax[o * inner + i] = best;
    }
}

template <class T>
T sum_all(int64_t n, const T* x) {
  double acc = 0;  // double accumulator: the reference should be the accurate one
  for (int64_t i = 0; i < n; ++i) acc += double(x[i]);
  return T(acc);
}

template <class T>
T sum_squares(int64_t n, const T* x) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * double(x[i]);
  return T(acc);
}

// ----------------------------------------------------------------------------------------------
// Softmax family

// True when column c of row r is masked out by the causal rule.
inline bool causal_masked(const SoftmaxOptions& o, int64_t r, int64_t c, int64_t cols) {
  if (!o.causal) return false;
  const int64_t period = o.causal_period > 0 ? o.causal_period : cols;
  return c > (r % period) + o.causal_offset;
}

template <class T>
void softmax(int64_t rows, int64_t cols, const T* x, T* y, const SoftmaxOptions& o) {
  const T* mask = static_cast<const T*>(o.mask);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T* mr = mask ? mask + (r % o.mask_rows) * cols : nullptr;
    T mx = neg_inf;
    for (int64_t c = 0; c < cols; ++c) {
      T v = causal_masked(o, r, c, cols) ? neg_inf : T(o.scale) * xr[c] + (mr ? mr[c] : T(0));
      yr[c] = v;
      mx = std::max(mx, v);
    }
    if (mx == neg_inf) {  // every column masked: define the row as all zeros, not NaN
      for (int64_t c = 0; c < cols; ++c) yr[c] = 0;
      continue;
    }
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(yr[c] - mx);
      sum += yr[c];
    }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= sum;
  }
}

template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, double scale,
                      bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *yr = y + r * cols, *dyr = dy + r * cols;
    T dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += dyr[c] * yr[c];
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] = (accumulate ? dx[r * cols + c] : T(0)) + T(scale) * yr[c] * (dyr[c] - dot);
  }
}

template <class T>
void log_softmax(int64_t rows, int64_t cols, const T* x, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    const T lse = mx + std::log(sum);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = xr[c] - lse;
  }
}

template <class T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += dy[r * cols + c];
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] =
          (accumulate ? dx[r * cols + c] : T(0)) + (dy[r * cols + c] - std::exp(y[r * cols + c]) * sum);
  }
}

template <class T>
int64_t cross_entropy(int64_t rows, int64_t V, const T* logits, const int32_t* targets, int32_t ignore_index,
                      double eps, T* row_loss, T* grad, double grad_scale) {
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * V;
    const int32_t t = targets[r];
    if (t == ignore_index) {
      row_loss[r] = 0;
      if (grad)
        for (int64_t v = 0; v < V; ++v) grad[r * V + v] = 0;
      continue;
    }
    ++counted;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, xr[v]);
    T sum = 0, sum_x = 0;
    for (int64_t v = 0; v < V; ++v) {
      sum += std::exp(xr[v] - mx);
      sum_x += xr[v];
    }
    const T lse = mx + std::log(sum);
    // -sum_v logp[v] = V * lse - sum_x
    row_loss[r] = T(1 - eps) * (lse - xr[t]) + T(eps / V) * (T(V) * lse - sum_x);
    if (grad)
      for (int64_t v = 0; v < V; ++v) {
        const T p = std::exp(xr[v] - lse);
        grad[r * V + v] = T(grad_scale) * (p - T(eps / V) - (v == t ? T(1 - eps) : T(0)));
      }
  }
  return counted;
}

// ----------------------------------------------------------------------------------------------
// Layer norm

template <class T>
void layer_norm(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean,
                T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T mu = 0;
    for (int64_t c = 0; c < cols; ++c) mu += xr[c];
    mu /= T(cols);
    T var = 0;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= T(cols);
    const T rs = T(1) / std::sqrt(var + T(eps));
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - mu) * rs;
      y[r * cols + c] = xhat * (gamma ? gamma[c] : T(1)) + (beta ? beta[c] : T(0));
    }
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean, const T* rstd,
                         const T* dy, T* dx, T* dgamma, T* dbeta, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    T sum_g = 0, sum_gx = 0;  // sum(dxhat), sum(dxhat * xhat)
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - mean[r]) * rstd[r];
      const T g = dyr[c] * (gamma ? gamma[c] : T(1));
      sum_g += g;
      sum_gx += g * xhat;
      if (dgamma) dgamma[c] += dyr[c] * xhat;
      if (dbeta) dbeta[c] += dyr[c];
    }
    if (!dx) continue;
    const T inv_n = T(1) / T(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const T xhat = (xr[c] - mean[r]) * rstd[r];
      const T g = dyr[c] * (gamma ? gamma[c] : T(1));
      dx[r * cols + c] =
          (accumulate ? dx[r * cols + c] : T(0)) + rstd[r] * (g - inv_n * sum_g - xhat * inv_n * sum_gx);
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Indexing

template <class T>
void embedding(int64_t n, int64_t dim, const T* table, const int32_t* ids, T* y) {
  if (dim == 0) return;  // then y and table may be null, and memcpy(nullptr, nullptr, 0) is undefined
  for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * dim, table + int64_t(ids[i]) * dim, sizeof(T) * dim);
}

template <class T>
void embedding_backward(int64_t n, int64_t dim, int64_t rows, const int32_t* ids, const T* dy, T* dtable,
                        bool accumulate) {
  if (!accumulate) std::fill(dtable, dtable + rows * dim, T(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < dim; ++d) dtable[int64_t(ids[i]) * dim + d] += dy[i * dim + d];
}

// ----------------------------------------------------------------------------------------------
// Additive attention scores

template <class T>
void additive_score(int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v, T* scores) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      T acc = 0;
      for (int64_t a = 0; a < A; ++a) acc += v[a] * std::tanh(keys[(b * S + s) * A + a] + query[b * A + a]);
      scores[b * S + s] = acc;
    }
}

template <class T>
void additive_score_backward(int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v,
                             const T* dscores, T* dkeys, T* dquery, T* dv) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const T ds = dscores[b * S + s];
      for (int64_t a = 0; a < A; ++a) {
        const T t = std::tanh(keys[(b * S + s) * A + a] + query[b * A + a]);
        const T g = ds * v[a] * (T(1) - t * t);
        if (dkeys) dkeys[(b * S + s) * A + a] += g;
        if (dquery) dquery[b * A + a] += g;
        if (dv) dv[a] += ds * t;
      }
    }
}

// ----------------------------------------------------------------------------------------------
// Scaled-dot-product attention, one query row at a time (the row's scores in an O(Tk) buffer)

// Offsets of row (b, h, t) of an operand laid out by s.
inline int64_t attention_row(const AttentionStrides& s, int64_t b, int64_t h, int64_t t) {
  return b * s.b + h * s.h + t * s.t;
}

// The dropout factor of weight (b, h, i, j): 0, or 1 / (1 - p) when kept.
template <class T>
T attention_keep(const AttentionLayout& l, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (l.dropout == 0) return T(1);
  const uint64_t index = uint64_t(((b * l.H + h) * l.Tq + i) * l.Tk + j);
  return uniform_at(l.dropout_seed, index) >= l.dropout ? T(1.0 / (1.0 - l.dropout)) : T(0);
}

// s_j = scale * q . k_j + mask_j for the keys row i may see (-inf for the others); returns max_j s_j.
template <class T>
T attention_scores(const AttentionLayout& l, const T* q, const T* k, int64_t b, int64_t h, int64_t i, T* s) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T* qi = q + attention_row(l.q, b, h, i);
  const T* mask = l.mask ? static_cast<const T*>(l.mask) + attention_row(l.mask_strides, b, h, i) : nullptr;
  T mx = neg_inf;
  for (int64_t j = 0; j < l.Tk; ++j) {
    if (l.causal && j > i + (l.Tk - l.Tq)) {
      s[j] = neg_inf;
      continue;
    }
    const T* kj = k + attention_row(l.k, b, h, j);
    T dot = 0;
    for (int64_t d = 0; d < l.dk; ++d) dot += qi[d] * kj[d];
    s[j] = T(l.scale) * dot + (mask ? mask[j] : T(0));
    mx = std::max(mx, s[j]);
  }
  return mx;
}

template <class T>
void sdpa_forward(const AttentionLayout& l, const T* q, const T* k, const T* v, T* o, T* lse) {
  std::vector<T> s(size_t(std::max<int64_t>(l.Tk, 1)));
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t h = 0; h < l.H; ++h)
      for (int64_t i = 0; i < l.Tq; ++i) {
        T* oi = o + attention_row(l.o, b, h, i);
        T& row_lse = lse[(b * l.H + h) * l.Tq + i];
        for (int64_t d = 0; d < l.dv; ++d) oi[d] = 0;
        const T mx = attention_scores(l, q, k, b, h, i, s.data());
        if (mx == -std::numeric_limits<T>::infinity()) {  // no key to attend to: zeros, as softmax
          row_lse = std::numeric_limits<T>::infinity();
          continue;
        }
        T sum = 0;
        for (int64_t j = 0; j < l.Tk; ++j) sum += std::exp(s[j] - mx);
        row_lse = mx + std::log(sum);
        for (int64_t j = 0; j < l.Tk; ++j) {
          const T w = std::exp(s[j] - row_lse) * attention_keep<T>(l, b, h, i, j);
          const T* vj = v + attention_row(l.v, b, h, j);
          for (int64_t d = 0; d < l.dv; ++d) oi[d] += w * vj[d];
        }
      }
}

// Zeroes the [B, H, T, d] gradient g (layout s) if it is to be overwritten, so it can be added to.
template <class T>
void attention_grad_start(const AttentionLayout& l, GradOutput<T> g, const AttentionStrides& s, int64_t T_, int64_t d) {
  if (!g.data || !g.overwrite) return;
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t h = 0; h < l.H; ++h)
      for (int64_t t = 0; t < T_; ++t) std::fill_n(g.data + attention_row(s, b, h, t), d, T(0));
}

template <class T>
void sdpa_backward(const AttentionLayout& l, const T* q, const T* k, const T* v, const T* o, const T* lse,
                   const T* dout, GradOutput<T> dq_out, GradOutput<T> dk_out, GradOutput<T> dv_out) {
  attention_grad_start(l, dq_out, l.dq, l.Tq, l.dk);
  attention_grad_start(l, dk_out, l.dk_, l.Tk, l.dk);
  attention_grad_start(l, dv_out, l.dv_, l.Tk, l.dv);
  T *dq = dq_out.data, *dk = dk_out.data, *dv = dv_out.data;
  std::vector<T> s(size_t(std::max<int64_t>(l.Tk, 1)));
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t h = 0; h < l.H; ++h)
      for (int64_t i = 0; i < l.Tq; ++i) {
        const T row_lse = lse[(b * l.H + h) * l.Tq + i];
        if (row_lse == std::numeric_limits<T>::infinity()) continue;  // a row of zeros: no gradient
        const T *qi = q + attention_row(l.q, b, h, i), *oi = o + attention_row(l.o, b, h, i);
        const T* doi = dout + attention_row(l.o, b, h, i);
        T D = 0;
        for (int64_t d = 0; d < l.dv; ++d) D += doi[d] * oi[d];
        attention_scores(l, q, k, b, h, i, s.data());
        for (int64_t j = 0; j < l.Tk; ++j) {
          const T w = std::exp(s[j] - row_lse), keep = attention_keep<T>(l, b, h, i, j);
          const T *kj = k + attention_row(l.k, b, h, j), *vj = v + attention_row(l.v, b, h, j);
          T dw = 0;  // d loss / d drop(w_ij) = dout_i . v_j
          for (int64_t d = 0; d < l.dv; ++d) dw += doi[d] * vj[d];
          const T ds = w * (keep * dw - D);
          if (dv) {
            T* g = dv + attention_row(l.dv_, b, h, j);
            for (int64_t d = 0; d < l.dv; ++d) g[d] += w * keep * doi[d];
          }
          if (dq) {
            T* g = dq + attention_row(l.dq, b, h, i);
            for (int64_t d = 0; d < l.dk; ++d) g[d] += T(l.scale) * ds * kj[d];
          }
          if (dk) {
            T* g = dk + attention_row(l.dk_, b, h, j);
            for (int64_t d = 0; d < l.dk; ++d) g[d] += T(l.scale) * ds * qi[d];
          }
        }
      }
}

// ----------------------------------------------------------------------------------------------
// GRU cell

template <class T>
void gru_cell(int64_t B, int64_t H, const T* xp, int64_t xs, const T* hp, int64_t hs, const T* h, T* rz, T* n, T* y) {
  for (int64_t b = 0; b < B; ++b) {
    const T *x = xp + b * xs, *p = hp + b * hs, *hb = h + b * H;
    T *g = rz + b * 2 * H, *nb = n + b * H;
    for (int64_t i = 0; i < 2 * H; ++i) g[i] = unary_one(Unary::sigmoid, T(x[i] + p[i]));  // r | z
    for (int64_t i = 0; i < H; ++i) nb[i] = std::tanh(T(x[2 * H + i] + g[i] * p[2 * H + i]));
    for (int64_t i = 0; i < H; ++i) y[b * H + i] = nb[i] + g[H + i] * (hb[i] - nb[i]);  // (1 - z) n + z h
  }
}

// dst (+)= v as the gradient output says.
template <class T>
void put_grad(const GradOutput<T>& g, int64_t i, T v) {
  if (g.overwrite)
    g.data[i] = v;
  else
    g.data[i] += v;
}

template <class T>
void gru_cell_backward(int64_t B, int64_t H, const T* rz, const T* n, const T* hp, int64_t hs, const T* h, const T* dy,
                       GradOutput<T> dxp, GradOutput<T> dhp, GradOutput<T> dh) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H; ++i) {
      const T d = dy[b * H + i], r = rz[b * 2 * H + i], z = rz[b * 2 * H + H + i], nv = n[b * H + i];
      const T da_n = d * (T(1) - z) * (T(1) - nv * nv);
      const T da_r = da_n * hp[b * hs + 2 * H + i] * r * (T(1) - r);
      const T da_z = d * (h[b * H + i] - nv) * z * (T(1) - z);
      const int64_t row = b * 3 * H;
      if (dxp.data) {
        put_grad(dxp, row + i, da_r);
        put_grad(dxp, row + H + i, da_z);
        put_grad(dxp, row + 2 * H + i, da_n);
      }
      if (dhp.data) {
        put_grad(dhp, row + i, da_r);
        put_grad(dhp, row + H + i, da_z);
        put_grad(dhp, row + 2 * H + i, da_n * r);
      }
      if (dh.data) put_grad(dh, b * H + i, d * z);
    }
}

// ----------------------------------------------------------------------------------------------
// Optimizer

template <class T>
void adam_update(int64_t count, const AdamTensor<T>* tensors, const AdamParams& p) {
  const double bc1 = 1.0 - std::pow(p.beta1, double(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, double(p.step));
  for (int64_t t = 0; t < count; ++t) {
    const auto [n, param, grad, m, v, decay] = tensors[t];
    const double wd = decay ? p.weight_decay : 0.0;
    for (int64_t i = 0; i < n; ++i) {
      T g = grad[i];
      if (p.decoupled)
        param[i] -= T(p.lr * wd) * param[i];  // AdamW: decay the weight, not the gradient
      else
        g += T(wd) * param[i];  // Adam with L2: decay enters the moments
      m[i] = T(p.beta1) * m[i] + T(1 - p.beta1) * g;
      v[i] = T(p.beta2) * v[i] + T(1 - p.beta2) * g * g;
      const T mhat = m[i] / T(bc1), vhat = v[i] / T(bc2);
      param[i] -= T(p.lr) * mhat / (std::sqrt(vhat) + T(p.eps));
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Dropout

template <class T>
void dropout(int64_t n, const T* x, double p, uint64_t seed, T* y, bool accumulate) {
  const T keep_scale = T(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) {
    const T v = uniform_at(seed, uint64_t(i)) >= p ? x[i] * keep_scale : T(0);
    y[i] = accumulate ? y[i] + v : v;
  }
}

// Eight scalar chains of acc = acc * a + b.
template <class T>
double fma_loop(int64_t iterations, T* sink) {
  constexpr int kChains = 8;
  T acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = T(1) + T(j) * T(1e-3);
  const T a = T(0.999999), b = T(1e-7);
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * a + b;
  T total = 0;
  for (int j = 0; j < kChains; ++j) total += acc[j];
  sink[0] = total;
  return 2.0 * kChains * double(iterations);
}

}  // namespace tapegrad::kernels::ref
