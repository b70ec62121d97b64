// Shape ops: reshape, permute/transpose, contiguous, narrow (views where possible), concat, stack.
// Their backwards only move gradient elements back to where they came from.
#include <algorithm>
#include <cstring>

#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// Copies `rows` blocks of `block` elements from src (stride src_stride) to dst (stride dst_stride).
void copy_blocks(const Tensor& src, const Tensor& dst, int64_t rows, int64_t block, int64_t src_off,
                 int64_t src_stride, int64_t dst_off, int64_t dst_stride) {
  const int64_t es = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.impl()->storage->data) + (src.impl()->offset + src_off) * es;
  char* d = static_cast<char*>(dst.impl()->storage->data) + (dst.impl()->offset + dst_off) * es;
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dst_stride * es, s + r * src_stride * es, size_t(block * es));
}

// The gradient of a tensor narrowed along `axis` several times (an RNN's input projection [B, T, G*H]
// once per time step, fused Q, K, V projections once per part): each narrow's dy waits here, and the
// walk writes them all at once. When the slices tile the axis exactly and the tensor has no gradient
// yet, each is copied into its place in a new buffer; otherwise (gaps, overlaps, an earlier gradient)
// they are added into the zero-filled or existing one, as each narrow would have done alone.
struct NarrowedGrad : detail::DeferredGrad {
  Tensor base;
  int axis;
  std::vector<std::pair<int64_t, Tensor>> slices;  // start along the axis, dy (contiguous)
  NarrowedGrad(Tensor b, int ax) : base(std::move(b)), axis(ax) {}

  void settle() override {
    std::stable_sort(slices.begin(), slices.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    int64_t covered = 0;
    bool tiles = true;
    for (const auto& [start, dy] : slices) tiles &= start == covered, covered += dy.shape()[axis];
    tiles &= covered == base.shape()[axis] && !base.impl()->grad.defined();
    const Shape cs = contiguous_strides(base.shape());
    visit_float(base.dtype(), "backward", [&]<class T>() {
      Tensor g = tiles ? Tensor::empty(base.shape(), base.dtype()) : grad_buffer_zeroed(base);
      for (const std::pair<int64_t, Tensor>& slice : slices) {
        const Tensor& dy = slice.second;
        T* place = g.data<T>() + slice.first * cs[axis];
        if (tiles)
          kernels::write_strided<T>(dy.ndim(), dy.shape().data(), dy.data<T>(), place, cs.data());
        else
          kernels::add_strided<T>(dy.ndim(), dy.shape().data(), dy.data<T>(), place, cs.data());
      }
      if (tiles) accumulate_grad(base, g);  // adopts g: the base had no gradient
    });
    slices.clear();
  }
};
const char kNarrowTag = 0;  // NarrowedGrad's tag for detail::deferred_grad (sub: the axis)

// Strides that view a tensor of (shape, strides) as `target` without moving data, or false when the
// reshape needs a copy. Dimensions may be split and merged only where the old layout keeps them
// evenly strided (PyTorch's view rule): e.g. [B,1,C] -> [B,C] of a narrowed time step is a view.
bool view_strides(const Shape& shape, const Shape& strides, const Shape& target, Shape* out) {
  Shape ts = target;
  if (shape.numel() == 0 || shape.ndim() == 0) {
    *out = contiguous_strides(target);
    return true;
  }
  int view_d = target.ndim() - 1;
  int64_t chunk_stride = strides[shape.ndim() - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    // A chunk ends where the next-outer dim is not laid out right after this run of dims.
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        ts[view_d] = view_numel * chunk_stride;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return false;
  *out = ts;
  return true;
}

}  // namespace

Tensor reshape(const Tensor& a, const Shape& shape) {
  detail::check_defined(a, "reshape", "input");
  Shape target = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < target.ndim(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0) throw ShapeError("reshape: only one dimension may be -1, got " + to_string(shape));
      infer = i;
    } else if (target[i] < 0) {
      throw ShapeError("reshape: negative dimension in " + to_string(shape));
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0) target[infer] = known ? a.numel() / known : 0;
  if (target.numel() != a.numel())
    throw ShapeError("reshape: cannot reshape " + to_string(a.shape()) + " (" + std::to_string(a.numel()) +
                     " elements) into " + to_string(shape));
  // A view whenever the layout allows it (always for contiguous inputs); a copy otherwise.
  Shape vs;
  Tensor y;
  if (a.is_contiguous()) {
    y = make_view(a, target, contiguous_strides(target), a.impl()->offset);
  } else if (view_strides(a.shape(), a.strides(), target, &vs)) {
    y = make_view(a, target, vs, a.impl()->offset);
  } else {
    const Tensor base = a.clone();
    y = make_view(base, target, contiguous_strides(target), base.impl()->offset);
  }
  if (should_record({&a})) {
    record(OpKind::reshape, {a}, y, [a](const Tensor& dy) {
      // da = dy read in a's shape (a first gradient may adopt dy's storage)
      if (creating_graph()) return accumulate_grad(a, reshape(dy, a.shape()));
      accumulate_grad(a, dy);
    });
  }
  return y;
}

