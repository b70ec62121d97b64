// The ops of ops.hpp as tapegrad.ops.<name>, most also as Tensor methods (t.exp(), t.sum(1)), one
// definition serving both. Every op releases the GIL while it runs (its arguments are converted
// first, its result after), so Python threads compute at once.
#include "tapegrad/ops.hpp"

#include "bindings.hpp"

namespace tapegrad::python {

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// An optional tensor argument: None is an undefined tensor.
Tensor opt(py::handle h) {
  return h.is_none() ? Tensor() : to_tensor(h);
}

// The attention ops' keyword arguments as an AttentionSpec (mask None: none).
AttentionSpec attention_spec(double scale, py::handle mask, bool causal, double dropout, uint64_t seed) {
  AttentionSpec spec;
  spec.scale = scale, spec.mask = opt(mask), spec.causal = causal, spec.dropout = dropout,
  spec.dropout_seed = seed;
  return spec;
}

std::vector<int64_t> dims_of(py::args args) {
  // reshape(2, 3) and reshape((2, 3)) alike
  if (args.size() == 1 && !PyLong_Check(args[0].ptr())) return args[0].cast<std::vector<int64_t>>();
  return args.cast<std::vector<int64_t>>();
}

}  // namespace

void bind_ops(py::module_& m, py::module_& ops) {
  py::class_<Tensor> cls = m.attr("Tensor");
  // Defines `name` in tapegrad.ops and, when `method`, as a Tensor method (the tensor first).
  // `first` names the tensor argument in tapegrad.ops; a method has none (it is self).
  auto both = [&](const char* name, bool method, auto fn, const char* doc, py::arg first, auto... extra) {
    ops.def(name, fn, Release(), doc, first, extra...);
    if (method) cls.def(name, fn, Release(), doc, extra...);
  };
  using T = const Tensor&;
  const auto x = py::arg("x");

  // ---- elementwise
  both(
      "exp", true, [](T a) { return exp(a); }, "e^x", x);
  both(
      "log", true, [](T a) { return log(a); }, "natural log (x > 0)", x);
  both(
      "sqrt", true, [](T a) { return sqrt(a); }, "square root (x > 0)", x);
  both(
      "abs", true, [](T a) { return abs(a); }, "|x|", x);
  both(
      "tanh", true, [](T a) { return tanh(a); }, "tanh", x);
  both(
      "sigmoid", true, [](T a) { return sigmoid(a); }, "1 / (1 + e^-x)", x);
  both(
      "relu", true, [](T a) { return relu(a); }, "max(x, 0)", x);
  both(
      "softplus", true, [](T a) { return softplus(a); }, "log(1 + e^x)", x);
  both(
      "neg", true, [](T a) { return neg(a); }, "-x", x);
  both(
      "gelu", true,
      [](T a, const std::string& approximate) {
        if (approximate != "tanh" && approximate != "none" && approximate != "exact")
          throw Error("gelu: approximate must be 'tanh' or 'none' (exact), got '" + approximate + "'");
        return gelu(a, approximate == "tanh" ? GeluApprox::tanh : GeluApprox::exact);
      },
      "GELU: approximate='tanh' (default) or 'none' (exact, x Phi(x))", x, py::arg("approximate") = "tanh");
  // Binary ops: b a tensor-like or a number (which takes a's dtype).
  auto binary = [&](const char* name, auto fn, const char* doc) {
    ops.def(
        name,
        [fn](py::handle a, py::handle b) {
          const Tensor at = to_tensor(a), bt = to_operand(b, at);
          py::gil_scoped_release r;
          return fn(at, bt);
        },
        doc, py::arg("a"), py::arg("b"));
  };
  binary(
      "add", [](T a, T b) { return add(a, b); }, "a + b, broadcasting");
  binary(
      "sub", [](T a, T b) { return sub(a, b); }, "a - b, broadcasting");
  binary(
      "mul", [](T a, T b) { return mul(a, b); }, "a * b, broadcasting");
  binary(
      "div", [](T a, T b) { return div(a, b); }, "a / b, broadcasting");
  binary(
      "pow", [](T a, T b) { return b.ndim() == 0 && !b.requires_grad() ? pow(a, b.item()) : pow(a, b); },
      "a ^ b, broadcasting (a > 0 where b is differentiated)");
  both(
      "masked_fill", true, [](T a, T mask, double value) { return masked_fill(a, mask, value); },
      "where(mask != 0, value, x); mask broadcasts to x", x, py::arg("mask"), py::arg("value"));
  ops.def(
      "where",
      [](py::handle cond, py::handle a, py::handle b) {
        const Tensor c = to_tensor(cond);
        const Tensor at = to_tensor(a);
        const Tensor bt = to_operand(b, at);
        py::gil_scoped_release r;
        return where(c, at, bt);
      },
      "cond != 0 ? a : b, all three broadcast", py::arg("cond"), py::arg("a"), py::arg("b"));

  // ---- linear algebra
  both(
      "matmul", true, [](T a, T b) { return matmul(a, b); }, "a [.., M, K] @ b [.., K, N]", py::arg("a"),
      py::arg("b"));
  ops.def(
      "linear",
      [](T x_, T w, py::handle b) {
        const Tensor bias = opt(b);
        py::gil_scoped_release r;
        return linear(x_, w, bias);
      },
      "x [.., in] @ weight[out, in]^T + bias[out]", x, py::arg("weight"), py::arg("bias") = py::none());

  // ---- shape
  ops.def(
      "reshape", [](T a, std::vector<int64_t> s) { return reshape(a, Shape(s)); }, Release(),
      "the same elements in `shape` (one -1 inferred); a view when the layout allows", x, py::arg("shape"));
  cls.def(
      "reshape",
      [](T a, py::args s) {
        const auto dims = dims_of(s);
        py::gil_scoped_release r;
        return reshape(a, Shape(dims));
      },
      "reshape(*shape) or reshape(shape)");
  both(
      "transpose", true, [](T a, int d0, int d1) { return transpose(a, d0, d1); }, "swaps two dims (a view)",
      x, py::arg("dim0"), py::arg("dim1"));
  ops.def(
      "permute", [](T a, std::vector<int> d) { return permute(a, d); }, Release(),
      "output dim i is x's dim dims[i] (a view)", x, py::arg("dims"));
  cls.def(
      "permute",
      [](T a, py::args d) {
        std::vector<int> dims;
        for (int64_t v : dims_of(d)) dims.push_back(int(v));
        py::gil_scoped_release r;
        return permute(a, dims);
      },
      "permute(*dims) or permute(dims)");
  cls.def_property_readonly("T", [](T a) {
    if (a.ndim() != 2) throw ShapeError(".T: needs a 2-D tensor, got " + to_string(a.shape()));
    return transpose(a, 0, 1);
  });
  both(
      "contiguous", true, [](T a) { return contiguous(a); }, "a row-major copy unless already contiguous", x);
  both(
      "narrow", true,
      [](T a, int axis, int64_t start, int64_t length) { return narrow(a, axis, start, length); },
      "elements [start, start + length) along axis (a view)", x, py::arg("axis"), py::arg("start"),
      py::arg("length"));
  ops.def(
      "concat", [](const std::vector<Tensor>& xs, int axis) { return concat(xs, axis); }, Release(),
      "joins along an existing axis", py::arg("tensors"), py::arg("axis") = 0);
  ops.def(
      "stack", [](const std::vector<Tensor>& xs, int axis) { return stack(xs, axis); }, Release(),
      "joins along a new axis", py::arg("tensors"), py::arg("axis") = 0);

  // ---- reductions: axis=None reduces everything to a scalar
  auto reduction = [&](const char* name, auto all, auto along, const char* doc) {
    both(
        name, true,
        [all, along, doc](T a, std::optional<int> axis, bool keepdim) {
          if (!axis) {
            if (keepdim) throw ShapeError(std::string(doc) + ": keepdim needs an axis");
            return all(a);
          }
          return along(a, *axis, keepdim);
        },
        doc, x, py::arg("axis") = py::none(), py::arg("keepdim") = false);
  };
  reduction(
      "sum", [](T a) { return sum(a); }, [](T a, int ax, bool k) { return sum(a, ax, k); }, "sum");
  reduction(
      "mean", [](T a) { return mean(a); }, [](T a, int ax, bool k) { return mean(a, ax, k); }, "mean");
  reduction(
      "max", [](T a) { return max(a); }, [](T a, int ax, bool k) { return max(a, ax, k); },
      "max (the gradient goes to the first maximum)");

  // ---- softmax family
  auto softmax_fn = [](T a, double scale, py::handle mask, bool causal) {
    SoftmaxSpec spec;
    spec.scale = scale;
    spec.causal = causal;
    spec.mask = opt(mask);
    py::gil_scoped_release r;
    return softmax(a, spec);
  };
  const char* softmax_doc = "softmax(scale * x + mask) over the last axis (causal masks key j > query i)";
  ops.def("softmax", softmax_fn, softmax_doc, x, py::arg("scale") = 1.0, py::arg("mask") = py::none(),
          py::arg("causal") = false);
  cls.def("softmax", softmax_fn, softmax_doc, py::arg("scale") = 1.0, py::arg("mask") = py::none(),
          py::arg("causal") = false);
  both(
      "log_softmax", true, [](T a) { return log_softmax(a); }, "log(softmax(x)) over the last axis", x);
  ops.def(
      "cross_entropy",
      [](T logits, T targets, int ignore_index, double label_smoothing) {
        return cross_entropy(logits, targets, ignore_index, label_smoothing);
      },
      Release(), "logits [N, V] (or [B, T, V]), int32 targets [N] (or [B, T]) -> mean loss",
      py::arg("logits"), py::arg("targets"), py::arg("ignore_index") = -100,
      py::arg("label_smoothing") = 0.0);

  // ---- normalisation, indexing, regularisation
  ops.def(
      "layer_norm",
      [](T a, py::handle w, py::handle b, double eps) {
        const Tensor wt = opt(w), bt = opt(b);
        py::gil_scoped_release r;
        return layer_norm(a, wt, bt, eps);
      },
      "over the last axis; weight and bias [C] may be None", x, py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  ops.def(
      "embedding", [](T table, T ids) { return embedding(table, ids); }, Release(),
      "table [V, C], int32 ids [...] -> [..., C]", py::arg("table"), py::arg("ids"));
  ops.def(
      "dropout",
      [](T a, double p, bool training, std::optional<uint64_t> seed) {
        return seed ? dropout(a, p, training, *seed) : dropout(a, p, training, default_generator());
      },
      Release(),
      "zeroes with probability p, scales the rest by 1/(1-p); seed None draws it from the default generator",
      x, py::arg("p"), py::arg("training") = true, py::arg("seed") = py::none());
  ops.def(
      "gru_cell", [](T xp, T hp, T h) { return gru_cell(xp, hp, h); }, Release(),
      "GRU gates from xp, hp [B, 3H] and h [B, H] -> h' [B, H]", py::arg("xp"), py::arg("hp"), py::arg("h"));
  ops.def(
      "additive_score", [](T keys, T query, T v) { return additive_score(keys, query, v); }, Release(),
      "v . tanh(keys[b, s] + query[b]) -> [B, S]", py::arg("keys"), py::arg("query"), py::arg("v"));
  ops.def(
      "feed_forward_relu",
      [](T x, T w1, py::handle b1, T w2, py::handle b2, double dropout_p, uint64_t dropout_seed) {
        const Tensor bias1 = opt(b1), bias2 = opt(b2);
        py::gil_scoped_release r;
        return feed_forward_relu(x, w1, bias1, w2, bias2, dropout_p, dropout_seed);
      },
      "linear(dropout(relu(linear(x, w1, b1)), dropout, seed), w2, b2) as one op", x, py::arg("w1"),
      py::arg("b1").none(true), py::arg("w2"), py::arg("b2") = py::none(), py::arg("dropout") = 0.0,
      py::arg("dropout_seed") = 0);
  ops.def(
      "scaled_dot_product_attention",
      [](T q, T k, T v, double scale, py::handle mask, bool causal, double dropout_p, uint64_t dropout_seed) {
        const AttentionSpec spec = attention_spec(scale, mask, causal, dropout_p, dropout_seed);
        py::gil_scoped_release r;
        return scaled_dot_product_attention(q, k, v, spec);
      },
      "q [B, Tq, H, dk], k [B, Tk, H, dk], v [B, Tk, H, dv] -> [B, Tq, H, dv]", py::arg("q"), py::arg("k"),
      py::arg("v"), py::arg("scale") = 1.0, py::arg("mask") = py::none(), py::arg("causal") = false,
      py::arg("dropout") = 0.0, py::arg("dropout_seed") = 0);
  ops.def(
      "scaled_dot_product_attention_stacked",
      [](T q, py::handle kv, int64_t heads, double scale, py::handle mask, bool causal, double dropout_p,
         uint64_t dropout_seed) {
        const AttentionSpec spec = attention_spec(scale, mask, causal, dropout_p, dropout_seed);
        const Tensor kv_t = opt(kv);
        py::gil_scoped_release r;
        return scaled_dot_product_attention_stacked(q, kv_t, heads, spec);
      },
      "self-attention on qkv [B, T, 3C] (kv None), or q [B, Tq, C] with kv [B, Tk, 2C] -> [B, Tq, heads, C / "
      "heads]",
      py::arg("q"), py::arg("kv").none(true), py::arg("heads"), py::arg("scale") = 1.0,
      py::arg("mask") = py::none(), py::arg("causal") = false, py::arg("dropout") = 0.0,
      py::arg("dropout_seed") = 0);
}

}  // namespace tapegrad::python
