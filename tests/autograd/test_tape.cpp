// The tape: recording rules, accumulation, freeing, error paths, deep chains.
#include <catch2/catch.hpp>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {
Tensor param(std::vector<double> v, Shape s) { return Tensor::from_vector(v, s, DType::f64).requires_grad_(); }
}  // namespace

TEST_CASE("backward accumulates every use of a tensor", "[autograd]") {
  Tensor x = param({3.0}, {1});
  // y = x*x + x  -> dy/dx = 2x + 1 = 7
  backward(sum(add(mul(x, x), x)));
  CHECK(x.grad().item() == Approx(7.0));
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd]") {
  Tensor x = param({2.0}, {1});
  backward(sum(mul(x, 3.0)));
  backward(sum(mul(x, 3.0)));
  CHECK(x.grad().item() == Approx(6.0));
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  backward(sum(mul(x, 3.0)));
  CHECK(x.grad().item() == Approx(3.0));
}

TEST_CASE("only ops with an input that requires grad are recorded", "[autograd]") {
  Tape tape;
  TapeScope scope(tape);
  const Tensor c = Tensor::ones({3});
  const Tensor d = exp(c);
  CHECK(tape.size() == 0);
  CHECK_FALSE(d.requires_grad());
  Tensor w = Tensor::ones({3}).requires_grad_();
  const Tensor e = mul(d, w);
  CHECK(tape.size() == 1);
  CHECK(e.requires_grad());
  CHECK_FALSE(e.is_leaf());
  {
    NoGrad ng;
    const Tensor f = mul(e, w);
    CHECK_FALSE(f.requires_grad());
    CHECK(tape.size() == 1);
  }
  CHECK_THAT(tape.dump(), Catch::Contains("mul(f32[3], f32[3]) -> f32[3]"));
}

TEST_CASE("the tape is freed after backward; a second backward is an error", "[autograd][errors]") {
  Tensor x = param({1.0, 2.0}, {2});
  const Tensor loss = sum(exp(x));
  backward(loss);
  CHECK(current_tape().size() == 0);
  CHECK_THROWS_AS(backward(loss), AutogradError);
  CHECK_THROWS_WITH(backward(loss), Catch::Contains("already freed") && Catch::Contains("retain_graph"));
  // The gradient was not double counted.
  CHECK(x.grad().to_vector()[1] == Approx(std::exp(2.0)));
}

TEST_CASE("retain_graph allows a second backward", "[autograd]") {
  Tensor x = param({1.0}, {1});
  const Tensor loss = sum(mul(x, x));
  backward(loss, {}, true);
  backward(loss);
  CHECK(x.grad().item() == Approx(4.0));
}

TEST_CASE("using a result whose tape was freed is an error", "[autograd][errors]") {
  Tensor x = param({1.0}, {1});
  const Tensor h = exp(x);
  backward(sum(h));
  CHECK_THROWS_WITH(mul(h, 2.0), Catch::Contains("mul_scalar") && Catch::Contains("freed"));
}

