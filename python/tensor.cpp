// tapegrad.Tensor in Python: creation from numpy (shared memory when the layout allows, else a
// copy), .numpy() (always shared), the autograd fields, printing, indexing as differentiable views,
// indexing as numpy does it (basic indexing as views; steps, integer arrays and masks as a recorded
// gather; assignment in place where no gradient would go wrong), and the operators.
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

#include <algorithm>
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

// ---- indexing, as numpy does it
//
// t[key] is built from recorded ops, so it differentiates like any op (to any order):
//   ints, step-1 slices, None, Ellipsis   narrow / reshape: views
//   slices with another step (negative too), integer arrays (lists, int32 tensors), boolean masks
//                                         a gather: the indexed axes moved to the front and
//                                         flattened, rows picked by embedding (whose backward
//                                         scatter-adds, so repeated indices accumulate): a copy
// Advanced indices follow numpy's rules: they broadcast together, an int beside them is one of them,
// and their dimensions replace the indexed axes when those are adjacent in the key, else go first.
// A float tensor of 0s and 1s (what comparisons return) indexes as a boolean mask.
// t[key] = value writes in place through numpy (the same memory), so numpy's rules hold exactly; it is
// not recorded (the library has no in-place ops), so it refuses what would make a gradient wrong.

// A Tensor used as an index, as numpy sees it: int32 as integers, a 0/1 float mask as bools.
py::object tensor_index(const Tensor& t) {
  py::array a = to_numpy(t);
  if (!t.is_floating()) return a;
  const Tensor c = t.contiguous();
  for (double v : c.to_vector())
    if (v != 0 && v != 1)
      throw IndexError("index: a float tensor indexes only as a mask of 0s and 1s (what comparisons return), got " +
                       t.describe() + " holding " + std::to_string(v) + "; use an int32 tensor for positions");
  return a.attr("astype")("bool");
}

// Each item of a key with tensors replaced by numpy arrays (for assignment through numpy).
py::object numpy_key(py::handle key) {
  auto item_of = [](py::handle h) -> py::object {
    if (py::isinstance<Tensor>(h)) return tensor_index(h.cast<Tensor>());
    return py::reinterpret_borrow<py::object>(h);
  };
  if (!py::isinstance<py::tuple>(key)) return item_of(key);
  py::list items;
  for (auto h : key) items.append(item_of(h));
  return py::tuple(items);
}

bool is_array_item(py::handle h) {
  return py::isinstance<Tensor>(h) || py::isinstance<py::array>(h) || py::isinstance<py::list>(h);
}

// One item of a key once Ellipsis is expanded and every mask is turned into integer arrays.
struct KeyItem {
  enum Kind { slice, integer, array, new_axis } kind;
  py::object object;  // the slice, or the int64 array
  int64_t value = 0;  // an integer's
};

std::string type_name(py::handle h) { return py::type::of(h).attr("__name__").cast<std::string>(); }

std::vector<KeyItem> parse_key(const Tensor& self, py::handle key) {
  py::tuple raw = py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key) : py::make_tuple(key);
  std::vector<KeyItem> items;
  int ellipsis_at = -1, consumed = 0;
  for (auto h : raw) {
    if (h.is(py::ellipsis())) {
      if (ellipsis_at >= 0) throw IndexError("index: at most one Ellipsis");
      ellipsis_at = int(items.size());
    } else if (h.is_none()) {
      items.push_back({KeyItem::new_axis, py::none()});
    } else if (PySlice_Check(h.ptr())) {
      items.push_back({KeyItem::slice, py::reinterpret_borrow<py::object>(h)});
      ++consumed;
    } else if (PyBool_Check(h.ptr())) {
      throw IndexError("index: a bool is not an index (use a boolean array as a mask)");
    } else if (is_array_item(h)) {  // before ints: numpy arrays pass PyIndex_Check too
      auto np = py::module_::import("numpy");  // (only here: basic keys need none of numpy)
      py::array a = py::isinstance<Tensor>(h) ? py::array(tensor_index(h.cast<Tensor>())) : py::array(np.attr("asarray")(h));
      const char kind = a.dtype().kind();
      if (kind == 'b') {
        // A mask of k dimensions stands for the k axes it covers: its nonzero positions, one array per axis.
        const int k = int(a.ndim());
        for (int j = 0; j < k; ++j)
          if (consumed + j >= self.ndim() || a.shape(j) != self.size(consumed + j))
            throw IndexError("index: a boolean mask of shape " + py::str(a.attr("shape")).cast<std::string>() +
                             " does not match axes " + std::to_string(consumed) + ".. of shape " +
                             to_string(self.shape()));
        for (auto axis_positions : np.attr("nonzero")(a))
          items.push_back({KeyItem::array, py::reinterpret_borrow<py::object>(axis_positions)});
        consumed += k;
        if (k == 0) throw IndexError("index: a 0-d boolean mask is not supported");
      } else if (kind == 'i' || kind == 'u' || a.size() == 0) {
        items.push_back({KeyItem::array, a.attr("astype")("int64")});
        ++consumed;
      } else {
        throw IndexError("index: arrays used as indices must hold integers or bools, not " +
                         a.dtype().attr("name").cast<std::string>());
      }
    } else if (PyIndex_Check(h.ptr())) {
      items.push_back({KeyItem::integer, py::none(), py::reinterpret_borrow<py::object>(h).cast<int64_t>()});
      ++consumed;
    } else {
      throw IndexError("index: only ints, slices, Ellipsis, None, integer arrays and boolean masks index a "
                       "tensor, not " + type_name(h));
    }
  }
  if (consumed > self.ndim())
    throw IndexError("index: " + std::to_string(consumed) + " indices for a tensor of shape " + to_string(self.shape()));
  if (ellipsis_at >= 0)
    items.insert(items.begin() + ellipsis_at, size_t(self.ndim() - consumed),
                 KeyItem{KeyItem::slice, py::reinterpret_steal<py::object>(PySlice_New(nullptr, nullptr, nullptr))});
  return items;
}

