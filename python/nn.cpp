// tapegrad.nn and tapegrad.optim: the basic layers (Linear, Embedding, LayerNorm), multi-head
// attention, Module's parameters and modes, Python subclasses of Module, nn.save / nn.load, the
// random Generator, the optimizers SGD, Adam, AdamW with clip_grad_norm, and the learning-rate
// schedules (optim.learning_rate and optim.Scheduler). The recurrent and Transformer layers and the
// models are in models.cpp.
// A layer's initialisation draws from its `seed` argument: a Generator (which advances), an int
// (a fresh Generator(seed)), or None (this thread's default generator, reseeded by manual_seed).
// An optimizer step releases the GIL.
#include <memory>
#include <optional>
#include <unordered_map>

#include "bindings.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/nn/attention.hpp"
#include "tapegrad/nn/layers.hpp"
#include "tapegrad/nn/module.hpp"
#include "tapegrad/optim.hpp"

namespace tapegrad::python {

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// Runs `make` with the generator `seed` names (see the top of this file).
template <class F>
auto with_generator(py::handle seed, F make) {
  Generator scratch;
  return make(generator_arg(seed, scratch));
}

// The base of Python subclasses of nn.Module: what a Python class derives from, so that its
// attributes register through Module's own (protected) registration and every C++ consumer
// (named_parameters, optimizers, clipping, nn.save / nn.load, to, train, train_step) sees them
// exactly as it sees a C++ module's. A registration is permanent (Module keeps no way to undo one),
// so a registered name may be assigned again only to the same object.
class PyModule : public nn::Module {
 public:
  // Registers `value` as `name` if it is a sub-module, or a leaf tensor that requires grad (a
  // parameter, as PyTorch's nn.Parameter); anything else stays a plain attribute. Returns whether
  // it registered something.
  bool register_attribute(const std::string& name, py::handle value) {
    if (py::isinstance<nn::Module>(value)) {
      auto child = value.cast<std::shared_ptr<nn::Module>>();
      if (!claim(name, child.get())) return false;
      register_module(name, std::move(child));
      return true;
    }
    if (py::isinstance<Tensor>(value)) {
      Tensor t = value.cast<Tensor>();
      if (!t.is_leaf() || !t.requires_grad()) {
        refuse_rebinding(name);
        return false;
      }
      if (!claim(name, t.impl())) return false;
      register_parameter(name, t);
      return true;
    }
    refuse_rebinding(name);
    return false;
  }
  // A constant that follows to(dtype) but is neither trained nor saved (sin/cos tables, masks).
  void add_buffer(const std::string& name, const Tensor& t) {
    if (claim(name, t.impl())) register_buffer(t);
  }

 private:
  // Records `name` as bound to `object`; false when it already is (nothing to register again).
  bool claim(const std::string& name, const void* object) {
    auto [it, fresh] = registered_.emplace(name, object);
    if (fresh) return true;
    if (it->second == object) return false;
    throw py::attribute_error("nn.Module: '" + name +
                              "' is already a registered parameter, buffer or sub-module; a registration "
                              "cannot be undone, so it may only be assigned the same object again");
  }
  void refuse_rebinding(const std::string& name) {
    if (registered_.count(name))
      throw py::attribute_error("nn.Module: '" + name +
                                "' is a registered parameter, buffer or sub-module and cannot become a plain "
                                "attribute");
  }
  std::unordered_map<std::string, const void*> registered_;
};

// An optimizer's parameters: a Module, or a sequence of tensors or of (name, tensor) pairs.
nn::ParamList param_list(py::handle params) {
  if (py::isinstance<nn::Module>(params)) return params.cast<nn::Module&>().named_parameters();
  nn::ParamList out;
  size_t i = 0;
  for (auto item : params) {
    if (py::isinstance<Tensor>(item))
      out.emplace_back("param" + std::to_string(i), item.cast<Tensor>());
    else
      out.push_back(item.cast<std::pair<std::string, Tensor>>());
    ++i;
  }
  return out;
}

// The PyModule behind `self` (a Python subclass of nn.Module), or null for a C++ module.
PyModule* python_module(py::handle self) {
  // Before Module.__init__ has run the instance holds no C++ object yet (a cast would read null).
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  if (!inst->get_value_and_holder().holder_constructed())
    throw py::type_error(std::string(py::str(py::type::of(self).attr("__name__"))) +
                         ": call super().__init__() (nn.Module.__init__) before assigning attributes");
  return dynamic_cast<PyModule*>(&self.cast<nn::Module&>());
}

// object.__setattr__: into the instance's __dict__ (or through a property of the class).
void set_plain_attribute(py::handle self, py::handle name, py::handle value) {
  if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0) throw py::error_already_set();
}

