// The Python module `tapegrad`: tensors sharing memory with numpy, the ops (also under
// tapegrad.ops), the engine (backward, grad, no_grad, the tape, gradcheck, the functional API),
// custom ops written in Python (tapegrad.Function), the nn modules, models and optimizers
// (tapegrad.nn, tapegrad.optim), batches and vocabularies (tapegrad.data), and train_step and
// checkpoint loading (tapegrad.train). Errors arrive as the Python exceptions of errors.cpp.
#include "bindings.hpp"

namespace tapegrad::python {

PyRef hold(py::object obj) {
  return PyRef(new py::object(std::move(obj)), [](py::object* p) {
    if (!Py_IsInitialized()) return;  // interpreter gone (thread-local tapes die late): leak
    py::gil_scoped_acquire gil;
    delete p;
  });
}

}  // namespace tapegrad::python

PYBIND11_MODULE(tapegrad, m) {
  namespace tp = tapegrad::python;
  m.doc() = "tapegrad: reverse-mode autodiff on a tape, with numpy arrays shared without copies";
  // Submodules, also importable by name (import tapegrad.ops).
  auto sys_modules = pybind11::module_::import("sys").attr("modules");
  auto sub = [&](const char* name, const char* doc) {
    pybind11::module_ s = m.def_submodule(name, doc);
    sys_modules[(std::string("tapegrad.") + name).c_str()] = s;
    return s;
  };
  pybind11::module_ ops = sub("ops", "Differentiable functions (ops.hpp)");
  pybind11::module_ nn = sub("nn", "Layers with named parameters (nn/*.hpp) and nn.save / nn.load");
  pybind11::module_ optim = sub("optim", "Optimizers, clipping and learning-rate schedules (optim.hpp)");
  pybind11::module_ data = sub("data", "Padded batches and vocabularies (data.hpp)");
  pybind11::module_ train = sub("train", "The training step and checkpoint loading (train.hpp, train/step.hpp)");
  tp::bind_errors(m);
  tp::bind_tensor(m);
  tp::bind_ops(m, ops);
  tp::bind_engine(m);
  tp::bind_function(m);
  tp::bind_nn(m, nn, optim);
  tp::bind_models(nn, data, train);
}
