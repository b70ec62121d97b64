// The engine from Python: backward and grad (with create_graph), no_grad / enable_grad as context
// managers, the current tape and its entries, the instruments (TapeRecorder's rows, saved bytes and
// DOT; the per-op profile with the allocator's counters; anomaly mode) as context managers,
// gradcheck and gradgradcheck on a Python function, activation checkpointing of a Python function,
// and the functional transforms (vjp, jvp, hvp, jacobian, hessian). Walks release the GIL; a Python
// function the library calls back (gradcheck's, a transform's, a custom op's backward) takes it again.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "bindings.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/functional.hpp"
#include "tapegrad/instruments.hpp"
#include "tapegrad/memory.hpp"

namespace tapegrad::python {

namespace {

// A context manager for a scope class (NoGrad, EnableGrad): each `with` opens one, exit closes the
// innermost, so nesting and reuse work.
template <class Scope>
struct ScopeContext {
  ScopeContext() = default;
  ScopeContext(const ScopeContext&) = delete;  // (vector<unique_ptr> claims to be copyable)
  ScopeContext& operator=(const ScopeContext&) = delete;
  std::vector<std::unique_ptr<Scope>> open;
};

template <class Scope>
void bind_scope(py::module_& m, const char* cls_name, const char* fn_name, const char* doc) {
  using C = ScopeContext<Scope>;
  py::class_<C>(m, cls_name, doc)
      .def(py::init<>())
      .def("__enter__", [](C& c) { c.open.push_back(std::make_unique<Scope>()); })
      .def("__exit__", [](C& c, py::args) {
        if (!c.open.empty()) c.open.pop_back();
        return false;
      });
  m.def(
      fn_name, [] { return std::make_unique<C>(); }, doc);
}

// A Python callable as the library's function of a tensor list: called as fn(*inputs) under the GIL.
TensorFn tensor_fn(py::function fn) {
  PyRef f = hold(std::move(fn));
  return [f](const std::vector<Tensor>& xs) {
    py::gil_scoped_acquire gil;
    py::tuple args(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
    py::object out = (*f)(*args);
    if (!py::isinstance<Tensor>(out))
      throw py::type_error("the function must return a tapegrad.Tensor, not " +
                           py::type::of(out).attr("__name__").cast<std::string>());
    return out.cast<Tensor>();
  };
}

// One tensor or a sequence of them.
std::vector<Tensor> tensors(py::handle h) {
  if (py::isinstance<Tensor>(h)) return {h.cast<Tensor>()};
  std::vector<Tensor> out;
  for (auto item : h) out.push_back(to_tensor(item));
  return out;
}

py::object maybe(const Tensor& t) {
  return t.defined() ? py::cast(t) : py::none();
}

py::tuple tuple_of(const std::vector<Tensor>& ts) {
  py::tuple out(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) out[i] = maybe(ts[i]);
  return out;
}

// A snapshot of one tape entry (the tape may grow or be cleared after it is taken).
struct EntryView {
  std::string op;
  std::vector<Tensor> inputs;
  Tensor output;
};

py::list entries_of(const Tape& tape) {
  py::list out;
  for (const TapeEntry& e : tape.entries()) out.append(EntryView{entry_name(e), e.inputs, e.output});
  return out;
}

// `with TapeRecorder() as rec:` watches this thread's tape for the block (an ObserveScope).
struct Recorder {
  TapeRecorder recorder;
  std::unique_ptr<ObserveScope> scope;
};

// `with detect_anomaly():` raises NonFiniteError at the first non-finite output or gradient.
struct Anomaly {
  std::unique_ptr<AnomalyMode> mode;
};

// `with profile() as p:` totals this thread's ops by kind (an OpProfile under an ObserveScope) and reads
// the allocator's counters at both ends. The allocator is process-wide: other threads' tensors count
// in the memory figures, not in the rows.
struct Profile {
  std::unique_ptr<OpProfile> profile;
  std::unique_ptr<ObserveScope> scope;
  memory::Stats start{}, end{};
  bool done = false;

  // The op kinds that ran, the most time first; times in milliseconds.
  py::list rows() const {
    struct Line {
      OpKind op;
      OpProfile::Row row;
    };
    std::vector<Line> lines;
    if (profile)
      for (int k = 0; k < kOpCount; ++k)
        if (profile->rows()[size_t(k)].calls) lines.push_back({OpKind(k), profile->rows()[size_t(k)]});
    std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
      return a.row.forward_s + a.row.backward_s > b.row.forward_s + b.row.backward_s;
    });
    py::list out;
    for (const Line& l : lines) {
      const double seconds = l.row.forward_s + l.row.backward_s;
      py::dict d;
      d["op"] = op_name(l.op);
      d["calls"] = l.row.calls;
      d["forward_ms"] = l.row.forward_s * 1e3;
      d["backward_ms"] = l.row.backward_s * 1e3;
      d["total_ms"] = seconds * 1e3;
      d["flops"] = l.row.flops;
      d["gflops_per_s"] = l.row.flops > 0 && seconds > 0 ? l.row.flops / seconds * 1e-9 : 0.0;
      out.append(d);
    }
    return out;
  }

