/// @file
/// Shape: the dimensions of a tensor, stored inline (no heap allocation per op) up to kMaxDims.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace tapegrad {

/// The most dimensions a tensor may have.
inline constexpr int kMaxDims = 8;

/// A tensor's dimensions (or strides), at most kMaxDims of them, stored inline. Indexing is unchecked.
class Shape {
 public:
  Shape() = default;  ///< A 0-dimensional shape (a scalar: numel() == 1).
  /// From a list such as `{2, 3}`; more than kMaxDims dimensions throw ShapeError.
  /// @{
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}
  /// @}

  int ndim() const { return ndim_; }  ///< Number of dimensions.
  /// Dimension i, 0 <= i < ndim() (no range check).
  /// @{
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  /// @}
  /// The dimensions as a contiguous array of ndim() values, for iteration.
  /// @{
  const int64_t* data() const { return dims_; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + ndim_; }
  /// @}
  /// Product of the dimensions; throws ShapeError naming the shape if one is negative or it overflows.
  int64_t numel() const;
  /// Dimension i counted from the back when negative (-1 = last). No range check.
  int64_t at(int i) const { return dims_[i < 0 ? i + ndim_ : i]; }

  /// Appends a last dimension; throws ShapeError beyond kMaxDims.
  void push_back(int64_t d);
  /// Inserts a dimension before index `pos` (0..ndim()); throws ShapeError beyond kMaxDims.
  void insert(int pos, int64_t d);
  /// Removes dimension `pos`.
  void erase(int pos);
  /// The dimensions as a vector.
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  /// Same number of dimensions, all equal.
  /// @{
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  /// @}

 private:
  int64_t dims_[kMaxDims] = {};
  int ndim_ = 0;
};

/// "[2,3,4]"
std::string to_string(const Shape& s);

/// Row-major strides of a contiguous tensor of this shape, in elements.
Shape contiguous_strides(const Shape& s);

/// Normalises a possibly negative axis for an ndim-dimensional tensor; throws ShapeError naming `op`.
int normalize_axis(int axis, int ndim, const char* op, const Shape& shape);

/// numpy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace tapegrad
