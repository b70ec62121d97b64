// What the files of the Python module share: the pieces each binds, the conversion of Python values
// to tensors, and Python objects held by C++ (tape closures, foreign storage) whose last release
// takes the GIL. Only the public headers (<tapegrad/...>) are included: this is a layer above the
// library, like the examples.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "tapegrad/tensor.hpp"

namespace tapegrad::python {

namespace py = pybind11;

// A Python object owned from C++. Copies and the last release are safe without the GIL (a tape entry
// can die inside backward, with the GIL released): the object is dropped under the GIL, and leaked
// if the interpreter is already gone.
using PyRef = std::shared_ptr<py::object>;
PyRef hold(py::object obj);

// A tensor from a Tensor, a numpy array (or anything with the buffer protocol or a nested list):
// shares memory with a C-contiguous, aligned, writable float32/float64/int32 array, else copies
// (other integers become int32, bool and float16 float32; see tensor.cpp).
Tensor to_tensor(py::handle obj);
// A tensor from a Python number or a tensor-like (as to_tensor), a number taking `like`'s dtype and
// shape [] (for broadcasting).
Tensor to_operand(py::handle obj, const Tensor& like);

// The generator a `seed` argument names: a Generator (itself), an int (`scratch` seeded with it) or
// None (this thread's default generator); TypeError for anything else.
Generator& generator_arg(py::handle seed, Generator& scratch);
// "float32" or "float64" as a DType; DTypeError for anything else.
DType module_dtype(const std::string& name);

// The pieces, in the order module.cpp calls them.
void bind_errors(py::module_& m);
void bind_tensor(py::module_& m);
void bind_ops(py::module_& m, py::module_& ops);
void bind_engine(py::module_& m);
void bind_function(py::module_& m);
void bind_nn(py::module_& m, py::module_& nn, py::module_& optim);
// The recurrent and Transformer layers, the seq2seq models and GPT (tapegrad.nn), batches and
// vocabularies (tapegrad.data), train_step and checkpoint loading (tapegrad.train).
void bind_models(py::module_& nn, py::module_& data, py::module_& train);

}  // namespace tapegrad::python