// A position along an axis of `size` (axis `axis` of self, for the message), negative ones counted
// from the end; IndexError outside.
int64_t checked_position(int64_t i, int64_t size, int axis, const Tensor& self) {
  if (i < -size || i >= size)
    throw IndexError("index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) +
                     " of shape " + to_string(self.shape()));
  return i < 0 ? i + size : i;
}

// t's elements at positions[j][e] along axes[j] (each of n = numel(index_shape) elements), for every
// value of the other axes: index_shape + the other dimensions in order. The axes are moved to the
// front and flattened into one of P rows, the rest into R columns, and embedding picks the rows, so
// the gradient scatter-adds back. Integer tensors (nothing to differentiate) copy the rows directly.
Tensor gather(const Tensor& t, const std::vector<int>& axes, const std::vector<std::vector<int64_t>>& positions,
              const Shape& index_shape, const Tensor& self, const std::vector<int>& self_axes) {
  std::vector<int> perm = axes;
  for (int d = 0; d < t.ndim(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) perm.push_back(d);
  bool identity = true;
  for (size_t d = 0; d < perm.size(); ++d) identity &= perm[d] == int(d);
  const Tensor front = identity ? t : permute(t, perm);
  int64_t rows = 1, cols = 1;
  Shape out_shape = index_shape;
  for (size_t d = 0; d < perm.size(); ++d) {
    if (d < axes.size())
      rows *= front.size(int(d));
    else
      cols *= front.size(int(d)), out_shape.push_back(front.size(int(d)));
  }
  if (rows > INT32_MAX) throw IndexError("index: the indexed axes hold more than 2^31 positions");
  const int64_t n = index_shape.numel();
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    int64_t flat = 0;
    for (size_t j = 0; j < axes.size(); ++j) {
      const int64_t size = front.size(int(j));
      flat = flat * size + checked_position(positions[j][size_t(e)], size, self_axes[j], self);
    }
    ids[size_t(e)] = int32_t(flat);
  }
  // (reshapes to the shape a tensor already has are skipped: they would only add tape entries)
  auto reshaped = [](const Tensor& x, const Shape& s) { return x.shape() == s ? x : reshape(x, s); };
  const Tensor table = reshaped(front, Shape{rows, cols});
  if (t.is_floating()) return reshaped(embedding(table, Tensor::from_ids(ids, Shape{n})), out_shape);
  const Tensor src = table.contiguous();
  Tensor out = Tensor::empty(out_shape, t.dtype());
  for (int64_t e = 0; e < n; ++e)
    std::memcpy(out.data<int32_t>() + e * cols, src.data<int32_t>() + int64_t(ids[size_t(e)]) * cols,
                size_t(cols) * sizeof(int32_t));
  return out;
}

// A slice of any step as a gather of its positions along `axis` (their dimension stays in place).
Tensor stepped(const Tensor& t, int axis, Py_ssize_t start, Py_ssize_t step, Py_ssize_t len, const Tensor& self,
               int self_axis) {
  std::vector<int64_t> pos(static_cast<size_t>(len));
  for (Py_ssize_t i = 0; i < len; ++i) pos[size_t(i)] = start + i * step;
  const Tensor g = gather(t, {axis}, {pos}, Shape{int64_t(len)}, self, {self_axis});
  if (axis == 0) return g;
  std::vector<int> back;
  for (int d = 1; d <= axis; ++d) back.push_back(d);
  back.push_back(0);
  for (int d = axis + 1; d < g.ndim(); ++d) back.push_back(d);
  return permute(g, back);
}