Tensor permute(const Tensor& a, const std::vector<int>& dims) {
  detail::check_defined(a, "permute", "input");
  const int n = a.ndim();
  std::vector<bool> seen(static_cast<size_t>(n), false);
  auto bad = [&] {
    std::string d = "(";
    for (size_t i = 0; i < dims.size(); ++i) d += (i ? "," : "") + std::to_string(dims[i]);
    return ShapeError("permute: dims " + d + ") are not a permutation of the axes of " + to_string(a.shape()));
  };
  if (int(dims.size()) != n) throw bad();
  Shape s = a.shape(), st = a.strides();
  std::vector<int> norm(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int d = dims[size_t(i)] < 0 ? dims[size_t(i)] + n : dims[size_t(i)];
    if (d < 0 || d >= n || seen[size_t(d)]) throw bad();
    seen[size_t(d)] = true;
    norm[size_t(i)] = d;
    s[i] = a.shape()[d];
    st[i] = a.strides()[d];
  }
  Tensor y = make_view(a, s, st, a.impl()->offset);
  if (should_record({&a})) {
    record(OpKind::permute, {a}, y, [a, norm](const Tensor& dy) {
      // da[perm^-1(i)] += dy[i]: walk dy in order, writing through a's permuted contiguous strides
      if (creating_graph()) {  // da = dy permuted by the inverse permutation
        std::vector<int> inverse(norm.size());
        for (size_t i = 0; i < norm.size(); ++i) inverse[size_t(norm[i])] = int(i);
        return accumulate_grad(a, permute(dy, inverse));
      }
      const Shape cs = contiguous_strides(a.shape());
      Shape ds = dy.shape();
      for (size_t i = 0; i < norm.size(); ++i) ds[int(i)] = cs[norm[i]];
      bool fresh = false;
      Tensor da = grad_buffer(a, &fresh);
      visit_float(a.dtype(), "backward", [&]<class T>() {
        if (fresh) {  // a new gradient: gather dy in a's order (one pass, no zero fill)
          const Shape ys = contiguous_strides(dy.shape());
          Shape xs = a.shape();
          for (size_t i = 0; i < norm.size(); ++i) xs[norm[i]] = ys[int(i)];
          kernels::copy_strided<T>(a.ndim(), a.shape().data(), dy.data<T>(), xs.data(), da.data<T>());
        } else {
          kernels::add_strided<T>(dy.ndim(), dy.shape().data(), dy.data<T>(), da.data<T>(), ds.data());
        }
      });
    });
  }
  return y;
}

Tensor transpose(const Tensor& a, int dim0, int dim1) {
  detail::check_defined(a, "transpose", "input");
  const int d0 = normalize_axis(dim0, a.ndim(), "transpose", a.shape());
  const int d1 = normalize_axis(dim1, a.ndim(), "transpose", a.shape());
  std::vector<int> dims(static_cast<size_t>(a.ndim()));
  for (int i = 0; i < a.ndim(); ++i) dims[size_t(i)] = i;
  std::swap(dims[size_t(d0)], dims[size_t(d1)]);
  return permute(a, dims);
}

Tensor contiguous(const Tensor& a) {
  detail::check_defined(a, "contiguous", "input");
  if (a.is_contiguous()) return a;
  Tensor y = a.clone();
  if (should_record({&a})) {
    // da = dy (same shape; a's own strides do not matter for its gradient buffer). Under create_graph
    // accumulate_grad records the sum itself, so this one line serves both walks.
    record(OpKind::contiguous, {a}, y, [a](const Tensor& dy) { accumulate_grad(a, dy); });
  }
  return y;
}

