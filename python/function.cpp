// Custom ops written in Python: a subclass of tapegrad.Function with static methods
//   forward(ctx, *args) -> Tensor          runs with recording off; args may mix tensors and others
//   backward(ctx, grad_output) -> grads    one per forward argument (None for a non-tensor or one
//                                          without a gradient), a lone value when there is one argument
// and MyOp.apply(*args) to call it. apply records one tape entry under the class's name through
// record_custom, exactly as a C++ custom op does; ctx.save_for_backward(*tensors) and
// ctx.saved_tensors carry what backward needs, ctx.needs_input_grad says which arguments want a
// gradient, and ctx takes any other attribute. As for C++ custom ops, a create_graph walk refuses
// the entry (AutogradError naming it). The backward runs under the GIL.
#include "bindings.hpp"
#include "tapegrad/autograd.hpp"

namespace tapegrad::python {

namespace {

struct FunctionCtx {
  std::vector<Tensor> saved;
  std::vector<bool> needs_input_grad;
};

py::object apply(py::object cls, py::args args) {
  std::vector<Tensor> inputs;
  std::vector<size_t> positions;  // of each tensor input among args
  auto ctx_obj = py::cast(FunctionCtx{});
  FunctionCtx& ctx = ctx_obj.cast<FunctionCtx&>();
  for (size_t i = 0; i < args.size(); ++i) {
    const bool is_tensor = py::isinstance<Tensor>(args[i]);
    if (is_tensor) {
      inputs.push_back(args[i].cast<Tensor>());
      positions.push_back(i);
    }
    ctx.needs_input_grad.push_back(is_tensor && args[i].cast<Tensor>().requires_grad() && grad_enabled());
  }
  const std::string name = cls.attr("__name__").cast<std::string>();
  py::object out;
  {
    NoGrad no_grad;
    out = cls.attr("forward")(ctx_obj, *args);
  }
  if (!py::isinstance<Tensor>(out))
    throw py::type_error(name + ".forward must return one tapegrad.Tensor, not " +
                         py::type::of(out).attr("__name__").cast<std::string>());
  const Tensor output = out.cast<Tensor>();
  if (!should_record(inputs)) return out;
  const size_t nargs = args.size();
  PyRef held_cls = hold(cls), held_ctx = hold(ctx_obj);
  record_custom(name, inputs, output, [held_cls, held_ctx, inputs, positions, nargs, name](const Tensor& dy) {
    py::gil_scoped_acquire gil;
    py::object grads = held_cls->attr("backward")(*held_ctx, dy);
    std::vector<py::object> per_arg;
    if (py::isinstance<py::tuple>(grads) || py::isinstance<py::list>(grads)) {
      for (auto g : grads) per_arg.push_back(py::reinterpret_borrow<py::object>(g));
    } else {
      per_arg.push_back(grads);
    }
    if (per_arg.size() != nargs)
      throw AutogradError(name + ".backward returned " + std::to_string(per_arg.size()) + " gradients for " +
                          std::to_string(nargs) + " forward arguments");
    for (size_t k = 0; k < inputs.size(); ++k) {
      const py::object& g = per_arg[positions[k]];
      if (g.is_none() || !inputs[k].requires_grad()) continue;
      const Tensor gt = to_tensor(g);
      if (gt.shape() != inputs[k].shape())
        throw ShapeError(name + ".backward: the gradient of argument " + std::to_string(positions[k]) +
                         " is " + gt.describe() + ", the argument " + inputs[k].describe());
      py::gil_scoped_release release;
      accumulate_grad(inputs[k], gt);
    }
  });
  return out;
}

}  // namespace

void bind_function(py::module_& m) {
  py::class_<FunctionCtx>(m, "FunctionCtx", py::dynamic_attr(), "What forward hands to backward.")
      .def("save_for_backward",
           [](FunctionCtx& c, py::args ts) {
             c.saved.clear();
             for (auto t : ts) c.saved.push_back(t.cast<Tensor>());
           })
      .def_property_readonly("saved_tensors",
                             [](const FunctionCtx& c) { return py::cast(c.saved).cast<py::tuple>(); })
      .def_property_readonly("needs_input_grad", [](const FunctionCtx& c) {
        return py::cast(c.needs_input_grad).cast<py::tuple>();
      });
  // Function is a plain Python class (so subclasses need nothing from pybind11) whose apply is a
  // classmethod calling the C++ apply above.
  py::dict ns;
  ns["__doc__"] =
      "Subclass with static forward(ctx, *args) and backward(ctx, grad_output); call MyOp.apply(*args).";
  ns["__module__"] = "tapegrad";
  py::object fn_cls =
      py::reinterpret_borrow<py::object>((PyObject*)&PyType_Type)("Function", py::make_tuple(), ns);
  py::cpp_function impl(&apply, py::name("apply"), py::arg("cls"));
  fn_cls.attr("apply") = py::reinterpret_steal<py::object>(PyClassMethod_New(impl.ptr()));
  m.attr("Function") = fn_cls;
}

}  // namespace tapegrad::python
