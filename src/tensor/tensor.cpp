// Tensor: storage, creation, queries, copies, printing, and the seeded generator.
#include "tapegrad/tensor.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/kernels.hpp"
#include "src/internal.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/memory.hpp"

namespace tapegrad {

using detail::visit_any;

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
  }
  return "?";
}

int64_t dtype_size(DType d) { return d == DType::f64 ? 8 : 4; }

Storage::Storage(int64_t n) : bytes(n) { data = memory::allocate(n, &capacity); }
Storage::Storage(void* d, int64_t n, std::shared_ptr<void> o) : data(d), bytes(n), capacity(n), owner(std::move(o)) {
  // A null owner would make ~Storage hand foreign memory to the allocator.
  if (!owner) throw Error("Storage: foreign memory needs an owner to keep alive");
}
Storage::~Storage() {
  if (!owner) memory::release(data, capacity);
}

// ---- creation ------------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (int i = 0; i < shape.ndim(); ++i)
    if (shape[i] < 0)
      throw ShapeError("tensor of shape " + tapegrad::to_string(shape) + ": dimension " + std::to_string(i) +
                       " is negative (" + std::to_string(shape[i]) + ")");
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape.numel(), dtype_size(dtype), &bytes))
    throw OutOfMemory("out of memory: a tensor of shape " + tapegrad::to_string(shape) + " (" +
                      dtype_name(dtype) + ") needs more than 2^63 bytes");
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(bytes);
  } catch (const OutOfMemory&) {
    throw OutOfMemory("out of memory: cannot allocate " + format_bytes(double(bytes)) +
                      " for a tensor of shape " + tapegrad::to_string(shape) + " (" + dtype_name(dtype) +
                      "; the machine's limit is " + format_bytes(double(memory::machine_limit_bytes())) +
                      ")");
  } catch (const std::bad_alloc&) {  // the shared_ptr control block
    throw OutOfMemory("out of memory: cannot allocate " + format_bytes(double(bytes)) +
                      " for a tensor of shape " + tapegrad::to_string(shape));
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  visit_any(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = T(value);
  });
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.impl()->storage->data, 0, size_t(t.numel() * dtype_size(dtype)));
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::arange(int64_t n, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n > 0 ? n : 0));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(i);
  return from_vector(v, {n}, dtype);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  if (int64_t(values.size()) != shape.numel())
    throw ShapeError("from_vector: " + std::to_string(values.size()) + " values do not fill shape " + tapegrad::to_string(shape));
  Tensor t = empty(shape, dtype);
  visit_any(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = T(values[i]);
  });
  return t;
}

Tensor Tensor::from_ids(const std::vector<int32_t>& ids, const Shape& shape) {
  if (int64_t(ids.size()) != shape.numel())
    throw ShapeError("from_ids: " + std::to_string(ids.size()) + " ids do not fill shape " + tapegrad::to_string(shape));
  Tensor t = empty(shape, DType::i32);
  if (!ids.empty()) std::memcpy(t.data<int32_t>(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype, double mean, double std) {
  Tensor t = empty(shape, dtype);
  detail::visit_float(dtype, "randn", [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = T(mean + std * gen.normal());
  });
  return t;
}

Tensor Tensor::rand(const Shape& shape, Generator& gen, DType dtype, double low, double high) {
  Tensor t = empty(shape, dtype);
  detail::visit_float(dtype, "rand", [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = T(low + (high - low) * gen.uniform());
  });
  return t;
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// ---- queries -------------------------------------------------------------------------------------

namespace {
const TensorImpl& checked(const TensorImpl* p) {
  if (!p) throw Error("tensor: use of an undefined tensor");
  return *p;
}
}  // namespace

const Shape& Tensor::shape() const { return checked(impl_.get()).shape; }
const Shape& Tensor::strides() const { return checked(impl_.get()).strides; }
DType Tensor::dtype() const { return checked(impl_.get()).dtype; }

int64_t Tensor::size(int axis) const { return shape()[normalize_axis(axis, ndim(), "size", shape())]; }

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  int64_t expect = 1;
  for (int i = s.ndim() - 1; i >= 0; --i) {
    if (s[i] != 1 && strides()[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

template <class T>
T* Tensor::data() const {
  const TensorImpl& im = checked(impl_.get());
  if (im.dtype != dtype_of<T>())
    throw DTypeError(std::string("data: tensor is ") + dtype_name(im.dtype) + ", accessed as " + dtype_name(dtype_of<T>()));
  return static_cast<T*>(im.storage->data) + im.offset;
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;

std::vector<double> Tensor::to_vector() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  const Shape& s = shape();
  const Shape& st = strides();
  visit_any(dtype(), [&]<class T>() {
    const T* p = data<T>();
    int64_t idx[kMaxDims] = {0};
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t off = 0;
      for (int d = 0; d < s.ndim(); ++d) off += idx[d] * st[d];
      out[i] = double(p[off]);
      for (int d = s.ndim() - 1; d >= 0; --d) {
        if (++idx[d] < s[d]) break;
        idx[d] = 0;
      }
    }
  });
  return out;
}

double Tensor::item() const {
  if (numel() != 1) throw ShapeError("item: expected a one-element tensor, got shape " + tapegrad::to_string(shape()));
  return to_vector()[0];
}

// ---- autograd fields -----------------------------------------------------------------------------

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  if (!is_leaf()) throw AutogradError("requires_grad_: only leaf tensors can be marked, got a result of an op " + describe());
  if (on && !is_floating()) throw DTypeError("requires_grad_: integer tensors cannot require grad: " + describe());
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return checked(impl_.get()).tape_generation < 0; }
Tensor Tensor::grad() const { return checked(impl_.get()).grad; }
void Tensor::zero_grad() { checked(impl_.get()), impl_->grad = Tensor(); }
void Tensor::retain_grad() { checked(impl_.get()), impl_->retains_grad = true; }

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), impl_->offset); }

// ---- copies --------------------------------------------------------------------------------------

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype());
  visit_any(dtype(), [&]<class T>() {
    kernels::copy_strided<T>(ndim(), shape().data(), data<T>(), strides().data(), out.data<T>());
  });
  return out;
}

