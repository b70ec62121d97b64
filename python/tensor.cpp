// tapegrad.Tensor in Python: creation from numpy (shared memory when the layout allows, else a
// copy), .numpy() (always shared), the autograd fields, printing, indexing as differentiable views,
// and the operators.
//
// Sharing, both ways:
//   tensor(a)  a C-contiguous, aligned, writable float32/float64/int32 array: no copy; the tensor's
//              storage holds the array (Storage's foreign-memory constructor), so deleting the array
//              leaves the tensor valid. Anything else (other dtypes, strided or read-only arrays,
//              lists) is copied: other integers -> int32 (range-checked), bool and float16 ->
//              float32, wider floats -> float64.
//   t.numpy()  any tensor, views included (numpy takes the strides): no copy; the array's base holds
//              the tensor, so deleting the tensor leaves the array valid.
// Comparisons (< <= > >= == !=) return a float tensor of 0 and 1 in the operands' dtype, not
// recorded (a mask for where / masked_fill / mul), rather than a bool array.
#include <pybind11/numpy.h>

#include <cstring>

#include "bindings.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/ops.hpp"

namespace tapegrad::python {

namespace {

namespace npy = py::detail;

bool is_dtype(const py::dtype& d, const py::dtype& want) {
  return d.equal(want) && d.itemsize() == want.itemsize();
}

py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return py::dtype::of<float>();
    case DType::f64:
      return py::dtype::of<double>();
    case DType::i32:
      return py::dtype::of<int32_t>();
  }
  throw Error("numpy: unknown dtype");
}

// The tapegrad dtype an array of numpy dtype `d` becomes (exact for the three shared ones).
DType target_dtype(const py::dtype& d) {
  switch (d.kind()) {
    case 'f':
      return d.itemsize() >= 8 ? DType::f64 : DType::f32;
    case 'b':
      return DType::f32;
    case 'i':
    case 'u':
      return DType::i32;
    default:
      throw DTypeError("tensor: numpy dtype " + d.attr("name").cast<std::string>() +
                       " has no tapegrad dtype (float32, float64, int32; integers and bools are converted)");
  }
}

Shape array_shape(const py::array& a) {
  std::vector<int64_t> dims(size_t(a.ndim()));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = int64_t(a.shape(ssize_t(i)));
  return Shape(dims);
}

Tensor copy_array(const py::array& a, DType d) {
  if (d == DType::i32 && a.size() > 0 && a.dtype().itemsize() >= 4 &&
      !is_dtype(a.dtype(), py::dtype::of<int32_t>())) {
    const auto lo = a.attr("min")().cast<long long>(), hi = a.attr("max")().cast<long long>();
    if (lo < INT32_MIN || hi > INT32_MAX)
      throw DTypeError("tensor: integer values in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "] do not fit int32");
  }
  py::array c =
      py::array::ensure(a.attr("astype")(numpy_dtype(d), py::arg("order") = "C"), py::array::c_style);
  Tensor t = Tensor::empty(array_shape(c), d);
  if (t.numel() > 0) std::memcpy(t.impl()->storage->data, c.data(), size_t(t.numel() * dtype_size(d)));
  return t;
}

Tensor from_array(const py::array& a) {
  const DType d = target_dtype(a.dtype());
  const int flags = npy::array_proxy(a.ptr())->flags;
  const int want = npy::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | npy::npy_api::NPY_ARRAY_ALIGNED_ |
                   npy::npy_api::NPY_ARRAY_WRITEABLE_;
  if (!is_dtype(a.dtype(), numpy_dtype(d)) || (flags & want) != want) return copy_array(a, d);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = array_shape(a);
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = d;
  const int64_t bytes = impl->shape.numel() * dtype_size(d);
  impl->storage =
      std::make_shared<Storage>(const_cast<void*>(a.data()), bytes, std::static_pointer_cast<void>(hold(a)));
  return Tensor(std::move(impl));
}

bool as_number(py::handle h, double* out) {
  if (PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr())) {
    *out = h.cast<double>();
    return true;
  }
  return false;
}

