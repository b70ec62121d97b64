/// @file
/// Tensor: an N-dimensional, row-major view on shared storage, with the autograd fields the tape uses.
///
/// float32 is for training, float64 for gradient checks (the same op code serves both), int32 for token
/// ids, targets and masks. A Tensor is a cheap handle (a shared pointer); copies alias. Views
/// (reshape of a contiguous tensor, transpose, permute, narrow) share storage and carry strides;
/// kernels want contiguous buffers, so ops call contiguous() where they need it. Differentiable
/// functions live in ops.hpp; the member functions here that return tensors forward to them (defined
/// in the ops layer, src/ops/tensor_methods.cpp, so the tensor layer depends on nothing above it).
/// Storage comes from a caching allocator (see memory.hpp), so steady-state training takes no fresh
/// pages from the OS; or it wraps memory someone else owns (a numpy array, for the Python module),
/// keeping that owner alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/error.hpp"
#include "tapegrad/shape.hpp"

namespace tapegrad {

/// Element type: f32 (training), f64 (gradient checks), i32 (ids, targets, masks).
enum class DType : uint8_t { f32, f64, i32 };

/// "f32", "f64" or "i32".
const char* dtype_name(DType d);
/// Bytes per element: 4 or 8.
int64_t dtype_size(DType d);

/// The DType of C++ type T: float -> f32, double -> f64, int32_t -> i32.
/// @{
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }
/// @}

/// A block of bytes from the caching allocator, returned to it when the last view dies; or memory
/// owned by someone else (a numpy array), whose owner it keeps alive instead.
struct Storage {
  /// Allocates `bytes` (uninitialised); throws OutOfMemory.
  explicit Storage(int64_t bytes);
  /// Wraps `bytes` of foreign memory at `data` without copying: `owner` is held until the storage
  /// dies (then dropped; nothing goes to the allocator). The caller guarantees the memory stays valid
  /// and writable while `owner` lives and is aligned for its element type (not necessarily to 64).
  /// Throws Error when `owner` is null.
  Storage(void* data, int64_t bytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;  ///< 64-byte aligned when from the allocator
  int64_t bytes = 0;     ///< requested size
  int64_t capacity = 0;  ///< the allocator's size class, >= bytes (bytes for foreign memory)
  std::shared_ptr<void> owner;  ///< foreign memory's owner; null for the allocator's blocks
};

/// A seeded pseudo-random generator (xoshiro256**). Its whole state is four words, so checkpoints can
/// save and restore it exactly. Not thread-safe: one generator per thread or per model.
class Generator {
 public:
  /// Seeded as by seed_(seed).
  explicit Generator(uint64_t seed = 0) { seed_(seed); }
  /// Resets the state to a function of `seed` alone.
  void seed_(uint64_t seed);
  /// The next 64 random bits.
  uint64_t next_u64();
  double uniform();  ///< uniform in [0, 1)
  double normal();   ///< standard normal (Box-Muller, no cached spare: state is just the four words)
  /// Uniform integer in [lo, hi]; throws Error if lo > hi. Unbiased: a draw at or above the largest
  /// multiple of the range is rejected and redrawn, so every value is equally likely. Not
  /// std::uniform_int_distribution, whose algorithm is implementation-defined: the same seed gives the
  /// same numbers with any standard library. Draws at least one number, even when lo == hi.
  int64_t uniform_int(int64_t lo, int64_t hi);

  /// Puts a uniform random permutation of `items` in place (Fisher-Yates on uniform_int, so no modulo
  /// bias): shuffle_prefix over all but the last place, which is then determined.
  template <class T>
  void shuffle(std::span<T> items) {
    if (items.size() > 1) shuffle_prefix(items, items.size() - 1);
  }
  /// shuffle on a vector.
  template <class T>
  void shuffle(std::vector<T>& items) {
    shuffle(std::span<T>(items));
  }
  /// The first `count` steps of Fisher-Yates: places 0 .. count-1 get a uniform random sample of
  /// `items` without replacement, in random order (the rest is what is left over). Draws exactly one
  /// uniform_int per place, in order; throws Error if count exceeds the size.
  template <class T>
  void shuffle_prefix(std::span<T> items, size_t count) {
    if (count > items.size())
      throw Error("Generator::shuffle_prefix: count " + std::to_string(count) + " exceeds the " +
                  std::to_string(items.size()) + " items");
    const int64_t last = int64_t(items.size()) - 1;
    for (size_t i = 0; i < count; ++i) std::swap(items[i], items[size_t(uniform_int(int64_t(i), last))]);
  }
  /// shuffle_prefix on a vector.
  template <class T>
  void shuffle_prefix(std::vector<T>& items, size_t count) {
    shuffle_prefix(std::span<T>(items), count);
  }

  /// The seed of stream `stream` of `seed`: a 64-bit function of both, so that the generators for
  /// different purposes (training batches, held-out examples, a data split, each step) of one run are
  /// independent, and each is reproducible from the run's seed alone. The same pair always gives the
  /// same seed.
  static uint64_t derive_seed(uint64_t seed, uint64_t stream);
  /// A generator seeded with derive_seed(seed, stream).
  static Generator derive(uint64_t seed, uint64_t stream) { return Generator(derive_seed(seed, stream)); }
  /// The four state words, for checkpoints.
  std::vector<uint64_t> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  /// Restores words from state(); throws Error unless there are exactly 4.
  void set_state(const std::vector<uint64_t>& s);