  // Bytes the allocator held at entry and exit, the highest point above the start, and how many
  // blocks came from the OS rather than the cache in between.
  py::dict memory_of() const {
    const memory::Stats now = done ? end : memory::stats();
    py::dict d;
    d["start_bytes"] = start.bytes_in_use;
    d["end_bytes"] = now.bytes_in_use;
    d["peak_bytes_above_start"] = std::max<int64_t>(0, now.peak_bytes_in_use - start.bytes_in_use);
    d["os_allocations"] = now.os_allocations - start.os_allocations;
    d["cache_hits"] = now.cache_hits - start.cache_hits;
    return d;
  }

  std::string table() const {
    std::string s;
    char line[160];
    std::snprintf(line, sizeof line, "%-28s %7s %10s %10s %10s %9s\n", "op", "calls", "fwd ms", "bwd ms", "GFLOP",
                  "GFLOP/s");
    s += line;
    double forward = 0, backward = 0;
    for (auto item : rows()) {
      const py::dict r = py::reinterpret_borrow<py::dict>(item);
      const double f = r["forward_ms"].cast<double>(), b = r["backward_ms"].cast<double>();
      const double flops = r["flops"].cast<double>();
      forward += f, backward += b;
      if (flops > 0)
        std::snprintf(line, sizeof line, "%-28s %7lld %10.3f %10.3f %10.3f %9.1f\n",
                      r["op"].cast<std::string>().c_str(), r["calls"].cast<long long>(), f, b, flops * 1e-9,
                      r["gflops_per_s"].cast<double>());
      else
        std::snprintf(line, sizeof line, "%-28s %7lld %10.3f %10.3f\n", r["op"].cast<std::string>().c_str(),
                      r["calls"].cast<long long>(), f, b);
      s += line;
    }
    std::snprintf(line, sizeof line, "%-28s %7s %10.3f %10.3f\n", "total", "", forward, backward);
    s += line;
    const py::dict m = memory_of();
    std::snprintf(line, sizeof line, "memory: peak %.3f MB above the start, %+.3f MB at the end, %lld OS allocations\n",
                  double(m["peak_bytes_above_start"].cast<int64_t>()) / 1e6,
                  double(m["end_bytes"].cast<int64_t>() - m["start_bytes"].cast<int64_t>()) / 1e6,
                  m["os_allocations"].cast<long long>());
    return s + line;
  }
};

py::tuple shape_of(const Tensor& t) {
  if (!t.defined()) return py::tuple();
  py::tuple s(size_t(t.ndim()));
  for (int i = 0; i < t.ndim(); ++i) s[size_t(i)] = t.shape()[i];
  return s;
}

}  // namespace

