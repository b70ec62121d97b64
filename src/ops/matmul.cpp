// matmul (2-D and batched with broadcasting over leading dims) and linear (x W^T + b, one GEMM).
//
// Operands whose last two dims are a transposed view are handed to GEMM as transposes rather than
// copied; batch dims that are laid out uniformly collapse into one strided batched GEMM; a weight
// shared by every batch row folds the batch into M, so [B,T,C] @ [C,N] is a single GEMM.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>

#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// A stack of matrices as GEMM sees it: the last two dims of a tensor, possibly transposed, with
// per-batch-dim strides aligned to some loop batch shape (0 where broadcast).
struct MatrixOperand {
  Tensor t;            // keeps the data alive; may be a view
  bool trans = false;  // stored column-major: rows are strided by 1
  int64_t ld = 0;
  int64_t rows = 0, cols = 0;  // logical, after the transpose
};

// Describes the last two dims of `t` for GEMM, copying only when neither layout is usable.
MatrixOperand as_matrix(const Tensor& t) {
  const int n = t.ndim();
  const int64_t r = t.shape()[n - 2], c = t.shape()[n - 1];
  const int64_t sr = t.strides()[n - 2], sc = t.strides()[n - 1];
  if ((sc == 1 || c == 1) && sr >= c) return {t, false, r == 1 ? std::max<int64_t>(c, 1) : sr, r, c};
  if ((sr == 1 || r == 1) && sc >= r) return {t, true, c == 1 ? std::max<int64_t>(r, 1) : sc, r, c};
  const Tensor cc = t.clone();
  return {cc, false, std::max<int64_t>(c, 1), r, c};
}