 private:
  uint64_t s_[4];
};

struct TensorImpl;

/// An N-dimensional array: a shared handle on a TensorImpl (copies alias; clone() copies the data).
/// A default-constructed Tensor is undefined: asking for its shape, dtype, data or gradient then
/// throws Error. Creation functions allocate with the caching allocator and throw OutOfMemory (or
/// ShapeError for a negative dimension).
class Tensor {
 public:
  Tensor() = default;  ///< An undefined tensor (for example "no bias").
  /// Wraps an existing implementation (op and view code).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation
  /// Uninitialised memory of `shape`.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  /// All zeros.
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  /// All ones.
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  /// Every element `value`.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  /// [n]: 0, 1, ..., n - 1.
  static Tensor arange(int64_t n, DType dtype = DType::f32);
  /// `values` in row-major order; throws ShapeError unless they fill `shape` exactly.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32);
  /// An int32 tensor of `ids`; throws ShapeError unless they fill `shape` exactly.
  static Tensor from_ids(const std::vector<int32_t>& ids, const Shape& shape);
  /// Normal(mean, std^2) draws from `gen`, in row-major order (floating dtypes only).
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32, double mean = 0, double std = 1);
  /// Uniform draws in [low, high) from `gen`, in row-major order (floating dtypes only).
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32, double low = 0, double high = 1);

  // ---- queries
  bool defined() const { return impl_ != nullptr; }  ///< False for a default-constructed Tensor.
  const Shape& shape() const;                        ///< Dimensions.
  const Shape& strides() const;                      ///< Per-dimension steps, in elements.
  int ndim() const { return shape().ndim(); }        ///< Number of dimensions.
  /// Dimension `axis`; negative counts from the back; throws ShapeError if out of range.
  int64_t size(int axis) const;
  int64_t numel() const { return shape().numel(); }  ///< Number of elements.
  DType dtype() const;                               ///< Element type.
  /// True when the elements are in row-major order without gaps (what kernels need).
  bool is_contiguous() const;
  bool is_floating() const { return dtype() != DType::i32; }  ///< f32 or f64.

  /// Pointer to the first element; throws DTypeError if T does not match dtype(). Index it through
  /// strides() unless is_contiguous(). Valid while some tensor shares the storage.
  template <class T>
  T* data() const;
  /// The single value of a one-element tensor, as double; throws ShapeError for any other size.
  double item() const;
  /// All values as doubles, in logical (row-major) order, whatever the strides.
  std::vector<double> to_vector() const;

  // ---- autograd
  /// True for a parameter and for an op's result computed from one (while recording).
  bool requires_grad() const;
  /// Marks a leaf as a parameter (or not); throws AutogradError on non-leaf and DTypeError on integer
  /// tensors.
  Tensor& requires_grad_(bool on = true);
  /// True unless a recorded op produced this tensor.
  bool is_leaf() const;
  /// The accumulated gradient, same shape (undefined until a backward reaches this tensor).
  Tensor grad() const;
  /// Drops the gradient (grad() becomes undefined; the next backward starts it afresh).
  void zero_grad();
  /// Keep .grad on a non-leaf tensor after backward (for inspection).
  void retain_grad();
  /// A leaf sharing this tensor's data, cut off from the tape.
  Tensor detach() const;

  // ---- copies (not recorded on the tape)
  Tensor clone() const;      ///< contiguous deep copy
  Tensor to(DType d) const;  ///< converted copy (a clone when d is already the dtype)
  /// In place, same shape and dtype (else ShapeError), into a contiguous tensor; for optimizers and loading.
  void copy_from(const Tensor& src);

  /// @name Differentiable shortcuts
  /// The ops of the same names in ops.hpp with this tensor as the first argument (defined in
  /// src/ops/tensor_methods.cpp).
  /// @{

  /// reshape(*this, shape)
  Tensor reshape(const Shape& shape) const;
  /// transpose(*this, dim0, dim1)
  Tensor transpose(int dim0, int dim1) const;
  /// permute(*this, dims)
  Tensor permute(const std::vector<int>& dims) const;
  /// narrow(*this, axis, start, length)
  Tensor narrow(int axis, int64_t start, int64_t length) const;
  /// contiguous(*this)
  Tensor contiguous() const;
  /// sum(*this): the scalar sum of all elements
  Tensor sum() const;
  /// mean(*this): the scalar mean of all elements
  Tensor mean() const;
  /// @}

  /// numpy-like text: shape, dtype and values (long tensors are elided with ...).
  std::string to_string(int max_per_dim = 6) const;
  /// "f32[2,3]"
  std::string describe() const;

  /// The shared implementation (null when undefined); for op and instrument code.
  /// @{
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// @}
  /// True when both handles point to the same tensor (not just equal values).
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

/// What a Tensor handle points to: a window on shared storage plus the autograd fields the tape uses.
/// Public for op, view and instrument code; user code goes through Tensor.
struct TensorImpl {
  std::shared_ptr<Storage> storage;  ///< shared by every view of the same data
  int64_t offset = 0;                ///< first element, in elements from the storage's start
  Shape shape;                       ///< dimensions
  Shape strides;                     ///< in elements
  DType dtype = DType::f32;          ///< element type
  bool requires_grad = false;        ///< a parameter, or computed from one on the tape
  bool retains_grad = false;         ///< keep grad after backward although not a leaf
  /// Set when a recorded op produced this tensor: the tape generation it belongs to (-1: a leaf).
  int64_t tape_generation = -1;
  Tensor grad;       ///< accumulated gradient (undefined until backward reaches it)
  std::string name;  ///< optional, shown in tape dumps (parameters get their module path)
};

/// A view sharing `base`'s storage with a new shape, strides and offset in elements (no autograd:
/// the view is a leaf). The caller keeps it inside the storage.
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

/// This thread's default generator (seeded by manual_seed; seed 0 until then).
Generator& default_generator();
/// Reseeds this thread's default generator.
void manual_seed(uint64_t seed);

}  // namespace tapegrad
