// tapegrad.nn and tapegrad.optim: the basic layers (Linear, Embedding, LayerNorm), multi-head
// attention, the decoder-only GPT model with generate, Module's parameters and modes, nn.save /
// nn.load, and the optimizers SGD, Adam, AdamW with clip_grad_norm. Dropout draws from this thread's
// default generator.
// A layer's initialisation draws from Generator(seed), or this thread's default generator when no
// seed is given. An optimizer step releases the GIL.
#include <memory>
#include <optional>

#include "bindings.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/models/gpt.hpp"
#include "tapegrad/nn/attention.hpp"
#include "tapegrad/nn/layers.hpp"
#include "tapegrad/nn/module.hpp"
#include "tapegrad/optim.hpp"

namespace tapegrad::python {

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// Runs `make` with Generator(seed), or the default generator.
template <class F>
auto with_generator(std::optional<uint64_t> seed, F make) {
  if (!seed) return make(default_generator());
  Generator gen(*seed);
  return make(gen);
}

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

}  // namespace

void bind_nn(py::module_& m, py::module_& nn, py::module_& optim) {
  (void)m;
  py::class_<nn::Module, std::shared_ptr<nn::Module>>(nn, "Module",
                                                      "A tree of named parameters with train/eval mode.")
      .def("named_parameters", &nn::Module::named_parameters, "[(dotted name, tensor), ...]")
      .def("parameters", &nn::Module::parameters)
      .def("parameter_count", &nn::Module::parameter_count)
      .def("zero_grad", &nn::Module::zero_grad)
      .def(
          "to",
          [](nn::Module& mod, const std::string& d) {
            if (d != "float32" && d != "float64")
              throw DTypeError("Module.to: expected float32 or float64, got " + d);
            mod.to(d == "float32" ? DType::f32 : DType::f64);
          },
          py::arg("dtype"))
      .def("train", &nn::Module::train, py::arg("on") = true)
      .def("eval", &nn::Module::eval)
      .def_property_readonly("training", &nn::Module::training);

  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(nn, "Linear", "y = x W^T + b")
      .def(py::init([](int64_t in, int64_t out, bool bias, std::optional<uint64_t> seed) {
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
      .def(py::init([](int64_t vocab, int64_t dim, double std, std::optional<uint64_t> seed) {
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
      .def(py::init([](int64_t dim, int64_t heads, double dropout, bool bias, std::optional<uint64_t> seed) {
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
  py::class_<models::Gpt, nn::Module, std::shared_ptr<models::Gpt>>(
      nn, "GPT", "The decoder-only Transformer: ids [B, T] -> logits [B, T, V]")
      .def(py::init([](int64_t vocab_size, int64_t d_model, int64_t layers, int64_t heads, int64_t d_ff,
                       int64_t block_size, double dropout, const std::string& activation, bool norm_first,
                       uint64_t seed) {
             models::ModelConfig c;
             c.kind = models::ModelKind::gpt;
             c.vocab_size = vocab_size;
             c.d_model = d_model;
             c.layers = layers;
             c.heads = heads;
             c.d_ff = d_ff;
             c.max_len = block_size;
             c.dropout = dropout;
             c.activation = nn::parse_activation(activation);
             c.norm_first = norm_first;
             c.validate();
             return std::make_shared<models::Gpt>(c, seed);
           }),
           py::arg("vocab_size"), py::arg("d_model") = 128, py::arg("layers") = 2, py::arg("heads") = 4,
           py::arg("d_ff") = 512, py::arg("block_size") = 128, py::arg("dropout") = 0.0,
           py::arg("activation") = "gelu-tanh", py::arg("norm_first") = true, py::arg("seed") = 0)
      .def(
          "__call__", [](models::Gpt& g, const Tensor& ids) { return g.forward(ids); }, Release(),
          py::arg("ids"))
      .def_property_readonly("block_size", &models::Gpt::block_size)
      .def(
          "generate",
          [](models::Gpt& g, const std::vector<int32_t>& prompt, int64_t max_new_tokens, double temperature,
             int64_t top_k, uint64_t seed, bool use_cache) {
            return models::generate(g, prompt,
                                    {.max_new_tokens = max_new_tokens,
                                     .temperature = temperature,
                                     .top_k = top_k,
                                     .seed = seed,
                                     .use_cache = use_cache});
          },
          Release(), "the prompt's ids followed by max_new_tokens sampled ones (temperature 0: greedy)",
          py::arg("prompt"), py::arg("max_new_tokens") = 100, py::arg("temperature") = 1.0,
          py::arg("top_k") = 0, py::arg("seed") = 1, py::arg("use_cache") = true);
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
}

}  // namespace tapegrad::python