// Strides of t's batch dims (all but the last two) read in the loop batch shape `batch`.
Shape batch_strides(const Tensor& t, const Shape& batch) {
  Shape s = batch;
  const int tb = t.ndim() - 2, off = batch.ndim() - tb;
  for (int i = 0; i < batch.ndim(); ++i) {
    const int j = i - off;
    s[i] = (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
  }
  return s;
}

// C[b] = op(A[b]) op(B[b]) + beta * C[b] for every index b of `batch`, with C strided by
// `c_strides` (0 on dims being summed over, in which case beta must be 1 and C pre-initialised).
// The kernels merge the batch dims and pick the batched GEMM (kernels::gemm_nd_batched).
template <class T>
void gemm_over_batch(const Shape& batch, const MatrixOperand& A, const MatrixOperand& B, T* C, int64_t ldc,
                     const Shape& c_strides, T beta) {
  const Shape sa = batch_strides(A.t, batch), sb = batch_strides(B.t, batch);
  kernels::gemm_nd_batched<T>(batch.ndim(), batch.data(), A.trans, B.trans, A.rows, B.cols, A.cols, T(1),
                              A.t.data<T>(), A.ld, sa.data(), B.t.data<T>(), B.ld, sb.data(), beta, C, ldc,
                              c_strides.data());
}

// A [.., M, K] that is row-major with its batch dims stacked on its rows, viewed as one [rows, K]
// matrix; undefined operand if its layout does not allow that.
bool foldable_rows(const Tensor& t) {
  if (t.ndim() < 2) return false;
  const int n = t.ndim();
  if (t.strides()[n - 1] != 1) return false;
  int64_t expect = t.strides()[n - 2] * t.shape()[n - 2];
  for (int i = n - 3; i >= 0; --i) {
    if (t.shape()[i] != 1 && t.strides()[i] != expect) return false;
    expect *= t.shape()[i];
  }
  return true;
}

MatrixOperand fold_rows(const Tensor& t) {
  const int n = t.ndim();
  const int64_t K = t.shape()[n - 1];
  return {t, false, std::max<int64_t>(t.strides()[n - 2], K), t.numel() / std::max<int64_t>(K, 1), K};
}

MatrixOperand transposed(MatrixOperand m) {
  m.trans = !m.trans;
  std::swap(m.rows, m.cols);
  return m;
}

// out (+)= A @ B over broadcast batches; `out` is contiguous with shape batch + [M, N], or, when
// reducing, a smaller shape whose batch dims are 1/missing where A and B's batch is summed.
template <class T>
void matmul_into(const MatrixOperand& A, const MatrixOperand& B, const Tensor& out, bool accumulate) {
  const Shape& os = out.shape();
  const int64_t M = A.rows, N = B.cols;
  // Loop batch: broadcast of A's and B's batch dims.
  Shape ab(std::span<const int64_t>(A.t.shape().data(), size_t(A.t.ndim() - 2)));
  Shape bb(std::span<const int64_t>(B.t.shape().data(), size_t(B.t.ndim() - 2)));
  const Shape batch = broadcast_shapes(ab, bb, "matmul");
  // C strides over the loop batch: contiguous where out has the dim, 0 where it is summed.
  Shape ob(std::span<const int64_t>(os.data(), size_t(os.ndim() - 2)));
  const Shape cs_full = contiguous_strides(os);
  Shape cs = batch;
  bool reducing = false;
  for (int i = 0; i < batch.ndim(); ++i) {
    const int j = i - (batch.ndim() - ob.ndim());
    const bool present = j >= 0 && ob[j] == batch[i];
    cs[i] = present ? cs_full[j] : 0;
    if (!present && batch[i] != 1) reducing = true;
  }
  T* c = out.data<T>();
  if (reducing && !accumulate) {
    kernels::fill<T>(out.numel(), T(0), c);
    accumulate = true;
  }
  gemm_over_batch<T>(batch, A, B, c, std::max<int64_t>(N, 1), cs, accumulate ? T(1) : T(0));
  (void)M;
}

// dB for the many products of a few rows each that share B [Bt, K, N] within one backward (an
// attention RNN's context weights [Bt, 1, S] x the encoder states [Bt, S, H], once per decoder step).
// Each product alone adds A[b]^T dC[b], a rank-M update that reads and writes all of dB; here their
// rows wait and are summed as one batched GEMM of depth R (all rows so far): dB[b] += As[b]^T Cs[b]
// with As [R, Bt, K] and Cs [R, Bt, N] stacked row by row. Same sum, other order. At most
// kStackedRows rows wait at a time (then they are summed and the stack starts again).
constexpr int64_t kStackedRowsBelow = 16;  // products of fewer rows than this (per batch matrix) wait
constexpr int64_t kStackedRows = 256;

struct StackedRowsGrad : detail::DeferredGrad {
  Tensor b;
  std::vector<std::pair<Tensor, Tensor>> uses;  // A [Bt, M, K] (any strides), dC [Bt, M, N] (contiguous)
  int64_t rows = 0;
  explicit StackedRowsGrad(Tensor b_) : b(std::move(b_)) {}

  void add(const Tensor& a, const Tensor& dc) {
    uses.emplace_back(a, dc.is_contiguous() ? dc : dc.clone());
    if ((rows += a.size(1)) >= kStackedRows) settle();
  }
  void settle() override {
    if (uses.empty()) return;
    visit_float(b.dtype(), "backward", [&]<class T>() { sum_uses<T>(); });
    uses.clear(), rows = 0;
  }
  template <class T>
  void sum_uses() {
    const int64_t Bt = b.size(0), K = b.size(1), N = b.size(2);
    const Tensor as = Tensor::empty({rows, Bt, K}, b.dtype()), cs = Tensor::empty({rows, Bt, N}, b.dtype());
    int64_t r = 0;
    for (const std::pair<Tensor, Tensor>& use : uses) {  // [Bt, M, *] into rows [r, r + M) of [R, Bt, *]
      const Tensor &a = use.first, &dc = use.second;
      const int64_t M = a.size(1);
      const int64_t a_shape[] = {M, Bt, K}, a_strides[] = {a.strides()[1], a.strides()[0], a.strides()[2]};
      const int64_t c_shape[] = {M, Bt, N}, c_strides[] = {N, M * N, 1};
      kernels::copy_strided<T>(3, a_shape, a.data<T>(), a_strides, as.data<T>() + r * Bt * K);
      kernels::copy_strided<T>(3, c_shape, dc.data<T>(), c_strides, cs.data<T>() + r * Bt * N);
      r += M;
    }
    bool fresh = false;
    Tensor db = grad_buffer(b, &fresh);
    const int64_t batch[] = {Bt}, sa[] = {K}, sc[] = {N}, sd[] = {K * N};
    kernels::gemm_nd_batched<T>(1, batch, true, false, K, N, rows, T(1), as.data<T>(), Bt * K, sa,
                                cs.data<T>(), Bt * N, sc, fresh ? T(0) : T(1), db.data<T>(), N, sd);
  }
};
const char kStackedRowsTag = 0;  // StackedRowsGrad's tag for detail::deferred_grad

// Writes or adds dA = dC @ B^T and dB = A^T @ dC for C = A @ B (A, B of at least 2 dims).
template <class T>
void matmul_backward(const Tensor& a, const Tensor& b, const Tensor& dc) {
  const MatrixOperand A = as_matrix(a), B = as_matrix(b), dC = as_matrix(dc);
  if (a.requires_grad()) {
    bool fresh = false;
    Tensor da = grad_buffer(a, &fresh);
    if (b.ndim() == 2 && foldable_rows(dc) && da.ndim() >= 2) {
      // dA[rows, K] = dC[rows, N] @ B^T: one GEMM over all batch rows
      const MatrixOperand dcf = fold_rows(dc), bt = transposed(B);
      kernels::gemm<T>(dcf.trans, bt.trans, dcf.rows, bt.cols, dcf.cols, T(1), dc.data<T>(), dcf.ld, bt.t.data<T>(),
                       bt.ld, fresh ? T(0) : T(1), da.data<T>(), bt.cols);
    } else {
      matmul_into<T>(dC, transposed(B), da, !fresh);
    }
  }
  if (b.requires_grad() && a.ndim() == 3 && b.ndim() == 3 && a.size(0) == b.size(0) &&
      a.size(1) < kStackedRowsBelow) {
    if (detail::DeferredGrad* part = detail::deferred_grad(
            b, &kStackedRowsTag, 0, [&] { return std::make_unique<StackedRowsGrad>(b); })) {
      static_cast<StackedRowsGrad*>(part)->add(a, dc);
      return;
    }
  }
  if (b.requires_grad()) {
    bool fresh = false;
    Tensor db = grad_buffer(b, &fresh);
    if (b.ndim() == 2 && foldable_rows(a) && foldable_rows(dc)) {
      // dB[K, N] = A^T[K, rows] @ dC[rows, N]: the batch folds into the GEMM's inner dimension
      const MatrixOperand af = fold_rows(a), dcf = fold_rows(dc);
      kernels::gemm<T>(true, false, af.cols, dcf.cols, af.rows, T(1), a.data<T>(), af.ld, dc.data<T>(), dcf.ld,
                       fresh ? T(0) : T(1), db.data<T>(), dcf.cols);
    } else {
      matmul_into<T>(transposed(A), dC, db, !fresh);
    }
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_same_float(a, b, "matmul");
  if (a.ndim() == 0 || b.ndim() == 0)
    throw ShapeError("matmul: inputs must have at least one dimension: a=" + to_string(a.shape()) +
                     " b=" + to_string(b.shape()));
  // Promote vectors to matrices, and drop the added dim at the end.
  const Tensor a2 = a.ndim() == 1 ? reshape(a, {1, a.size(0)}) : a;
  const Tensor b2 = b.ndim() == 1 ? reshape(b, {b.size(0), 1}) : b;
  const int64_t M = a2.size(-2), K = a2.size(-1), Kb = b2.size(-2), N = b2.size(-1);
  if (K != Kb)
    throw ShapeError("matmul: inner dimensions differ: a=" + to_string(a.shape()) + " b=" + to_string(b.shape()));
  Shape ab(std::span<const int64_t>(a2.shape().data(), size_t(a2.ndim() - 2)));
  Shape bb(std::span<const int64_t>(b2.shape().data(), size_t(b2.ndim() - 2)));
  Shape out_shape;
  try {
    out_shape = broadcast_shapes(ab, bb, "matmul");
  } catch (const ShapeError&) {
    throw ShapeError("matmul: batch dimensions do not broadcast: a=" + to_string(a.shape()) +
                     " b=" + to_string(b.shape()));
  }
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor y = Tensor::empty(out_shape, a.dtype());
  visit_float(a.dtype(), "matmul", [&]<class T>() {
    if (b2.ndim() == 2 && foldable_rows(a2)) {  // [.., M, K] @ [K, N]: one GEMM
      const MatrixOperand af = fold_rows(a2), B = as_matrix(b2);
      kernels::gemm<T>(false, B.trans, af.rows, N, K, T(1), a2.data<T>(), af.ld, B.t.data<T>(), B.ld, T(0),
                       y.data<T>(), std::max<int64_t>(N, 1));
    } else {
      matmul_into<T>(as_matrix(a2), as_matrix(b2), y, false);
    }
  });
  if (should_record({&a2, &b2})) {
    record(OpKind::matmul, {a2, b2}, y, [a2, b2](const Tensor& dy) {
      // dA = dY @ B^T, dB = A^T @ dY (summed over broadcast batch dims)
      if (creating_graph()) {
        if (a2.requires_grad())
          accumulate_grad(a2, detail::sum_to_shape(matmul(dy, transpose(b2, -2, -1)), a2.shape()));
        if (b2.requires_grad())
          accumulate_grad(b2, detail::sum_to_shape(matmul(transpose(a2, -2, -1), dy), b2.shape()));
        return;
      }
      visit_float(dy.dtype(), "backward", [&]<class T>() { matmul_backward<T>(a2, b2, dy); });
    });
  }
  if (a.ndim() == 1 && b.ndim() == 1) return reshape(y, {});
  if (a.ndim() == 1) {
    Shape s = y.shape();
    s.erase(s.ndim() - 2);
    return reshape(y, s);
  }
  if (b.ndim() == 1) {
    Shape s = y.shape();
    s.erase(s.ndim() - 1);
    return reshape(y, s);
  }
  return y;
}

namespace {

// A weight's packed panels for linear, one set per direction, each packed the first time it is
// needed: forward B = W^T (K = in, N = out), backward's dx = dy W (K = out, N = in).
struct PackedWeight {
  Tensor source;     // the weight as given (keeps its storage, the cache key, alive)
  Tensor w;          // its contiguous data
  Tensor panels[2];  // forward, backward: defined once packed
  kernels::PackedB<float> f32[2];
  kernels::PackedB<double> f64[2];

  template <class T>
  const kernels::PackedB<T>& get(bool backward) {
    kernels::PackedB<T>* packs;
    if constexpr (std::is_same_v<T, float>)
      packs = f32;
    else
      packs = f64;
    Tensor& buf = panels[backward];
    if (!buf.defined()) {
      const int64_t out = w.size(0), in = w.size(1);
      const int64_t K = backward ? out : in, N = backward ? in : out;
      const int64_t n = kernels::packed_b_size<T>(K, N);
      buf = Tensor::empty({std::max<int64_t>(n, 1)}, w.dtype());
      packs[backward] = kernels::pack_b<T>(!backward, K, N, w.data<T>(), in, n > 0 ? buf.data<T>() : nullptr);
    }
    return packs[backward];
  }
};

struct PackCache {
  int depth = 0;
  // storage, offset, shape, strides, dtype
  using Key = std::tuple<const void*, int64_t, int64_t, int64_t, int64_t, int64_t, DType>;
  std::map<Key, std::shared_ptr<PackedWeight>> map;
};
thread_local PackCache pack_cache;

// The cache entry of `weight` while a scope is open (created on first use), else null.
std::shared_ptr<PackedWeight> packed_weight(const Tensor& weight, const Tensor& w) {
  if (pack_cache.depth == 0) return nullptr;
  const TensorImpl& im = *weight.impl();
  const PackCache::Key key{im.storage->data,    im.offset, weight.size(0), weight.size(1), weight.strides()[0],
                           weight.strides()[1], weight.dtype()};
  auto& entry = pack_cache.map[key];
  if (!entry) entry = std::make_shared<PackedWeight>(PackedWeight{weight, w, {}, {}, {}});
  return entry;
}

// A weight's gradient over the uses of one recording, summed as one GEMM. dW = sum_u dy_u^T x_u is
// one product of the stacked [dy_1; dy_2; ..] ([R, out]) and [x_1; x_2; ..] ([R, in]), R the rows of
// all uses: an RNN applies its weights at every time step to a batch of a few dozen rows, and a GEMM
// of depth 64 per step ran at 70 GFLOP/s on one core and did not scale to two (it mostly moves the
// [out, in] result through the cache), where depth R runs at 90+. Each use's backward copies its dy
// and x rows into the stacks; the last use to run (the first recorded) does the GEMM, so the
// gradient appears where a per-use GEMM would have completed it; uses whose entry is off the path to
// the output are not waited for (at_backward_end flushes what arrived). Same sum, other order.
// A stack holds at most this many rows (or, if fewer, all the uses' rows); when full its GEMM runs
// and it starts again, so its memory is bounded (512 x (in + out) floats) at no loss of speed.
constexpr int64_t kStackDepth = 512;

struct StackedWeightGrad : std::enable_shared_from_this<StackedWeightGrad> {
  Tensor weight;
  int64_t uses = 0, rows = 0, in = 0, out = 0;  // as recorded
  int64_t pending = 0, filled = 0;              // in the running backward
  Tensor dy_rows, x_rows;                       // [rows, out], [rows, in] while a backward fills them

  StackedWeightGrad(Tensor w, int64_t in_, int64_t out_) : weight(std::move(w)), in(in_), out(out_) {}

  template <class T>
  void add(const Tensor& dy, const Tensor& xc, int64_t n) {
    if (pending == 0) {
      pending = uses;
      const int64_t capacity = std::min(rows, kStackDepth);
      dy_rows = Tensor::empty({capacity, out}, dy.dtype());
      x_rows = Tensor::empty({capacity, in}, dy.dtype());
      // Flushes at the end of the walk; the guard empties the stack however the walk ends (a
      // closure that throws drops the queue), so a later backward starts from nothing.
      std::shared_ptr<StackedWeightGrad> self = shared_from_this();
      std::shared_ptr<StackedWeightGrad> guard(self.get(), [self](StackedWeightGrad* s) { s->clear(); });
      at_backward_end([guard] { guard->flush<T>(); });
    }
    if (filled + n > dy_rows.size(0)) gemm_rows<T>();  // full: sum what is there, start again
    std::copy_n(dy.data<T>(), n * out, dy_rows.data<T>() + filled * out);
    std::copy_n(xc.data<T>(), n * in, x_rows.data<T>() + filled * in);
    filled += n;
    if (--pending == 0) flush<T>();
  }
  // dW += (stacked dy)^T (stacked x) over the rows filled so far.
  template <class T>
  void gemm_rows() {
    if (filled == 0) return;
    bool fresh = false;
    Tensor dw = grad_buffer(weight, &fresh);
    kernels::gemm<T>(true, false, out, in, filled, T(1), dy_rows.data<T>(), out, x_rows.data<T>(), in,
                     fresh ? T(0) : T(1), dw.data<T>(), in);
    filled = 0;
  }
  template <class T>
  void flush() {
    gemm_rows<T>();
    clear();
  }
  void clear() {
    filled = pending = 0;
    dy_rows = Tensor(), x_rows = Tensor();
  }
};

// Uses with fewer rows than this stack their weight gradient (a GEMM of depth 256 is near full speed).
constexpr int64_t kStackRowsBelow = 256;

// The stack of `weight` in the tape being recorded (one per weight and tape generation), or null
// for a use with many rows.
std::shared_ptr<StackedWeightGrad> stacked_grad(const Tensor& weight, int64_t rows, int64_t in, int64_t out) {
  if (rows >= kStackRowsBelow || !weight.requires_grad()) return nullptr;
  thread_local struct {
    const Tape* tape = nullptr;
    int64_t generation = -1;
    std::map<const TensorImpl*, std::weak_ptr<StackedWeightGrad>> map;  // the tape's entries own them
  } open;
  const Tape& tape = current_tape();
  if (open.tape != &tape || open.generation != tape.generation())
    open.map.clear(), open.tape = &tape, open.generation = tape.generation();
  std::weak_ptr<StackedWeightGrad>& slot = open.map[weight.impl()];
  std::shared_ptr<StackedWeightGrad> s = slot.lock();
  if (!s) slot = s = std::make_shared<StackedWeightGrad>(weight, in, out);
  ++s->uses, s->rows += rows;
  return s;
}

}  // namespace

WeightPackScope::WeightPackScope() : outermost_(pack_cache.depth++ == 0) {}
WeightPackScope::~WeightPackScope() {
  --pack_cache.depth;
  if (outermost_) pack_cache.map.clear();
}

namespace {

// One linear layer's operands as its forward and backward use them.
struct LinearCall {
  Tensor x, xc, weight, w, bias, b;  // as given, and their contiguous data (b undefined: no bias)
  int64_t rows = 0, in = 0, out = 0;
  std::shared_ptr<PackedWeight> packed;      // while a WeightPackScope is open
  std::shared_ptr<StackedWeightGrad> stack;  // a recorded use with few rows (see stacked_grad)
};

LinearCall linear_call(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  detail::check_same_float(x, weight, op);
  if (bias.defined()) detail::check_same_float(x, bias, op);
  if (x.ndim() < 1 || weight.ndim() != 2 || x.size(-1) != weight.size(1) ||
      (bias.defined() && (bias.ndim() != 1 || bias.size(0) != weight.size(0))))
    throw ShapeError(std::string(op) + ": expected x=[..,in] weight=[out,in] bias=[out], got x=" +
                     to_string(x.shape()) + " weight=" + to_string(weight.shape()) +
                     " bias=" + (bias.defined() ? to_string(bias.shape()) : std::string("none")));
  LinearCall l;
  l.x = x, l.xc = detail::contiguous_data(x), l.weight = weight, l.w = detail::contiguous_data(weight);
  if (bias.defined()) l.bias = bias, l.b = detail::contiguous_data(bias);
  l.in = l.w.size(1), l.out = l.w.size(0), l.rows = l.xc.numel() / std::max<int64_t>(l.in, 1);
  l.packed = packed_weight(weight, l.w);
  return l;
}

// y = act(x W^T + b) into y ([rows, out], contiguous): bias and activation as the tiles are stored.
template <class T>
void linear_forward(const LinearCall& l, T* y, kernels::GemmAct act = kernels::GemmAct::none) {
  const kernels::GemmEpilogue<T> ep{l.b.defined() ? l.b.data<T>() : nullptr, act};
  if (l.packed)
    kernels::gemm_packed_b<T>(false, l.rows, T(1), l.xc.data<T>(), l.in, l.packed->get<T>(false), T(0), y,
                              l.out, ep);
  else
    kernels::gemm<T>(false, true, l.rows, l.out, l.in, T(1), l.xc.data<T>(), l.in, l.w.data<T>(), l.in, T(0),
                     y, l.out, ep);
}

// dx = dy W;  dW = dy^T x;  db = sum over rows of dy. dx is added to x's gradient, or, given dx_out
// ([rows, in]), written there as act(alpha * dy W) (ep: the gradient gate of an activation before
// this layer, see feed_forward_relu).
template <class T>
void linear_backward(const LinearCall& l, const Tensor& dy, T* dx_out = nullptr, T alpha = T(1),
                     kernels::GemmEpilogue<T> ep = {}) {
  const int64_t rows = l.rows, in = l.in, out = l.out;
  bool fresh = false;
  if (dx_out || l.x.requires_grad()) {
    Tensor dx;
    if (!dx_out) dx = grad_buffer(l.x, &fresh);
    T* dst = dx_out ? dx_out : dx.data<T>();
    const T beta = dx_out || fresh ? T(0) : T(1);
    if (l.packed)
      kernels::gemm_packed_b<T>(false, rows, alpha, dy.data<T>(), out, l.packed->get<T>(true), beta, dst, in,
                                ep);
    else
      kernels::gemm<T>(false, false, rows, in, out, alpha, dy.data<T>(), out, l.w.data<T>(), in, beta, dst,
                       in, ep);
  }
  if (l.stack) {
    l.stack->add<T>(dy, l.xc, rows);
  } else if (l.weight.requires_grad()) {
    Tensor dw = grad_buffer(l.weight, &fresh);
    kernels::gemm<T>(true, false, out, in, rows, T(1), dy.data<T>(), out, l.xc.data<T>(), in,
                     fresh ? T(0) : T(1), dw.data<T>(), in);
  }
  if (l.bias.defined() && l.bias.requires_grad()) {
    Tensor colsum = Tensor::empty({out}, dy.dtype());
    kernels::sum_axis<T>(1, rows, out, dy.data<T>(), colsum.data<T>());
    accumulate_grad(l.bias, colsum);
  }
}

// The output shape of a linear layer on x: x's with the last dimension `out`.
Shape linear_shape(const Tensor& x, int64_t out) {
  Shape ys = x.shape();
  ys[ys.ndim() - 1] = out;
  return ys;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LinearCall l = linear_call(x, weight, bias, "linear");
  Tensor y = Tensor::empty(linear_shape(x, l.out), x.dtype());
  visit_float(x.dtype(), "linear", [&]<class T>() { linear_forward<T>(l, y.data<T>()); });
  std::vector<Tensor> inputs = {x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (should_record(inputs)) {
    l.stack = stacked_grad(weight, l.rows, l.in, l.out);
    record(OpKind::linear, std::move(inputs), y, [l](const Tensor& dy) {
      // dx = dy W;  dW = dy^T x;  db = sum over rows of dy
      if (creating_graph()) {  // the same with recorded ops on the recorded x and weight (no packs, no stack)
        const Tensor dy2 = reshape(dy, {l.rows, l.out});
        if (l.x.requires_grad()) accumulate_grad(l.x, matmul(dy, l.weight));
        if (l.weight.requires_grad())
          accumulate_grad(l.weight, matmul(transpose(dy2, 0, 1), reshape(l.x, {l.rows, l.in})));
        if (l.bias.defined() && l.bias.requires_grad()) accumulate_grad(l.bias, sum(dy2, 0));
        return;
      }
      visit_float(dy.dtype(), "backward", [&]<class T>() { linear_backward<T>(l, dy); });
    });
  }
  return y;
}

namespace detail {

Tensor feed_forward_relu_composite(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                                   const Tensor& b2, double dropout_p, uint64_t dropout_seed) {
  return linear(dropout(relu(linear(x, w1, b1)), dropout_p, true, dropout_seed), w2, b2);
}

}  // namespace detail

Tensor feed_forward_relu(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                         const Tensor& b2, double dropout_p, uint64_t dropout_seed) {
  const char* op = "feed_forward_relu";
  detail::check_probability(dropout_p, std::string(op) + ": dropout");
  LinearCall l1 = linear_call(x, w1, b1, op);
  // h = dropout(relu(x W1^T + b1)), [rows, hidden]: linear2's input, kept for its backward
  const Tensor h = Tensor::empty({l1.rows, l1.out}, x.dtype());
  visit_float(x.dtype(), op, [&]<class T>() {
    linear_forward<T>(l1, h.data<T>(), kernels::GemmAct::relu);
    if (dropout_p > 0)
      kernels::dropout<T>(h.numel(), h.data<T>(), dropout_p, dropout_seed, h.data<T>(), false);
  });
  LinearCall l2 = linear_call(h, w2, b2, op);
  Tensor y = Tensor::empty(linear_shape(x, l2.out), x.dtype());
  visit_float(x.dtype(), op, [&]<class T>() { linear_forward<T>(l2, y.data<T>()); });
  std::vector<Tensor> inputs = {x, w1, w2};
  if (b1.defined()) inputs.push_back(b1);
  if (b2.defined()) inputs.push_back(b2);
  if (should_record(inputs)) {
    l1.stack = stacked_grad(w1, l1.rows, l1.in, l1.out);
    l2.stack = stacked_grad(w2, l2.rows, l2.in, l2.out);
    record(
        OpKind::feed_forward_relu, std::move(inputs), y,
        [l1, l2, dropout_p, dropout_seed](const Tensor& dy) {
          // dz = (dy W2) * [h > 0] / (1 - p) (h > 0 iff relu passed it and dropout kept it); then
          // linear2's dW2, db2 from dy and h, linear1's dx, dW1, db1 from dz
          if (creating_graph()) {
            backward_through(
                [&] {
                  return detail::feed_forward_relu_composite(l1.x, l1.weight, l1.bias, l2.weight, l2.bias,
                                                             dropout_p, dropout_seed);
                },
                dy);
            return;
          }
          visit_float(dy.dtype(), "backward", [&]<class T>() {
            const Tensor dz = Tensor::empty({l1.rows, l1.out}, dy.dtype());
            const kernels::GemmEpilogue<T> gate{nullptr, kernels::GemmAct::relu_gate, l2.xc.data<T>(), l2.in};
            linear_backward<T>(l2, dy, dz.data<T>(), T(1.0 / (1.0 - dropout_p)), gate);
            linear_backward<T>(l1, dz);
          });
        },
        {h});
  }
  return y;
}

}  // namespace tapegrad
