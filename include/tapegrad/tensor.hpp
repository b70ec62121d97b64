// Tensor: an N-dimensional, row-major view on shared storage, with the autograd fields the tape uses.
//
// float32 is for training, float64 for gradient checks (the same op code serves both), int32 for token
// ids, targets and masks. A Tensor is a cheap handle (a shared pointer); copies alias. Views
// (reshape of a contiguous tensor, transpose, permute, narrow) share storage and carry strides;
// kernels want contiguous buffers, so ops call contiguous() where they need it. Differentiable
// functions live in ops.hpp; the member functions here that return tensors forward to them (defined
// in the ops layer, src/ops/tensor_methods.cpp, so the tensor layer depends on nothing above it).
// Storage comes from a caching allocator (see memory.hpp), so steady-state training takes no fresh
// pages from the OS.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/error.hpp"
#include "tapegrad/shape.hpp"

namespace tapegrad {

enum class DType : uint8_t { f32, f64, i32 };

const char* dtype_name(DType d);
int64_t dtype_size(DType d);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }

// A block of bytes from the caching allocator; returned to it when the last view dies.
struct Storage {
  explicit Storage(int64_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  int64_t bytes = 0;
  int64_t capacity = 0;
};

// A seeded pseudo-random generator (xoshiro256**). Its whole state is four words, so checkpoints can
// save and restore it exactly.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { seed_(seed); }
  void seed_(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1)
  double normal();   // standard normal (Box-Muller, no cached spare: state is just the four words)
  std::vector<uint64_t> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  void set_state(const std::vector<uint64_t>& s);

 private:
  uint64_t s_[4];
};

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32);
  static Tensor from_ids(const std::vector<int32_t>& ids, const Shape& shape);
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32, double mean = 0, double std = 1);
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32, double low = 0, double high = 1);

  // ---- queries
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int ndim() const { return shape().ndim(); }
  int64_t size(int axis) const;  // negative counts from the back
  int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  bool is_contiguous() const;
  bool is_floating() const { return dtype() != DType::i32; }

  // Pointer to the first element; throws DTypeError if T does not match dtype().
  template <class T>
  T* data() const;
  // The single value of a one-element tensor, as double.
  double item() const;
  // All values as doubles, in logical (row-major) order, whatever the strides.
  std::vector<double> to_vector() const;

  // ---- autograd
  bool requires_grad() const;
  // Marks a leaf as a parameter (or not); throws on non-leaf and integer tensors.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  // The accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  void zero_grad();
  // Keep .grad on a non-leaf tensor after backward (for inspection).
  void retain_grad();
  // A leaf sharing this tensor's data, cut off from the tape.
  Tensor detach() const;

  // ---- copies (not recorded on the tape)
  Tensor clone() const;        // contiguous deep copy
  Tensor to(DType d) const;    // converted copy
  void copy_from(const Tensor& src);  // in place, same shape and dtype; for optimizers and loading

  // ---- differentiable shortcuts to ops.hpp (defined in src/ops/tensor_methods.cpp)
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(const std::vector<int>& dims) const;
  Tensor narrow(int axis, int64_t start, int64_t length) const;
  Tensor contiguous() const;
  Tensor sum() const;
  Tensor mean() const;

  // numpy-like text: shape, dtype and values (long tensors are elided with ...).
  std::string to_string(int max_per_dim = 6) const;
  // "f32[2,3]"
  std::string describe() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;
  bool retains_grad = false;
  // Set when a recorded op produced this tensor: the tape generation it belongs to (-1: a leaf).
  int64_t tape_generation = -1;
  Tensor grad;
  std::string name;  // optional, shown in tape dumps (parameters get their module path)
};

// A view sharing `base`'s storage with a new shape, strides and offset (no autograd).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

// The process-wide default generator (seeded by manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tapegrad