void bind_engine(py::module_& m) {
  bind_scope<NoGrad>(m, "_NoGradContext", "no_grad", "with tapegrad.no_grad(): nothing inside is recorded");
  bind_scope<EnableGrad>(m, "_EnableGradContext", "enable_grad",
                         "with tapegrad.enable_grad(): recording on again inside a no_grad block");
  m.def("is_grad_enabled", &grad_enabled, "False inside no_grad (on this thread).");

  m.def(
      "backward",
      [](const Tensor& t, py::handle grad, std::optional<bool> retain_graph, bool create_graph) {
        // A seed is copied: it could become a leaf's .grad (adopted storage), which later walks add into.
        const Tensor seed = grad.is_none() ? Tensor() : to_operand(grad, t).clone();
        py::gil_scoped_release release;
        backward(t, seed, BackwardOptions{.retain_graph = retain_graph, .create_graph = create_graph});
      },
      "Adds d(t)/d(leaf) into every leaf's .grad. A non-scalar t needs `grad` (its shape). The tape is "
      "cleared afterwards unless retain_graph (default: only with create_graph).",
      py::arg("t"), py::arg("grad") = py::none(), py::arg("retain_graph") = py::none(),
      py::arg("create_graph") = false);
  py::class_<Tensor> cls = m.attr("Tensor");
  cls.def(
      "backward",
      [m](const Tensor& t, py::object grad, py::object retain_graph, bool create_graph) {
        m.attr("backward")(t, grad, retain_graph, create_graph);
      },
      py::arg("grad") = py::none(), py::arg("retain_graph") = py::none(), py::arg("create_graph") = false);

  m.def(
      "grad",
      [](py::handle outputs, py::handle inputs, py::handle grad_outputs, bool create_graph,
         std::optional<bool> retain_graph, bool allow_unused) {
        GradOptions o;
        const std::vector<Tensor> outs = tensors(outputs), ins = tensors(inputs);
        if (!grad_outputs.is_none()) o.grad_outputs = tensors(grad_outputs);
        o.create_graph = create_graph;
        o.retain_graph = retain_graph;
        o.unused = allow_unused ? Unused::undefined : Unused::error;
        std::vector<Tensor> gs;
        {
          py::gil_scoped_release release;
          gs = grad(outs, ins, o);
        }
        return tuple_of(gs);
      },
      "d(sum_i <outputs[i], grad_outputs[i]>)/d(inputs[j]) for each j, as a tuple (None for an unused "
      "input with allow_unused); no .grad changes.",
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(),
      py::arg("create_graph") = false, py::arg("retain_graph") = py::none(), py::arg("allow_unused") = false);

  // ---- the tape
  py::class_<EntryView>(m, "TapeEntry", "A snapshot of one recorded op.")
      .def_readonly("op", &EntryView::op, "the op's name (a custom op's own)")
      .def_property_readonly("inputs", [](const EntryView& e) { return tuple_of(e.inputs); })
      .def_property_readonly("output", [](const EntryView& e) { return maybe(e.output); })
      .def_property_readonly("input_shapes",
                             [](const EntryView& e) {
                               py::list s;
                               for (const Tensor& t : e.inputs) s.append(shape_of(t));
                               return s;
                             })
      .def_property_readonly("output_shape", [](const EntryView& e) { return shape_of(e.output); })
      .def("__repr__", [](const EntryView& e) {
        std::string s = "<TapeEntry " + e.op + " (";
        for (size_t i = 0; i < e.inputs.size(); ++i)
          s += (i ? ", " : "") + (e.inputs[i].defined() ? e.inputs[i].describe() : "-");
        return s + ") -> " + e.output.describe() + ">";
      });
  py::class_<Tape>(m, "Tape", "This thread's Wengert list (tapegrad.current_tape()).")
      .def("__len__", &Tape::size)
      .def_property_readonly("entries", &entries_of, "snapshots of the entries, in execution order")
      .def_property_readonly("generation", &Tape::generation)
      .def("dump", &Tape::dump, "one line per entry")
      .def("clear", &Tape::clear, "drops every entry (and the activations they keep)")
      .def("__repr__", [](const Tape& t) { return "<Tape of " + std::to_string(t.size()) + " entries>"; });
  m.def("current_tape", &current_tape, py::return_value_policy::reference,
        "This thread's current tape (valid while the thread lives).");
  m.def(
      "dump", [] { return current_tape().dump(); }, "current_tape().dump()");

  // ---- instruments
  py::class_<TapeRow>(m, "TapeRow", "What TapeRecorder saw of one entry.")
      .def_readonly("index", &TapeRow::index)
      .def_property_readonly("op", [](const TapeRow& r) { return std::string(op_name(r.op)); })
      .def_property_readonly("output_shape", [](const TapeRow& r) { return r.output_shape.vec(); })
      .def_readonly("inputs", &TapeRow::inputs, "a parameter's name, '#k' for entry k's output, or 'input'")
      .def_readonly("saved_bytes", &TapeRow::saved_bytes)
      .def_readonly("forward_us", &TapeRow::forward_us)
      .def_readonly("backward_us", &TapeRow::backward_us)
      .def_readonly("grad_norm", &TapeRow::grad_norm, "-1 if no gradient reached it")
      .def_readonly("depth", &TapeRow::depth);
  py::class_<Recorder>(
      m, "TapeRecorder",
      "with tapegrad.TapeRecorder() as rec: forward and backward; then rec.rows, rec.dot(), rec.json()")
      .def(py::init<>())
      .def(
          "__enter__",
          [](Recorder& r) -> Recorder& {
            if (r.scope) throw AutogradError("TapeRecorder: already watching");
            r.scope = std::make_unique<ObserveScope>(r.recorder);
            return r;
          },
          py::return_value_policy::reference)
      .def("__exit__",
           [](Recorder& r, py::args) {
             r.scope.reset();
             return false;
           })
      .def_property_readonly("rows", [](const Recorder& r) { return r.recorder.rows(); })
      .def_property_readonly("saved_bytes", [](const Recorder& r) { return r.recorder.saved_bytes(); })
      .def_property_readonly("critical_path", [](const Recorder& r) { return r.recorder.critical_path(); })
      .def(
          "dot", [](const Recorder& r) { return r.recorder.dot(); }, "the graph as Graphviz DOT")
      .def("json", [](const Recorder& r) { return r.recorder.json(); });
  py::class_<Profile>(
      m, "Profile",
      "with tapegrad.profile() as p: ...; then p.rows (one dict per op kind: op, calls, forward_ms, "
      "backward_ms, total_ms, flops, gflops_per_s; the most time first), p.memory and p.table()")
      .def(py::init<>())
      .def(
          "__enter__",
          [](Profile& p) -> Profile& {
            if (p.scope) throw AutogradError("profile: already watching");
            p.profile = std::make_unique<OpProfile>();
            p.done = false;
            p.start = memory::stats();
            memory::reset_peak();  // the peak of this block, not of the process so far
            p.start.peak_bytes_in_use = p.start.bytes_in_use;
            p.scope = std::make_unique<ObserveScope>(*p.profile);
            p.profile->start_step();
            return p;
          },
          py::return_value_policy::reference)
      .def("__exit__",
           [](Profile& p, py::args) {
             p.scope.reset();
             p.end = memory::stats();
             p.done = true;
             return false;
           })
      .def_property_readonly("rows", &Profile::rows)
      .def_property_readonly("memory", &Profile::memory_of,
                             "the allocator's bytes: start_bytes, end_bytes, peak_bytes_above_start, "
                             "os_allocations, cache_hits (process-wide)")
      .def("table", &Profile::table, "the rows as a text table, with the memory line")
      .def("__repr__", [](const Profile& p) { return p.table(); });
  m.def(
      "profile", [] { return std::make_unique<Profile>(); },
      "with tapegrad.profile() as p: time per op kind on this thread's tapes, forward and backward, FLOPs "
      "of matmul and linear, and the allocator's bytes over the block. An op's forward time runs from the "
      "previous recorded op, so Python code between ops is charged to the next op.");
  m.def(
      "memory_stats",
      [] {
        const memory::Stats s = memory::stats();
        py::dict d;
        d["bytes_in_use"] = s.bytes_in_use;
        d["bytes_cached"] = s.bytes_cached;
        d["peak_bytes_in_use"] = s.peak_bytes_in_use;
        d["os_allocations"] = s.os_allocations;
        d["cache_hits"] = s.cache_hits;
        return d;
      },
      "The caching allocator's counters (process-wide): bytes_in_use, bytes_cached, peak_bytes_in_use "
      "(since the last reset), os_allocations, cache_hits.");
  m.def("reset_peak_memory", &memory::reset_peak, "Starts a new peak_bytes_in_use at the current bytes_in_use.");
  m.def("empty_cache", &memory::empty_cache, "Gives the allocator's cached blocks back to the OS.");
  py::class_<Anomaly>(m, "_AnomalyContext")
      .def("__enter__", [](Anomaly& a) { a.mode = std::make_unique<AnomalyMode>(); })
      .def("__exit__", [](Anomaly& a, py::args) {
        a.mode.reset();
        return false;
      });
  m.def(
      "detect_anomaly", [] { return std::make_unique<Anomaly>(); },
      "with tapegrad.detect_anomaly(): NonFiniteError at the first NaN/Inf output or gradient, naming the "
      "op");

  // ---- gradient checks
  py::class_<GradcheckResult>(m, "GradcheckResult", "gradcheck's outcome; true when it passed.")
      .def_readonly("ok", &GradcheckResult::ok)
      .def_readonly("message", &GradcheckResult::message)
      .def_readonly("max_abs_error", &GradcheckResult::max_abs_error)
      .def_readonly("max_rel_error", &GradcheckResult::max_rel_error)
      .def_readonly("worst_input", &GradcheckResult::worst_input)
      .def_readonly("worst_index", &GradcheckResult::worst_index)
      .def_readonly("analytic", &GradcheckResult::analytic)
      .def_readonly("numeric", &GradcheckResult::numeric)
      .def_property_readonly("ops_seen",
                             [](const GradcheckResult& r) {
                               std::vector<std::string> names;
                               for (OpKind k : r.ops_seen) names.push_back(op_name(k));
                               return names;
                             })
      .def("__bool__", [](const GradcheckResult& r) { return r.ok; })
      .def("__repr__", [](const GradcheckResult& r) {
        return std::string(r.ok ? "<passed: " : "<FAILED: ") + r.message + ">";
      });
  for (int order : {1, 2}) {
    m.def(
        order == 1 ? "gradcheck" : "gradgradcheck",
        [order](py::function fn, py::handle inputs, double eps, double atol, double rtol, uint64_t seed,
                const std::string& label) {
          const TensorFn f = tensor_fn(std::move(fn));
          const std::vector<Tensor> xs = tensors(inputs);
          const GradcheckOptions o{.eps = eps, .atol = atol, .rtol = rtol, .seed = seed};
          py::gil_scoped_release release;
          return order == 1 ? gradcheck(f, xs, o, label) : gradgradcheck(f, xs, o, label);
        },
        order == 1 ? "Analytic against central-difference gradients of fn(*inputs) (float64 leaves that "
                     "require grad); returns a GradcheckResult (true when it passed)."
                   : "The second-order check (the gradient of the gradient through a create_graph walk).",
        py::arg("fn"), py::arg("inputs"), py::arg("eps") = 1e-6, py::arg("atol") = 1e-5,
        py::arg("rtol") = 1e-3, py::arg("seed") = 1234, py::arg("label") = "");
  }

  // ---- activation checkpointing
  m.def(
      "checkpoint",
      [](py::function fn, py::args inputs) {
        const TensorFn f = tensor_fn(std::move(fn));
        std::vector<Tensor> xs;
        for (auto item : inputs) xs.push_back(to_tensor(item));
        py::gil_scoped_release release;
        return checkpoint(f, xs);
      },
      "checkpoint(fn, *tensors): fn(*tensors) leaving one tape entry that keeps only its inputs; backward "
      "calls fn again (with the default generator's state put back, so dropout draws the same masks) and "
      "walks it, so gradients equal the plain call's. Parameters fn captures get theirs too.",
      py::arg("fn"));

  // ---- the functional transforms: fn is called as fn(*inputs)
  m.def(
      "vjp",
      [](py::function fn, py::handle inputs, const Tensor& v, bool create_graph) {
        const TensorFn f = tensor_fn(std::move(fn));
        const std::vector<Tensor> xs = tensors(inputs);
        VjpResult r;
        {
          py::gil_scoped_release release;
          r = vjp(f, xs, v, {.create_graph = create_graph});
        }
        return py::make_tuple(r.output, tuple_of(r.grads));
      },
      "(fn(*inputs), v^T J per input)", py::arg("fn"), py::arg("inputs"), py::arg("v"),
      py::arg("create_graph") = false);
  m.def(
      "jvp",
      [](py::function fn, py::handle inputs, py::handle tangents, bool create_graph) {
        const TensorFn f = tensor_fn(std::move(fn));
        const std::vector<Tensor> xs = tensors(inputs), ts = tensors(tangents);
        JvpResult r;
        {
          py::gil_scoped_release release;
          r = jvp(f, xs, ts, {.create_graph = create_graph});
        }
        return py::make_tuple(r.output, r.tangent);
      },
      "(fn(*inputs), J t)", py::arg("fn"), py::arg("inputs"), py::arg("tangents"),
      py::arg("create_graph") = false);
  m.def(
      "hvp",
      [](py::function fn, py::handle inputs, py::handle v, bool create_graph) {
        const TensorFn f = tensor_fn(std::move(fn));
        const std::vector<Tensor> xs = tensors(inputs), vs = tensors(v);
        HvpResult r;
        {
          py::gil_scoped_release release;
          r = hvp(f, xs, vs, {.create_graph = create_graph});
        }
        return py::make_tuple(r.value, tuple_of(r.grads), tuple_of(r.hvp));
      },
      "(fn(*inputs), its gradient, H v) for a scalar fn", py::arg("fn"), py::arg("inputs"), py::arg("v"),
      py::arg("create_graph") = false);
  m.def(
      "jacobian",
      [](py::function fn, py::handle inputs) -> py::object {
        const TensorFn f = tensor_fn(std::move(fn));
        const std::vector<Tensor> xs = tensors(inputs);
        std::vector<Tensor> j;
        {
          py::gil_scoped_release release;
          j = jacobian(f, xs);
        }
        if (py::isinstance<Tensor>(inputs)) return maybe(j[0]);
        return tuple_of(j);
      },
      "d fn / d input, shaped output.shape + input.shape (a tuple for a sequence of inputs)", py::arg("fn"),
      py::arg("inputs"));
  m.def(
      "hessian",
      [](py::function fn, py::handle inputs) -> py::object {
        const TensorFn f = tensor_fn(std::move(fn));
        const std::vector<Tensor> xs = tensors(inputs);
        std::vector<std::vector<Tensor>> h;
        {
          py::gil_scoped_release release;
          h = hessian(f, xs);
        }
        if (py::isinstance<Tensor>(inputs)) return maybe(h[0][0]);
        py::tuple rows(h.size());
        for (size_t i = 0; i < h.size(); ++i) rows[i] = tuple_of(h[i]);
        return rows;
      },
      "d^2 fn / d input_i d input_j for a scalar fn (a tuple of tuples for a sequence of inputs)",
      py::arg("fn"), py::arg("inputs"));
}

}  // namespace tapegrad::python