Tensor index(const Tensor& self, py::handle key) {
  const std::vector<KeyItem> items = parse_key(self, key);
  bool advanced = false;
  for (const KeyItem& it : items) advanced |= it.kind == KeyItem::array;
  // The basic items first (ints only when no array is there: beside one, an int is an index array of
  // its own), keeping the advanced ones' axes whole and noting where they are.
  Tensor t = self;
  int axis = 0, src_axis = 0;
  std::vector<int> adv_axes, adv_src_axes, adv_items;
  std::vector<py::object> adv_arrays;
  for (size_t k = 0; k < items.size(); ++k) {
    const KeyItem& it = items[k];
    if (it.kind == KeyItem::new_axis) {
      Shape s = t.shape();
      s.insert(axis++, 1);
      t = reshape(t, s);
    } else if (it.kind == KeyItem::slice) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(it.object.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      const Py_ssize_t len = PySlice_AdjustIndices(Py_ssize_t(t.size(axis)), &start, &stop, step);
      if (step != 1)
        t = stepped(t, axis, start, step, len, self, src_axis);
      else if (len != t.size(axis))  // a whole axis (`:`) is t itself: no entry
        t = narrow(t, axis, start, len);
      ++axis, ++src_axis;
    } else if (it.kind == KeyItem::integer && !advanced) {
      const int64_t i = checked_position(it.value, t.size(axis), src_axis, self);
      Shape s = t.shape();
      s.erase(axis);
      t = reshape(narrow(t, axis, i, 1), s);
      ++src_axis;
    } else {
      adv_axes.push_back(axis++);
      adv_src_axes.push_back(src_axis++);
      adv_items.push_back(int(k));
      adv_arrays.push_back(it.kind == KeyItem::array ? it.object : py::cast(it.value));
    }
  }
  if (!advanced) return t;
  py::object broadcast;
  try {
    broadcast = py::module_::import("numpy").attr("broadcast_arrays")(*py::tuple(py::cast(adv_arrays)));
  } catch (py::error_already_set& e) {
    throw IndexError(std::string("index: the index arrays do not broadcast together: ") + e.what());
  }
  std::vector<std::vector<int64_t>> positions;
  Shape index_shape;
  for (auto b : broadcast) {
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> a(py::reinterpret_borrow<py::object>(b));
    positions.emplace_back(a.data(), a.data() + a.size());
    index_shape = Shape(std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  }
  Tensor out = gather(t, adv_axes, positions, index_shape, self, adv_src_axes);
  // Adjacent in the key: the index dimensions take the place of the first indexed axis.
  bool adjacent = true;
  for (size_t j = 1; j < adv_items.size(); ++j) adjacent &= adv_items[j] == adv_items[j - 1] + 1;
  const int before = adv_axes[0], nb = index_shape.ndim();
  if (!adjacent || before == 0 || nb == 0) return out;
  std::vector<int> dims;
  for (int d = 0; d < before; ++d) dims.push_back(nb + d);
  for (int d = 0; d < nb; ++d) dims.push_back(d);
  for (int d = nb + before; d < out.ndim(); ++d) dims.push_back(d);
  return permute(out, dims);
}

// t[key] = value, in place through numpy. Refused when the write would make a gradient wrong without
// a word: a leaf that requires grad while recording (write under no_grad, as initialisation does), a
// result on the tape, a value that requires grad (no gradient would reach it), or storage an entry
// on this thread's tape keeps for its backward.
void assign(const Tensor& self, py::handle key, py::handle value) {
  if (self.requires_grad() && !self.is_leaf())
    throw AutogradError("index assignment: " + self.describe() +
                        " is a result on the tape; writing into it is not recorded (there are no in-place ops), "
                        "so gradients through it would be wrong. Build the new value out of place (ops.where), or "
                        "write into .detach() / .clone()");
  if (self.requires_grad() && grad_enabled())
    throw AutogradError("index assignment: a leaf that requires grad (" + self.describe() +
                        ") cannot be written in place while recording; write under tapegrad.no_grad(), or into a "
                        "tensor that does not require grad");
  if (py::isinstance<Tensor>(value) && value.cast<Tensor>().requires_grad() && grad_enabled())
    throw AutogradError("index assignment: the value " + value.cast<Tensor>().describe() +
                        " requires grad, but an assignment is not recorded, so no gradient would reach it; pass "
                        ".detach() or write under tapegrad.no_grad()");
  const Storage* storage = self.impl()->storage.get();
  const Tape& tape = current_tape();
  for (size_t k = 0; k < tape.size(); ++k) {
    const TapeEntry& e = tape.entries()[k];
    bool holds = e.output.defined() && e.output.impl()->storage.get() == storage;
    for (const Tensor& in : e.inputs) holds |= in.defined() && in.impl()->storage.get() == storage;
    if (holds)
      throw AutogradError("index assignment: tape entry #" + std::to_string(k) + " (" + entry_name(e) +
                          ") keeps this tensor's memory for its backward, which the write would change; run "
                          "backward first, or write into a .clone()");
  }
  py::object v = py::isinstance<Tensor>(value) ? py::object(to_numpy(value.cast<Tensor>()))
                                                : py::reinterpret_borrow<py::object>(value);
  py::object target = to_numpy(self);
  target[numpy_key(key)] = v;
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
          "As numpy: ints, step-1 slices, Ellipsis and None are views recorded as narrow/reshape; other "
          "steps, integer arrays and boolean masks are a recorded gather (a copy). Differentiable.");
  cls.def("__setitem__", &assign,
          "t[key] = value in place, as numpy does it (shared memory); not recorded, so refused for a tensor "
          "that requires grad (a leaf may be written under no_grad) or that the tape keeps for backward.");

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