Tensor narrow(const Tensor& a, int axis, int64_t start, int64_t length) {
  detail::check_defined(a, "narrow", "input");
  const int ax = normalize_axis(axis, a.ndim(), "narrow", a.shape());
  const int64_t n = a.shape()[ax];
  if (start < 0 || length < 0 || start + length > n)
    throw IndexError("narrow: range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                     ") out of bounds for axis " + std::to_string(ax) + " of shape " + to_string(a.shape()));
  Shape s = a.shape();
  s[ax] = length;
  Tensor y = make_view(a, s, a.strides(), a.impl()->offset + start * a.strides()[ax]);
  if (should_record({&a})) {
    record(OpKind::narrow, {a}, y, [a, ax, start](const Tensor& dy) {
      // da[.., start:start+len, ..] += dy
      if (creating_graph()) {  // dy padded with zero constants before and after along the axis
        std::vector<Tensor> parts;
        auto zeros = [&](int64_t len) {
          Shape zs = a.shape();
          zs[ax] = len;
          if (len > 0) parts.push_back(Tensor::zeros(zs, dy.dtype()));
        };
        zeros(start);
        parts.push_back(dy);
        zeros(a.shape()[ax] - start - dy.shape()[ax]);
        return accumulate_grad(a, parts.size() == 1 ? dy : concat(parts, ax));
      }
      // Deferred with the other slices of `a` when the walk allows it, else written now as a lone slice.
      const Tensor dyc = dy.is_contiguous() ? dy : dy.clone();
      if (detail::DeferredGrad* part = detail::deferred_grad(
              a, &kNarrowTag, ax, [&] { return std::make_unique<NarrowedGrad>(a, ax); })) {
        static_cast<NarrowedGrad*>(part)->slices.emplace_back(start, dyc);
        return;
      }
      NarrowedGrad lone(a, ax);
      lone.slices.emplace_back(start, dyc);
      lone.settle();
    });
  }
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  if (xs.empty()) throw ShapeError("concat: no tensors given");
  auto shapes = [&] {
    std::string s;
    for (size_t i = 0; i < xs.size(); ++i) s += (i ? " " : "") + to_string(xs[i].shape());
    return s;
  };
  for (const Tensor& x : xs) detail::check_defined(x, "concat", "input");
  const Tensor& first = xs[0];
  const int ax = normalize_axis(axis, first.ndim(), "concat", first.shape());
  int64_t total = 0;
  for (const Tensor& x : xs) {
    if (x.dtype() != first.dtype()) throw DTypeError("concat: dtypes differ: " + first.describe() + " " + x.describe());
    bool same = x.ndim() == first.ndim();
    for (int d = 0; same && d < x.ndim(); ++d) same = d == ax || x.shape()[d] == first.shape()[d];
    if (!same) throw ShapeError("concat: shapes differ outside axis " + std::to_string(ax) + ": " + shapes());
    total += x.shape()[ax];
  }
  Shape s = first.shape();
  s[ax] = total;
  Tensor y = Tensor::empty(s, first.dtype());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= s[d];
  for (int d = ax + 1; d < s.ndim(); ++d) inner *= s[d];
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& x : xs) {
    const Tensor xc = detail::contiguous_data(x);
    const int64_t block = x.shape()[ax] * inner;
    copy_blocks(xc, y, outer, block, 0, block, at * inner, total * inner);
    starts.push_back(at);
    at += x.shape()[ax];
  }
  if (should_record(xs)) {
    record(OpKind::concat, xs, y, [xs, starts, outer, inner, total, ax](const Tensor& dy) {
      // dx_i = dy[.., start_i : start_i + len_i, ..]
      if (creating_graph()) {
        for (size_t i = 0; i < xs.size(); ++i)
          if (xs[i].requires_grad()) accumulate_grad(xs[i], narrow(dy, ax, starts[i], xs[i].shape()[ax]));
        return;
      }
      for (size_t i = 0; i < xs.size(); ++i) {
        if (!xs[i].requires_grad()) continue;
        const int64_t block = xs[i].shape()[ax] * inner;
        Tensor g = Tensor::empty(xs[i].shape(), dy.dtype());
        copy_blocks(dy, g, outer, block, starts[i] * inner, total * inner, 0, block);
        accumulate_grad(xs[i], g);
      }
    });
  }
  return y;
}

Tensor stack(const std::vector<Tensor>& xs, int axis) {
  if (xs.empty()) throw ShapeError("stack: no tensors given");
  for (const Tensor& x : xs) {
    detail::check_defined(x, "stack", "input");
    if (x.shape() != xs[0].shape())
      throw ShapeError("stack: shapes differ: " + to_string(xs[0].shape()) + " vs " + to_string(x.shape()));
  }
  const int ax = normalize_axis(axis, xs[0].ndim() + 1, "stack", xs[0].shape());
  std::vector<Tensor> expanded;
  expanded.reserve(xs.size());
  for (const Tensor& x : xs) {
    Shape s = x.shape();
    s.insert(ax, 1);
    expanded.push_back(reshape(x, s));
  }
  return concat(expanded, ax);
}

}  // namespace tapegrad