// A schedule driving an optimizer's learning rate: optim::learning_rate of the current 1-based step,
// set before that step's update (as train_step sets it).
class Scheduler {
 public:
  Scheduler(optim::Optimizer& opt, optim::Schedule schedule, double base, int64_t warmup, int64_t total_steps,
            double min_ratio)
      : opt_(&opt), schedule_(schedule), base_(base), warmup_(warmup), total_(total_steps), min_ratio_(min_ratio) {
    apply();
  }
  double advance() {
    ++step_;
    return apply();
  }
  int64_t step() const { return step_; }
  double lr() const { return optim::learning_rate(schedule_, base_, step_, warmup_, total_, min_ratio_); }
  double base() const { return base_; }

 private:
  double apply() {
    opt_->set_lr(lr());
    return opt_->lr();
  }
  optim::Optimizer* opt_;  // kept alive by the Python object (keep_alive)
  optim::Schedule schedule_;
  double base_;
  int64_t warmup_, total_;
  double min_ratio_;
  int64_t step_ = 1;
};

}  // namespace

Generator& generator_arg(py::handle seed, Generator& scratch) {
  if (seed.is_none()) return default_generator();
  if (py::isinstance<Generator>(seed)) return seed.cast<Generator&>();
  if (!py::isinstance<py::int_>(seed) || py::isinstance<py::bool_>(seed))
    throw py::type_error("seed: expected a Generator, an int or None, got " +
                         std::string(py::str(py::type::of(seed).attr("__name__"))));
  scratch.seed_(seed.cast<uint64_t>());
  return scratch;
}

DType module_dtype(const std::string& name) {
  if (name != "float32" && name != "float64")
    throw DTypeError("expected float32 or float64, got " + name);
  return name == "float32" ? DType::f32 : DType::f64;
}

