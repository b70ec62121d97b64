// Tensor's differentiable member shortcuts (declared in tensor.hpp), defined here in the ops layer so
// that the tensor layer below includes nothing from ops: each forwards to the op of the same name.
#include "tapegrad/ops.hpp"

namespace tapegrad {

Tensor Tensor::reshape(const Shape& s) const {
  return tapegrad::reshape(*this, s);
}
Tensor Tensor::transpose(int d0, int d1) const {
  return tapegrad::transpose(*this, d0, d1);
}
Tensor Tensor::permute(const std::vector<int>& dims) const {
  return tapegrad::permute(*this, dims);
}
Tensor Tensor::narrow(int axis, int64_t start, int64_t length) const {
  return tapegrad::narrow(*this, axis, start, length);
}
Tensor Tensor::contiguous() const {
  return tapegrad::contiguous(*this);
}
Tensor Tensor::sum() const {
  return tapegrad::sum(*this);
}
Tensor Tensor::mean() const {
  return tapegrad::mean(*this);
}

}  // namespace tapegrad