Tensor Tensor::to(DType d) const {
  if (d == dtype()) return clone();
  return from_vector(to_vector(), shape(), d);
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape() || src.dtype() != dtype())
    throw ShapeError("copy_from: destination " + describe() + " and source " + src.describe() + " differ");
  if (!is_contiguous()) throw ShapeError("copy_from: destination must be contiguous, got " + describe());
  visit_any(dtype(), [&]<class T>() {
    kernels::copy_strided<T>(ndim(), shape().data(), src.data<T>(), src.strides().data(), data<T>());
  });
}

// ---- printing ------------------------------------------------------------------------------------

std::string Tensor::describe() const {
  if (!impl_) return "undefined";
  const char* short_name = dtype() == DType::f32 ? "f32" : dtype() == DType::f64 ? "f64" : "i32";
  return short_name + tapegrad::to_string(shape());
}

namespace {
void format_values(std::ostringstream& os, const std::vector<double>& v, const Shape& s, int dim, int64_t offset,
                   int64_t stride_elems, int max_per_dim, bool integer, int indent) {
  if (s.ndim() == 0) {
    os << v[0];
    return;
  }
  const int64_t n = s[dim];
  const int64_t inner = stride_elems / (n ? n : 1);
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n > max_per_dim && i == max_per_dim / 2) {
      os << "...";
      i = n - max_per_dim / 2 - 1;
      os << (dim + 1 == s.ndim() ? ", " : ",\n" + std::string(size_t(indent + 1), ' '));
      continue;
    }
    if (dim + 1 == s.ndim()) {
      const double x = v[size_t(offset + i)];
      if (integer) os << int64_t(x);
      else os << x;
    } else {
      format_values(os, v, s, dim + 1, offset + i * inner, inner, max_per_dim, integer, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == s.ndim() ? ", " : ",\n" + std::string(size_t(indent + 1), ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::to_string(int max_per_dim) const {
  if (!impl_) return "tensor(undefined)";
  std::ostringstream os;
  os.precision(dtype() == DType::f64 ? 8 : 5);
  os << "tensor(";
  format_values(os, to_vector(), shape(), 0, 0, numel(), max_per_dim < 2 ? 2 : max_per_dim, dtype() == DType::i32, 7);
  os << ", shape=" << tapegrad::to_string(shape()) << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) os << ", requires_grad=true";
  os << ")";
  return os.str();
}

// ---- random --------------------------------------------------------------------------------------

namespace {
uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Generator::seed_(uint64_t seed) {
  for (auto& w : s_) w = splitmix(seed);
}

uint64_t Generator::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

int64_t Generator::uniform_int(int64_t lo, int64_t hi) {
  if (lo > hi)
    throw Error("Generator::uniform_int: empty range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const uint64_t range = uint64_t(hi) - uint64_t(lo) + 1;  // 0: the whole 64-bit range
  if (range == 0) return int64_t(next_u64());
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;  // [0, limit) holds whole multiples of range
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return int64_t(uint64_t(lo) + x % range);
}

uint64_t Generator::derive_seed(uint64_t seed, uint64_t stream) {
  // The golden-ratio multiple spreads the seed's bits before the stream id is mixed in; the
  // generator's first output (two splitmix-seeded xoshiro rounds away) is the new seed.
  return Generator(seed * 0x9E3779B97F4A7C15ull ^ stream).next_u64();
}

void Generator::set_state(const std::vector<uint64_t>& s) {
  if (s.size() != 4) throw Error("Generator::set_state: expected 4 words, got " + std::to_string(s.size()));
  for (int i = 0; i < 4; ++i) s_[i] = s[size_t(i)];
}

Generator& default_generator() {
  static thread_local Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().seed_(seed); }

}  // namespace tapegrad