TEST_CASE("backward on a non-scalar needs a gradient of its shape", "[autograd][errors]") {
  Tensor x = param({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH(backward(y), Catch::Contains("backward") && Catch::Contains("f64[2,3]") &&
                                     Catch::Contains("not a scalar"));
  CHECK_THROWS_WITH(backward(y, Tensor::ones({3, 2}, DType::f64)), Catch::Contains("f64[3,2]"));
  backward(y, Tensor::ones({2, 3}, DType::f64));
  CHECK(x.grad().to_vector() == std::vector<double>(6, 2.0));
  CHECK_THROWS_AS(backward(Tensor::ones({1})), AutogradError);
}

TEST_CASE("a 10,000-step chain runs backward without recursion", "[autograd]") {
  Tensor x = param({0.5}, {1});
  Tensor h = x;
  for (int i = 0; i < 10000; ++i) h = add(mul(h, 1.0001), 0.0);
  backward(sum(h));
  CHECK(x.grad().item() == Approx(std::pow(1.0001, 10000)).epsilon(1e-9));
}

TEST_CASE("intermediate gradients are freed unless retained", "[autograd]") {
  Tensor x = param({1.0, 2.0}, {2});
  Tensor h = exp(x);
  Tensor k = mul(x, 3.0);
  k.retain_grad();
  backward(add(sum(h), sum(k)));
  CHECK_FALSE(h.grad().defined());
  REQUIRE(k.grad().defined());
  CHECK(k.grad().to_vector() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("every op kind has a name", "[autograd]") {
  for (int i = 0; i < kOpCount; ++i) CHECK(std::string(op_name(OpKind(i))).size() > 0);
}

// ---- the three ways to write a gradient and the sole-owner rule --------------------------------

TEST_CASE("accumulate_grad adopts a gradient that is its storage's sole owner", "[autograd][grad-writing]") {
  NoGrad no_grad;
  Tensor t = param({0, 0, 0, 0}, {2, 2});
  Tensor g = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::f64);
  const double* storage = g.data<double>();
  accumulate_grad(t, g);
  CHECK(t.grad().data<double>() == storage);
  accumulate_grad(t, Tensor::from_vector({10, 20, 30, 40}, {2, 2}, DType::f64));  // later ones add in
  CHECK(t.grad().to_vector() == std::vector<double>{11, 22, 33, 44});
}

TEST_CASE("accumulate_grad copies a gradient that something else holds", "[autograd][grad-writing]") {
  NoGrad no_grad;
  Tensor t = param({0, 0, 0}, {3});
  Tensor g = Tensor::from_vector({1, 2, 3}, {3}, DType::f64);
  Tensor other;
  SECTION("a second handle on the same tensor") {
    other = g;
  }
  SECTION("another tensor sharing the storage") {
    other = g.detach();
  }
  accumulate_grad(t, g);
  CHECK(t.grad().data<double>() != g.data<double>());
  g.data<double>()[0] = 100;  // the copy does not see later writes to g
  CHECK(t.grad().to_vector() == std::vector<double>{1, 2, 3});
}

TEST_CASE("accumulate_grad takes a reshaped gradient in t's shape and refuses other sizes",
          "[autograd][grad-writing][errors]") {
  NoGrad no_grad;
  Tensor t = param({0, 0, 0, 0, 0, 0}, {2, 3});
  Tensor g = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {6}, DType::f64);
  const double* storage = g.data<double>();
  accumulate_grad(t, g);
  CHECK(t.grad().shape() == Shape{2, 3});
  CHECK(t.grad().data<double>() == storage);
  Tensor u = param({0, 0}, {2});
  CHECK_THROWS_WITH(accumulate_grad(u, g), Catch::Contains("[6]") && Catch::Contains("[2]"));
}

TEST_CASE("grad_buffer says whether it is new; grad_buffer_zeroed starts new buffers at zero",
          "[autograd][grad-writing]") {
  NoGrad no_grad;
  Tensor t = param({5, 6}, {2});
  bool fresh = false;
  Tensor b = grad_buffer(t, &fresh);
  CHECK(fresh);
  b.data<double>()[0] = 1;
  b.data<double>()[1] = 2;
  CHECK(grad_buffer(t, &fresh).data<double>() == b.data<double>());
  CHECK_FALSE(fresh);
  CHECK(grad_buffer_zeroed(t).to_vector() == std::vector<double>{1, 2});  // kept, not cleared
  Tensor u = param({5, 6}, {2});
  CHECK(grad_buffer_zeroed(u).to_vector() == std::vector<double>{0, 0});
}

TEST_CASE("a retained gradient is never adopted by an input", "[autograd][grad-writing]") {
  Tensor x = param({1, 2, 3}, {3});
  Tensor r = reshape(x, {3, 1});
  r.retain_grad();
  backward(sum(r));
  REQUIRE(r.grad().defined());
  CHECK(x.grad().data<double>() != r.grad().data<double>());
  x.grad().data<double>()[0] = 7;  // x's gradient is its own buffer: r's stays as backward left it
  CHECK(r.grad().to_vector() == std::vector<double>{1, 1, 1});
}

TEST_CASE("x + x and a retained graph give the same gradients after adopting dy",
          "[autograd][grad-writing]") {
  Tensor x = param({1, 2, 3}, {3});
  Tensor y = reshape(add(x, x), {3, 1});
  Tensor loss = sum(mul(y, 2.0));
  backward(loss, {}, true);
  CHECK(x.grad().to_vector() == std::vector<double>{4, 4, 4});
  backward(loss);
  CHECK(x.grad().to_vector() == std::vector<double>{8, 8, 8});
}

namespace {
// A user-defined op through the public entry point: y = x^3, dy/dx = 3 x^2. `wrong_backward` leaves the
// factor 3 out, which gradcheck must catch.
Tensor cube(const Tensor& x, bool wrong_backward = false) {
  Tensor y;
  {
    NoGrad no_grad;
    y = mul(mul(x, x), x);
  }
  if (should_record({&x}))
    record_custom("cube", {x}, y, [x, wrong_backward](const Tensor& dy) {
      accumulate_grad(x, mul(mul(dy, mul(x, x)), wrong_backward ? 1.0 : 3.0));  // dx = dy * 3 x^2
    });
  return y;
}
}  // namespace

TEST_CASE("record_custom: a user-defined op is recorded, named and differentiated", "[autograd][custom]") {
  Tape tape;
  TapeScope scope(tape);
  Tensor x = param({-1.5, 0.5, 2.0}, {3});
  const Tensor y = cube(x);
  REQUIRE(tape.size() == 1);
  CHECK(tape.entries()[0].op == OpKind::custom);
  CHECK(std::string(entry_name(tape.entries()[0])) == "cube");
  CHECK_THAT(tape.dump(), Catch::StartsWith("#0 cube("));
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  // Composed with library ops: d/dx sum(2 * x^3) = 6 x^2.
  backward(sum(mul(y, 2.0)));
  CHECK(x.grad().to_vector() == std::vector<double>{13.5, 1.5, 24.0});

  // gradcheck sees the custom kind, passes the right backward and fails the wrong one.
  const Tensor x2 = Tensor::from_vector({0.3, -0.7, 1.1, 2.0}, {2, 2}, DType::f64).requires_grad_();
  const GradcheckResult ok = gradcheck([](const std::vector<Tensor>& in) { return cube(in[0]); }, {x2});
  CHECK(ok.ok);
  CHECK(ok.ops_seen == std::vector<OpKind>{OpKind::custom});
  const GradcheckResult bad =
      gradcheck([](const std::vector<Tensor>& in) { return cube(in[0], true); }, {x2});
  CHECK_FALSE(bad.ok);
  // Not recorded when no input requires grad.
  tape.clear();
  const Tensor c = cube(Tensor::ones({2}, DType::f64));
  CHECK(tape.size() == 0);
  CHECK_FALSE(c.requires_grad());
}

TEST_CASE("record_custom refuses a nameless op and an output that already requires grad",
          "[autograd][custom][errors]") {
  Tensor x = param({1.0, 2.0}, {2});
  const auto noop = [](const Tensor&) {};
  CHECK_THROWS_WITH(record_custom("", {x}, Tensor::ones({2}, DType::f64), noop),
                    Catch::Contains("needs a name"));
  CHECK_THROWS_WITH(record_custom("twice", {x}, Tensor(), noop),
                    Catch::Contains("twice") && Catch::Contains("undefined"));
  // The forward ran with recording on: its own entries already carry the gradient.
  const Tensor recorded = mul(x, 2.0);
  CHECK_THROWS_WITH(
      record_custom("twice", {x}, recorded, noop),
      Catch::Contains("twice") && Catch::Contains("already requires grad") && Catch::Contains("NoGrad"));
  // A parameter is not an op's result.
  CHECK_THROWS_WITH(record_custom("twice", {x}, x, noop), Catch::Contains("already requires grad"));
  backward(sum(recorded));  // frees the tape this test wrote
}

TEST_CASE("deferred gradient parts are settled before the producer's backward and charged to their op",
          "[autograd][grad-writing]") {
  // y = tanh(x) narrowed at each of 3 steps: the slices' gradients wait (src/ops/shape.cpp) and are
  // written just before tanh's closure reads y's gradient. An observer sees, for each entry, whether
  // its output's gradient was already there (tanh: yes, complete), and which entry the settling was
  // charged to (the first narrow to run, i.e. the last recorded). A leaf narrowed the same way is
  // never deferred: its gradient holds the slice as soon as that narrow's closure has run.
  struct Watch : TapeObserver {
    std::vector<std::pair<OpKind, std::vector<double>>> seen;  // op, its output's gradient on entry
    std::vector<size_t> settled;
    void before_backward(const Tape& tape, size_t index, const Tensor& dy) override {
      seen.emplace_back(tape.entries()[index].op, dy.to_vector());
    }
    void deferred_settled(const Tape&, size_t index) override { settled.push_back(index); }
  } watch;
  Tape tape;
  TapeScope scope(tape);
  ObserveScope observe(watch);
  Tensor x = param({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3}), w = param({1, 2}, {2, 1});
  const Tensor y = tanh(x);
  Tensor loss = Tensor::zeros({}, DType::f64);
  for (int t = 0; t < 3; ++t) loss = add(loss, mul(sum(mul(narrow(y, 1, t, 1), w)), double(t + 1)));
  const size_t last_narrow = [&] {
    size_t last = 0;
    for (size_t i = 0; i < tape.size(); ++i)
      if (tape.entries()[i].op == OpKind::narrow) last = i;
    return last;
  }();
  backward(loss);
  REQUIRE(watch.settled == std::vector<size_t>{last_narrow});
  REQUIRE(watch.seen.back().first == OpKind::tanh);
  // d loss / d y[b, t] = (t + 1) * w[b]
  CHECK(watch.seen.back().second == std::vector<double>{1, 2, 3, 2, 4, 6});

  Tensor leaf = param({1, 2, 3, 4}, {1, 4});
  struct LeafWatch : TapeObserver {
    Tensor leaf;
    std::vector<double> after_first;
    void after_backward(const Tape& tape, size_t index) override {
      if (tape.entries()[index].op == OpKind::narrow && after_first.empty()) after_first = leaf.grad().to_vector();
    }
  } leaf_watch;
  leaf_watch.leaf = leaf;
  ObserveScope observe_leaf(leaf_watch);
  const Tensor front = sum(narrow(leaf, 1, 0, 2));
  const Tensor back = sum(mul(narrow(leaf, 1, 2, 2), 3.0));
  backward(add(front, back));
  CHECK(leaf_watch.after_first == std::vector<double>{0, 0, 3, 3});  // the last narrow runs first
  CHECK(leaf.grad().to_vector() == std::vector<double>{1, 1, 3, 3});
}