DType parse_dtype(py::handle h) {
  if (h.is_none()) return DType::f32;
  const std::string s =
      py::isinstance<py::str>(h)
          ? h.cast<std::string>()
          : py::dtype::from_args(py::reinterpret_borrow<py::object>(h)).attr("name").cast<std::string>();
  if (s == "float32" || s == "f32") return DType::f32;
  if (s == "float64" || s == "f64") return DType::f64;
  if (s == "int32" || s == "i32") return DType::i32;
  throw DTypeError("dtype " + s + ": expected float32, float64 or int32");
}

py::array to_numpy(const Tensor& t) {
  const int64_t item = dtype_size(t.dtype());
  std::vector<ssize_t> shape, strides;
  for (int i = 0; i < t.ndim(); ++i) {
    shape.push_back(ssize_t(t.shape()[i]));
    strides.push_back(ssize_t(t.strides()[i] * item));
  }
  char* data = static_cast<char*>(t.impl()->storage->data) + t.impl()->offset * item;
  py::capsule base(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpy_dtype(t.dtype()), shape, strides, data, base);
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple out(size_t(s.ndim()));
  for (int i = 0; i < s.ndim(); ++i) out[size_t(i)] = s[i];
  return out;
}

// A comparison as a 0/1 mask of a - b's sign (exact: a - b is zero only when a == b, NaN compares false).
template <class Cmp>
Tensor compare(const Tensor& a, py::handle b, Cmp cmp) {
  double s = 0;
  const Tensor other = as_number(b, &s) ? Tensor() : to_operand(b, a);
  py::gil_scoped_release release;
  NoGrad no_grad;
  const Tensor d = other.defined() ? sub(a, other) : add(a, -s);
  Tensor out = Tensor::empty(d.shape(), d.dtype());
  const Tensor dc = d.contiguous();
  auto fill = [&]<class T>() {
    const T* x = dc.data<T>();
    T* y = out.data<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) y[i] = cmp(x[i]) ? T(1) : T(0);
  };
  if (d.dtype() == DType::f64)
    fill.template operator()<double>();
  else if (d.dtype() == DType::f32)
    fill.template operator()<float>();
  else
    throw DTypeError("comparison: needs float32 or float64 operands, got " + d.describe());
  return out;
}

// t[key]: ints and basic slices (step 1), Ellipsis and None, each a narrow / reshape, so the result
// is a view on the tape like any op's.
Tensor index(const Tensor& self, py::handle key) {
  py::tuple items =
      py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  int consumed = 0;
  for (auto item : items)
    if (!item.is_none() && !item.is(py::ellipsis())) ++consumed;
  if (consumed > self.ndim())
    throw IndexError("index: " + std::to_string(consumed) + " indices for a tensor of shape " +
                     to_string(self.shape()));
  Tensor t = self;
  int axis = 0;      // in t
  int src_axis = 0;  // the same axis in self, for messages
  bool ellipsis = false;
  for (auto item : items) {
    if (item.is(py::ellipsis())) {
      if (ellipsis) throw IndexError("index: at most one Ellipsis");
      ellipsis = true;
      axis += self.ndim() - consumed;
      src_axis += self.ndim() - consumed;
    } else if (item.is_none()) {
      Shape s = t.shape();
      s.insert(axis++, 1);
      t = reshape(t, s);
    } else if (PySlice_Check(item.ptr())) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(item.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      const Py_ssize_t len = PySlice_AdjustIndices(Py_ssize_t(t.size(axis)), &start, &stop, step);
      if (step != 1)
        throw IndexError("index: slice step " + std::to_string(step) + " on axis " +
                         std::to_string(src_axis) + " of shape " + to_string(self.shape()) +
                         ": only step 1 is a view (use numpy for others)");
      t = narrow(t, axis++, start, len);
      ++src_axis;
    } else if (PyIndex_Check(item.ptr()) && !PyBool_Check(item.ptr())) {
      int64_t i = py::reinterpret_borrow<py::object>(item).cast<int64_t>();
      const int64_t n = t.size(axis);
      if (i < -n || i >= n)
        throw IndexError("index: " + std::to_string(i) + " is out of range for axis " +
                         std::to_string(src_axis) + " of shape " + to_string(self.shape()));
      ++src_axis;
      if (i < 0) i += n;
      Shape s = t.shape();
      s.erase(axis);
      t = reshape(narrow(t, axis, i, 1), s);
    } else {
      throw IndexError("index: only ints, slices, Ellipsis and None index a tensor, not " +
                       py::type::of(item).attr("__name__").cast<std::string>() +
                       " (ops.embedding gathers rows, ops.where selects)");
    }
  }
  return t;
}

}  // namespace