void bind_nn(py::module_& m, py::module_& nn, py::module_& optim) {
  py::class_<Generator>(m, "Generator",
                        "The seeded random stream (xoshiro256**) behind initialisation and dropout: pass it "
                        "as a layer's seed or a forward's generator to make a run reproducible")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def("manual_seed", &Generator::seed_, "resets the state to a function of seed alone", py::arg("seed"))
      .def_property("state", &Generator::state, &Generator::set_state, "the four state words, for saving")
      .def("next_u64", &Generator::next_u64)
      .def("uniform", &Generator::uniform, "uniform in [0, 1)")
      .def("normal", &Generator::normal, "standard normal")
      .def("uniform_int", &Generator::uniform_int, "uniform integer in [lo, hi]", py::arg("lo"), py::arg("hi"));
  m.def(
      "default_generator", []() -> Generator& { return default_generator(); }, py::return_value_policy::reference,
      "this thread's default generator (layers without a seed, dropout without a generator)");
  m.def("manual_seed", &manual_seed, "reseeds this thread's default generator", py::arg("seed"));

  py::class_<nn::Module, PyModule, std::shared_ptr<nn::Module>>(
      nn, "Module",
      "A tree of named parameters with train/eval mode. Subclass it in Python: call super().__init__(), "
      "then attributes that are modules or tensors with requires_grad=True register as sub-modules and "
      "parameters under their attribute names (register_buffer for constants); __call__ runs forward.")
      .def(py::init_alias<>())
      .def(
          "__setattr__",
          [](py::handle self, py::str name, py::handle value) {
            if (PyModule* mod = python_module(self)) mod->register_attribute(name, value);
            set_plain_attribute(self, name, value);
          },
          py::arg("name"), py::arg("value"))
      .def(
          "register_buffer",
          [](py::handle self, py::str name, const Tensor& t) {
            PyModule* mod = python_module(self);
            if (!mod) throw py::type_error("register_buffer: only Python subclasses of nn.Module take buffers");
            mod->add_buffer(name, t);
            set_plain_attribute(self, name, py::cast(t));
          },
          "keeps `tensor` as attribute `name`: it follows to(dtype) but is neither trained nor saved",
          py::arg("name"), py::arg("tensor"))
      .def(
          "__call__", [](py::object self, py::args args, py::kwargs kwargs) {
            return self.attr("forward")(*args, **kwargs);
          })
      .def("named_parameters", &nn::Module::named_parameters, "[(dotted name, tensor), ...]")
      .def("parameters", &nn::Module::parameters)
      .def("buffers", &nn::Module::buffers)
      .def("parameter_count", &nn::Module::parameter_count)
      .def("zero_grad", &nn::Module::zero_grad)
      .def(
          "to", [](nn::Module& mod, const std::string& d) { mod.to(module_dtype(d)); }, py::arg("dtype"))
      .def("train", &nn::Module::train, py::arg("on") = true)
      .def("eval", &nn::Module::eval)
      .def_property_readonly("training", &nn::Module::training);

  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(nn, "Linear", "y = x W^T + b")
      .def(py::init([](int64_t in, int64_t out, bool bias, py::object seed) {
             return with_generator(
                 seed, [&](Generator& g) { return std::make_shared<nn::Linear>(in, out, g, bias); });
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true,
           py::arg("seed") = py::none())
      .def("__call__", &nn::Linear::forward, Release(), py::arg("x"))
      .def_property_readonly("weight", [](const nn::Linear& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::Linear& l) -> py::object {
        return l.bias.defined() ? py::cast(l.bias) : py::none();
      });
  py::class_<nn::Embedding, nn::Module, std::shared_ptr<nn::Embedding>>(nn, "Embedding",
                                                                        "table [V, C] indexed by int32 ids")
      .def(py::init([](int64_t vocab, int64_t dim, double std, py::object seed) {
             return with_generator(
                 seed, [&](Generator& g) { return std::make_shared<nn::Embedding>(vocab, dim, g, std); });
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("std") = 1.0,
           py::arg("seed") = py::none())
      .def("__call__", &nn::Embedding::forward, Release(), py::arg("ids"))
      .def_property_readonly("weight", [](const nn::Embedding& e) { return e.weight; });
  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(nn, "LayerNorm", "over the last axis")
      .def(py::init<int64_t, double, bool>(), py::arg("dim"), py::arg("eps") = 1e-5, py::arg("bias") = true)
      .def("__call__", &nn::LayerNorm::forward, Release(), py::arg("x"))
      .def_property_readonly("weight", [](const nn::LayerNorm& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::LayerNorm& l) -> py::object {
        return l.bias.defined() ? py::cast(l.bias) : py::none();
      });
  py::class_<nn::MultiHeadAttention, nn::Module, std::shared_ptr<nn::MultiHeadAttention>>(
      nn, "MultiHeadAttention", "query [B, Tq, C] over memory [B, Tk, C] (itself when None) -> [B, Tq, C]")
      .def(py::init([](int64_t dim, int64_t heads, double dropout, bool bias, py::object seed) {
             return with_generator(seed, [&](Generator& g) {
               return std::make_shared<nn::MultiHeadAttention>(dim, heads, dropout, g, bias);
             });
           }),
           py::arg("dim"), py::arg("heads"), py::arg("dropout") = 0.0, py::arg("bias") = true,
           py::arg("seed") = py::none())
      .def(
          "__call__",
          [](nn::MultiHeadAttention& a, const Tensor& query, py::handle memory, py::handle mask,
             bool causal) {
            const Tensor mem = memory.is_none() ? query : to_tensor(memory);
            const Tensor mk = mask.is_none() ? Tensor() : to_tensor(mask);
            py::gil_scoped_release r;
            return a.forward(query, mem, mk, causal, default_generator());
          },
          py::arg("query"), py::arg("memory") = py::none(), py::arg("mask") = py::none(),
          py::arg("causal") = false)
      .def_property_readonly("heads", &nn::MultiHeadAttention::heads);
  nn.def(
      "save", [](const nn::Module& mod, const std::string& path) { nn::save(mod, path); }, Release(),
      "every parameter to a .safetensors file under its dotted name (atomically, checksummed)",
      py::arg("module"), py::arg("path"));
  nn.def(
      "load", [](nn::Module& mod, const std::string& path) { nn::load(mod, path); }, Release(),
      "a file from save into the module's parameters, strictly (IoError names a mismatch)", py::arg("module"),
      py::arg("path"));

  py::class_<optim::Optimizer>(optim, "Optimizer")
      .def("step", &optim::Optimizer::step, Release())
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("steps", &optim::Optimizer::steps);
  py::class_<optim::Sgd, optim::Optimizer>(optim, "SGD", "v = momentum v + (g + wd w); w -= lr v")
      .def(py::init([](py::handle params, double lr, double momentum, double weight_decay) {
             return std::make_unique<optim::Sgd>(
                 param_list(params),
                 optim::SgdOptions{.lr = lr, .momentum = momentum, .weight_decay = weight_decay});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0);
  auto adam_options = [](double lr, std::pair<double, double> betas, double eps, double wd) {
    optim::AdamOptions o;
    o.lr = lr;
    o.betas = {betas.first, betas.second};
    o.eps = eps;
    o.weight_decay = wd;
    return o;
  };
  py::class_<optim::Adam, optim::Optimizer>(optim, "Adam", "Adam with bias correction; L2 weight decay")
      .def(py::init([adam_options](py::handle params, double lr, std::pair<double, double> betas, double eps,
                                   double wd) {
             return std::make_unique<optim::Adam>(param_list(params), adam_options(lr, betas, eps, wd));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  py::class_<optim::AdamW, optim::Adam>(optim, "AdamW", "Adam with decoupled weight decay")
      .def(py::init([adam_options](py::handle params, double lr, std::pair<double, double> betas, double eps,
                                   double wd) {
             return std::make_unique<optim::AdamW>(param_list(params), adam_options(lr, betas, eps, wd));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::make_pair(0.9, 0.999),
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.01);
  optim.def(
      "clip_grad_norm",
      [](py::handle params, double max_norm) {
        const nn::ParamList ps = param_list(params);
        py::gil_scoped_release r;
        return optim::clip_grad_norm(ps, max_norm);
      },
      "scales the gradients to a global L2 norm of at most max_norm; returns the norm before",
      py::arg("params"), py::arg("max_norm"));

  optim.def(
      "learning_rate",
      [](const std::string& schedule, double base, int64_t step, int64_t warmup, int64_t total_steps,
         double min_ratio) {
        return optim::learning_rate(optim::parse_schedule(schedule), base, step, warmup, total_steps, min_ratio);
      },
      "the rate at 1-based `step` of schedule constant | inverse_sqrt | cosine (optim.hpp's formulas)",
      py::arg("schedule"), py::arg("base"), py::arg("step"), py::arg("warmup") = 0, py::arg("total_steps") = 0,
      py::arg("min_ratio") = 0.0);
  py::class_<Scheduler>(optim, "Scheduler",
                        "Sets an optimizer's lr from a schedule: step s's rate before its update (the rate of "
                        "step 1 at construction); call step() after each optimizer.step(), as in PyTorch")
      .def(py::init([](optim::Optimizer& opt, const std::string& schedule, std::optional<double> base,
                       int64_t warmup, int64_t total_steps, double min_ratio) {
             return Scheduler(opt, optim::parse_schedule(schedule), base.value_or(opt.lr()), warmup, total_steps,
                              min_ratio);
           }),
           py::keep_alive<1, 2>(), py::arg("optimizer"), py::arg("schedule") = "cosine",
           py::arg("base") = py::none(), py::arg("warmup") = 0, py::arg("total_steps") = 0,
           py::arg("min_ratio") = 0.0)
      .def("step", &Scheduler::advance, "moves to the next step and sets its rate; returns it")
      .def_property_readonly("last_step", &Scheduler::step, "the 1-based step whose rate is set")
      .def_property_readonly("lr", &Scheduler::lr, "the rate set for last_step")
      .def_property_readonly("base", &Scheduler::base);
}

}  // namespace tapegrad::python
