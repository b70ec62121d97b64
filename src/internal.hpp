// Helpers shared by the library's implementation files (not part of the public API).
#pragma once

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

}  // namespace tapegrad::detail
