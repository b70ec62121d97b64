// Custom ops written in Python: a subclass of tapegrad.Function with static methods
//   forward(ctx, *args) -> Tensor, or a tuple of them     runs with recording off; args may mix
//                                                         tensors and other values
//   backward(ctx, *grad_outputs) -> grads   one d(output) per output (None for an output no gradient
//                                           reached, or an int32 one); returns one gradient per forward
//                                           argument (None for a non-tensor or one without a
//                                           gradient), a lone value when there is one argument
// and MyOp.apply(*args) to call it. A one-output op records one tape entry under the class's name
// through record_custom, exactly as a C++ custom op does. record_custom has one output, so an op with
// several records one entry under its name whose output is a scalar token, then one entry per
// floating output, "Name[k]", taking the token: in the reverse walk the output entries run first,
// each keeps its d(output) and sends a zero into the token so that the walk reaches the op's entry,
// whose closure calls backward with every d(output) kept (None for the rest). ctx.save_for_backward
// (*tensors) and ctx.saved_tensors carry what backward needs, ctx.needs_input_grad says which arguments
// want a gradient, and ctx takes any other attribute. As for C++ custom ops, a create_graph walk
// refuses the entry (AutogradError naming it). The backward runs under the GIL.
#include "bindings.hpp"
#include "tapegrad/autograd.hpp"

namespace tapegrad::python {

namespace {

struct FunctionCtx {
  std::vector<Tensor> saved;
  std::vector<bool> needs_input_grad;
};

std::string type_name(py::handle h) { return py::type::of(h).attr("__name__").cast<std::string>(); }

// What forward returned, as tensors; `multiple` when it was a tuple or list.
std::vector<Tensor> forward_outputs(const py::object& out, const std::string& name, bool* multiple) {
  *multiple = py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out);
  std::vector<Tensor> outputs;
  for (auto item : *multiple ? py::reinterpret_borrow<py::object>(out) : py::make_tuple(out)) {
    if (!py::isinstance<Tensor>(item))
      throw py::type_error(name + ".forward must return one tapegrad.Tensor or a tuple of them, not " +
                           (*multiple ? "a tuple holding a " : "") + type_name(item));
    outputs.push_back(item.cast<Tensor>());
  }
  if (*multiple && outputs.empty()) throw py::type_error(name + ".forward returned an empty tuple");
  return outputs;
}

// Calls backward(ctx, *grad_outputs) and adds each tensor argument's gradient into it.
void run_backward(const py::object& cls, const py::object& ctx, const std::string& name, py::tuple grad_outputs,
                  const std::vector<Tensor>& inputs, const std::vector<size_t>& positions, size_t nargs) {
  py::object grads = cls.attr("backward")(ctx, *grad_outputs);
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
      throw ShapeError(name + ".backward: the gradient of argument " + std::to_string(positions[k]) + " is " +
                       gt.describe() + ", the argument " + inputs[k].describe());
    py::gil_scoped_release release;
    accumulate_grad(inputs[k], gt);
  }
}

// The d(output)s one walk delivers to a several-output op, filled by the output entries before the
// op's own entry runs, and emptied by it.
struct OutputGrads {
  std::vector<Tensor> grads;
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
  bool multiple = false;
  std::vector<Tensor> outputs = forward_outputs(out, name, &multiple);
  if (!should_record(inputs)) return out;
  // An output that is an input, or repeats an earlier output, becomes a handle of its own on the same
  // data: recording marks its output as the entry's, which must not rewrite an input's history.
  for (size_t k = 0; k < outputs.size(); ++k) {
    bool aliased = false;
    for (const Tensor& in : inputs) aliased |= outputs[k].same(in);
    for (size_t j = 0; j < k; ++j) aliased |= outputs[k].same(outputs[j]);
    if (aliased) outputs[k] = outputs[k].detach();
  }
  const size_t nargs = args.size();
  PyRef held_cls = hold(cls), held_ctx = hold(ctx_obj);
  if (!multiple) {
    record_custom(name, inputs, outputs[0], [held_cls, held_ctx, inputs, positions, nargs, name](const Tensor& dy) {
      py::gil_scoped_acquire gil;
      run_backward(*held_cls, *held_ctx, name, py::make_tuple(dy), inputs, positions, nargs);
    });
    return py::cast(outputs[0]);
  }
  const size_t nout = outputs.size();
  auto delivered = std::make_shared<OutputGrads>();
  delivered->grads.resize(nout);
  DType token_dtype = DType::i32;
  for (const Tensor& o : outputs)
    if (o.is_floating() && token_dtype == DType::i32) token_dtype = o.dtype();
  if (token_dtype == DType::i32) return out;  // only int32 outputs: nothing to differentiate
  const Tensor token = Tensor::zeros({}, token_dtype);
  record_custom(name, inputs, token,
                [held_cls, held_ctx, inputs, positions, nargs, name, delivered](const Tensor&) {
                  std::vector<Tensor> grads;
                  std::swap(grads, delivered->grads);  // empty again for the next walk
                  delivered->grads.resize(grads.size());
                  py::gil_scoped_acquire gil;
                  py::tuple dys(grads.size());
                  for (size_t k = 0; k < grads.size(); ++k)
                    dys[k] = grads[k].defined() ? py::cast(grads[k]) : py::none();
                  run_backward(*held_cls, *held_ctx, name, dys, inputs, positions, nargs);
                });
  py::tuple result(nout);
  for (size_t k = 0; k < nout; ++k) {
    if (outputs[k].is_floating()) {
      record_custom(name + "[" + std::to_string(k) + "]", {token}, outputs[k],
                    [token, delivered, k](const Tensor& dy) {
                      delivered->grads[k] = dy;
                      accumulate_grad(token, Tensor::zeros({}, token.dtype()));  // so the walk reaches the op
                    });
    }
    result[k] = py::cast(outputs[k]);  // an int32 output (indices) is not differentiable: not recorded
  }
  return result;
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
      "Subclass with static forward(ctx, *args) (a tensor or a tuple of them) and backward(ctx, *grad_outputs) "
      "(one per output, None where no gradient reached it); call MyOp.apply(*args).";
  ns["__module__"] = "tapegrad";
  py::object fn_cls =
      py::reinterpret_borrow<py::object>((PyObject*)&PyType_Type)("Function", py::make_tuple(), ns);
  py::cpp_function impl(&apply, py::name("apply"), py::arg("cls"));
  fn_cls.attr("apply") = py::reinterpret_steal<py::object>(PyClassMethod_New(impl.ptr()));
  m.attr("Function") = fn_cls;
}

}  // namespace tapegrad::python
