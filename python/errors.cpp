// tapegrad's exceptions as Python exceptions carrying the C++ message. tapegrad.Error is the base of
// all; each subclass also derives from the built-in exception a Python caller would expect:
//   ShapeError(Error, ValueError)   DTypeError(Error, TypeError)   IndexError(Error, IndexError)
//   AutogradError(Error, RuntimeError)   IoError(Error, OSError)   NonFiniteError(Error, ArithmeticError)
//   OutOfMemory(Error, MemoryError)
// The kernels' settings throw std::runtime_error, which pybind11 turns into RuntimeError.
#include "bindings.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::python {

namespace {

PyObject* g_error = nullptr;
PyObject* g_shape = nullptr;
PyObject* g_dtype = nullptr;
PyObject* g_index = nullptr;
PyObject* g_autograd = nullptr;
PyObject* g_io = nullptr;
PyObject* g_nonfinite = nullptr;
PyObject* g_oom = nullptr;

PyObject* make(py::module_& m, const char* name, PyObject* builtin, const char* doc) {
  const std::string full = std::string("tapegrad.") + name;
  py::tuple bases = builtin ? py::make_tuple(py::handle(g_error), py::handle(builtin))
                            : py::make_tuple(py::handle(PyExc_Exception));
  PyObject* type = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module holds a reference; so does the global
  return type;
}

}  // namespace

void bind_errors(py::module_& m) {
  g_error = make(m, "Error", nullptr, "The base of every tapegrad exception.");
  g_shape = make(m, "ShapeError", PyExc_ValueError, "Incompatible shapes, bad axes, wrong ranks.");
  g_dtype = make(m, "DTypeError", PyExc_TypeError, "Mixed or unsupported dtypes.");
  g_index = make(m, "IndexError", PyExc_IndexError, "An index outside its valid range.");
  g_autograd = make(m, "AutogradError", PyExc_RuntimeError, "Misuse of the tape.");
  g_io = make(m, "IoError", PyExc_OSError, "Reading or writing files.");
  g_nonfinite =
      make(m, "NonFiniteError", PyExc_ArithmeticError, "A NaN or infinity where a finite value is needed.");
  g_oom = make(m, "OutOfMemory", PyExc_MemoryError, "Memory the machine cannot provide.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(g_shape, e.what());
    } catch (const DTypeError& e) {
      PyErr_SetString(g_dtype, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(g_index, e.what());
    } catch (const AutogradError& e) {
      PyErr_SetString(g_autograd, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(g_io, e.what());
    } catch (const NonFiniteError& e) {
      PyErr_SetString(g_nonfinite, e.what());
    } catch (const OutOfMemory& e) {
      PyErr_SetString(g_oom, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

}  // namespace tapegrad::python