Tensor to_tensor(py::handle obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  py::array a = py::array::ensure(obj);
  if (!a)
    throw DTypeError("tensor: cannot make a tensor of a " +
                     py::type::of(obj).attr("__name__").cast<std::string>());
  return from_array(a);
}

Tensor to_operand(py::handle obj, const Tensor& like) {
  double s = 0;
  if (as_number(obj, &s)) return Tensor::full({}, s, like.dtype());
  return to_tensor(obj);
}

void bind_tensor(py::module_& m) {
  m.attr("float32") = "float32";
  m.attr("float64") = "float64";
  m.attr("int32") = "int32";

  py::class_<Tensor> cls(m, "Tensor",
                         "An N-dimensional array on shared storage with the autograd fields of the tape. "
                         "Tensor(array) is tensor(array).");
  auto make = [](py::object data, bool requires_grad, py::object dtype) {
    Tensor t = py::isinstance<Tensor>(data) ? data.cast<Tensor>().detach() : to_tensor(data);
    if (!dtype.is_none() && parse_dtype(dtype) != t.dtype()) t = t.to(parse_dtype(dtype));
    if (requires_grad) t.requires_grad_(true);
    return t;
  };
  cls.def(py::init(make), py::arg("data"), py::arg("requires_grad") = false, py::arg("dtype") = py::none());
  py::implicitly_convertible<py::array, Tensor>();
  m.def("tensor", make, py::arg("data"), py::arg("requires_grad") = false, py::arg("dtype") = py::none(),
        "A tensor of `data` (a numpy array, a nested list, a number, a Tensor). Shares the memory of a "
        "C-contiguous, aligned, writable float32/float64/int32 array; copies anything else. A Tensor gives "
        "a new leaf sharing its data. `dtype` converts (a copy).");

  auto creator = [&](const char* name, auto fn, const char* doc) {
    m.def(
        name,
        [fn](std::vector<int64_t> shape, py::object dtype, bool requires_grad) {
          Tensor t = fn(Shape(shape), parse_dtype(dtype));
          if (requires_grad) t.requires_grad_(true);
          return t;
        },
        py::arg("shape"), py::arg("dtype") = "float32", py::arg("requires_grad") = false, doc);
  };
  creator(
      "zeros", [](const Shape& s, DType d) { return Tensor::zeros(s, d); }, "All zeros.");
  creator(
      "ones", [](const Shape& s, DType d) { return Tensor::ones(s, d); }, "All ones.");
  creator(
      "empty", [](const Shape& s, DType d) { return Tensor::empty(s, d); }, "Uninitialised.");
  creator(
      "randn", [](const Shape& s, DType d) { return Tensor::randn(s, default_generator(), d); },
      "Standard normal draws from this thread's default generator (manual_seed).");
  creator(
      "rand", [](const Shape& s, DType d) { return Tensor::rand(s, default_generator(), d); },
      "Uniform [0, 1) draws from this thread's default generator.");
  m.def(
      "full",
      [](std::vector<int64_t> shape, double v, py::object dtype) {
        return Tensor::full(Shape(shape), v, parse_dtype(dtype));
      },
      py::arg("shape"), py::arg("value"), py::arg("dtype") = "float32");
  m.def(
      "arange", [](int64_t n, py::object dtype) { return Tensor::arange(n, parse_dtype(dtype)); },
      py::arg("n"), py::arg("dtype") = "float32");
  m.def("manual_seed", &manual_seed, py::arg("seed"), "Reseeds this thread's default generator.");

  cls.def("numpy", &to_numpy,
          "The data as a numpy array sharing memory (no copy, views included); the array keeps the "
          "tensor's storage alive. Writes through it bypass the tape.");
  cls.def(
      "__array__",
      [](const Tensor& t, py::object dtype) {
        py::array a = to_numpy(t);
        return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
      },
      py::arg("dtype") = py::none());
  cls.def_property_readonly("shape", [](const Tensor& t) { return shape_tuple(t.shape()); });
  cls.def_property_readonly(
      "strides", [](const Tensor& t) { return shape_tuple(t.strides()); }, "In elements.");
  cls.def_property_readonly("ndim", &Tensor::ndim);
  cls.def_property_readonly(
      "dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); },
      "'float32', 'float64' or 'int32'.");
  cls.def("numel", &Tensor::numel);
  cls.def(
      "size",
      [](const Tensor& t, py::object axis) -> py::object {
        if (axis.is_none()) return shape_tuple(t.shape());
        return py::int_(t.size(axis.cast<int>()));
      },
      py::arg("axis") = py::none());
  cls.def("__len__", [](const Tensor& t) {
    if (t.ndim() == 0) throw py::type_error("len() of a 0-d tensor");
    return t.size(0);
  });
  cls.def("is_contiguous", &Tensor::is_contiguous);
  cls.def_property_readonly(
      "data_ptr",
      [](const Tensor& t) {
        return reinterpret_cast<uintptr_t>(t.impl()->storage->data) +
               uintptr_t(t.impl()->offset * dtype_size(t.dtype()));
      },
      "Address of the first element (to check sharing with numpy's a.ctypes.data).");
  cls.def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool on) { t.requires_grad_(on); });
  cls.def(
      "requires_grad_", [](Tensor& t, bool on) { return t.requires_grad_(on); }, py::arg("on") = true);
  cls.def_property_readonly("is_leaf", &Tensor::is_leaf);
  cls.def_property_readonly(
      "grad",
      [](const Tensor& t) -> py::object {
        const Tensor g = t.grad();
        return g.defined() ? py::cast(g) : py::none();
      },
      "The accumulated gradient, or None.");
  cls.def("zero_grad", &Tensor::zero_grad, "Drops the gradient (.grad becomes None).");
  cls.def("retain_grad", &Tensor::retain_grad);
  cls.def("detach", &Tensor::detach, "A leaf sharing the data, cut off from the tape.");
  cls.def("clone", &Tensor::clone, "A contiguous copy (not recorded).");
  cls.def(
      "to", [](const Tensor& t, py::object d) { return t.to(parse_dtype(d)); }, py::arg("dtype"),
      "A converted copy (not recorded).");
  cls.def(
      "copy_",
      [](Tensor& t, py::object src) {
        t.copy_from(to_tensor(src));
        return t;
      },
      py::arg("src"), "Copies src's values in place (same shape and dtype; not recorded).");
  cls.def("item", &Tensor::item);
  cls.def("tolist", [](const Tensor& t) { return to_numpy(t).attr("tolist")(); });
  cls.def("__float__", &Tensor::item);
  cls.def("__bool__", [](const Tensor& t) {
    if (t.numel() != 1)
      throw ShapeError("bool(): a tensor of shape " + to_string(t.shape()) + " is ambiguous; use .item()");
    return t.item() != 0;
  });
  cls.def_property(
      "name", [](const Tensor& t) { return t.impl()->name; },
      [](Tensor& t, std::string n) { t.impl()->name = std::move(n); },
      "Shown in tape dumps (parameters get their module path).");
  cls.def("__repr__", [](const Tensor& t) {
    if (!t.defined()) return std::string("tensor(undefined)");
    return t.to_string();
  });
  cls.def("describe", &Tensor::describe);
  cls.def("__hash__", [](const Tensor& t) { return std::hash<const void*>()(t.impl()); });
  cls.def("same", &Tensor::same, "True when both handles are the same tensor.");
  cls.def("__getitem__", &index,
          "Ints and step-1 slices, Ellipsis and None: views recorded as narrow/reshape.");

  // Operators. A Python number takes the tensor's dtype; an array must match it (DTypeError otherwise).
  using py::gil_scoped_release;
  auto binary = [&](const char* name, auto with_tensor, auto with_number) {
    cls.def(name, [with_tensor, with_number](const Tensor& a, py::handle b) {
      double s = 0;
      if (as_number(b, &s)) {
        gil_scoped_release r;
        return with_number(a, s);
      }
      const Tensor bt = to_tensor(b);
      gil_scoped_release r;
      return with_tensor(a, bt);
    });
  };
  auto full_like = [](const Tensor& a, double s) { return Tensor::full({}, s, a.dtype()); };
  binary(
      "__add__", [](const Tensor& a, const Tensor& b) { return add(a, b); },
      [](const Tensor& a, double s) { return add(a, s); });
  binary(
      "__radd__", [](const Tensor& a, const Tensor& b) { return add(b, a); },
      [](const Tensor& a, double s) { return add(a, s); });
  binary(
      "__sub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
      [](const Tensor& a, double s) { return a - s; });
  binary(
      "__rsub__", [](const Tensor& a, const Tensor& b) { return sub(b, a); },
      [](const Tensor& a, double s) { return s - a; });
  binary(
      "__mul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
      [](const Tensor& a, double s) { return mul(a, s); });
  binary(
      "__rmul__", [](const Tensor& a, const Tensor& b) { return mul(b, a); },
      [](const Tensor& a, double s) { return mul(a, s); });
  binary(
      "__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); },
      [](const Tensor& a, double s) { return a / s; });
  binary(
      "__rtruediv__", [](const Tensor& a, const Tensor& b) { return div(b, a); },
      [full_like](const Tensor& a, double s) { return div(full_like(a, s), a); });
  binary(
      "__pow__", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
      [](const Tensor& a, double s) { return pow(a, s); });
  binary(
      "__rpow__", [](const Tensor& a, const Tensor& b) { return pow(b, a); },
      [full_like](const Tensor& a, double s) { return pow(full_like(a, s), a); });
  binary(
      "__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); },
      [](const Tensor&, double) -> Tensor { throw ShapeError("matmul: an operand is a scalar"); });
  binary(
      "__rmatmul__", [](const Tensor& a, const Tensor& b) { return matmul(b, a); },
      [](const Tensor&, double) -> Tensor { throw ShapeError("matmul: an operand is a scalar"); });
  cls.def(
      "__neg__", [](const Tensor& a) { return neg(a); }, py::call_guard<gil_scoped_release>());
  cls.def("__pos__", [](const Tensor& a) { return a; });
  cls.def("__lt__",
          [](const Tensor& a, py::handle b) { return compare(a, b, [](auto d) { return d < 0; }); });
  cls.def("__le__",
          [](const Tensor& a, py::handle b) { return compare(a, b, [](auto d) { return d <= 0; }); });
  cls.def("__gt__",
          [](const Tensor& a, py::handle b) { return compare(a, b, [](auto d) { return d > 0; }); });
  cls.def("__ge__",
          [](const Tensor& a, py::handle b) { return compare(a, b, [](auto d) { return d >= 0; }); });
  // == and != against something that is no number or array (None, a string) are NotImplemented, so
  // Python falls back to identity, as for any object.
  auto comparable = [](py::handle b) {
    double s;
    return as_number(b, &s) || py::isinstance<Tensor>(b) || py::isinstance<py::array>(b) ||
           py::isinstance<py::list>(b) || py::isinstance<py::tuple>(b);
  };
  cls.def("__eq__", [comparable](const Tensor& a, py::handle b) -> py::object {
    if (!comparable(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return py::cast(compare(a, b, [](auto d) { return d == 0; }));
  });
  cls.def("__ne__", [comparable](const Tensor& a, py::handle b) -> py::object {
    if (!comparable(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return py::cast(compare(a, b, [](auto d) { return !(d == 0); }));
  });
}

}  // namespace tapegrad::python
