// Shape helpers: construction, printing, strides, axis normalisation and numpy broadcasting.
#include "tapegrad/shape.hpp"

#include <algorithm>

#include "tapegrad/error.hpp"

namespace tapegrad {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  if (dims.size() > size_t(kMaxDims))
    throw ShapeError("shape: at most " + std::to_string(kMaxDims) + " dimensions, got " + std::to_string(dims.size()));
  for (int64_t d : dims) push_back(d);
}

namespace {
// Out of line and cold: numel is on every op's path.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_shape(const Shape& s, const std::string& why) {
  std::string msg = "shape ";
  msg += to_string(s);
  msg += ": ";
  msg += why;
  throw ShapeError(msg);
}
}  // namespace

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[i] < 0) refuse_shape(*this, "negative dimension " + std::to_string(dims_[i]));
    if (__builtin_mul_overflow(n, dims_[i], &n)) refuse_shape(*this, "element count overflows 64 bits");
  }
  return n;
}

void Shape::push_back(int64_t d) {
  if (ndim_ == kMaxDims) throw ShapeError("shape: at most " + std::to_string(kMaxDims) + " dimensions");
  dims_[ndim_++] = d;
}

void Shape::insert(int pos, int64_t d) {
  push_back(0);
  for (int i = ndim_ - 1; i > pos; --i) dims_[i] = dims_[i - 1];
  dims_[pos] = d;
}

void Shape::erase(int pos) {
  for (int i = pos; i + 1 < ndim_; ++i) dims_[i] = dims_[i + 1];
  --ndim_;
}

bool Shape::operator==(const Shape& o) const { return ndim_ == o.ndim_ && std::equal(begin(), end(), o.begin()); }

std::string to_string(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.ndim(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

Shape contiguous_strides(const Shape& s) {
  Shape st = s;
  int64_t acc = 1;
  for (int i = s.ndim() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int normalize_axis(int axis, int ndim, const char* op, const Shape& shape) {
  const int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " out of range for shape " + to_string(shape));
  return a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes do not broadcast: a=" + to_string(a) + " b=" + to_string(b));
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace tapegrad
