// Helpers shared by the library's implementation files (not part of the public API).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tapegrad/tensor.hpp"

namespace tapegrad::detail {

// Calls f.operator()<T>() with T = float or double for a floating dtype; throws DTypeError naming
// `op` otherwise. f is a template lambda: visit_float(t.dtype(), "op", [&]<class T>() { ... });
template <class F>
decltype(auto) visit_float(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f64:
      return f.template operator()<double>();
    default: throw DTypeError(std::string(op) + ": expected a float32 or float64 tensor, got " + dtype_name(d));
  }
}

// Calls f.operator()<T>() with T = float, double or int32_t (f a template lambda, as above).
template <class F>
decltype(auto) visit_any(DType d, F&& f) {
  switch (d) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::i32:
      return f.template operator()<int32_t>();
  }
  return f.template operator()<float>();
}

// ---- deferred gradients (src/autograd/tape.cpp) ----------------------------------------------

// A part of a tensor's gradient that backward closures build up together and the walk writes in one
// pass: the slices of a tensor narrowed once per time step (written into place instead of a zeroed
// buffer being added to once per slice), the rows of many small products that share an operand
// (one GEMM instead of one rank-1 update of the whole operand per product).
struct DeferredGrad {
  virtual ~DeferredGrad() = default;
  // Adds everything collected into the tensor's gradient (accumulate_grad, grad_buffer...) and
  // forgets it. Runs at any point before the gradient is read, possibly more than once a walk.
  virtual void settle() = 0;
};

// Inside a first-order backward walk: the deferred part of t's gradient of kind (tag, sub), made by
// `make` on first use; the caller adds its share to it instead of to t's gradient. The walk settles
// it before anything reads t's gradient: just before the entry that produced t runs, else once the
// entries of the tape whose closure asked have all run (before at_backward_end's work), in the
// order the parts were first asked for.
// Null (the caller writes its share now) under create_graph, outside a walk, and for a leaf: a
// parameter's gradient must be complete when its last use has run, since distributed training
// sends it then.
DeferredGrad* deferred_grad(const Tensor& t, const void* tag, int64_t sub,
                            const std::function<std::unique_ptr<DeferredGrad>()>& make);

}  // namespace tapegrad::detail
