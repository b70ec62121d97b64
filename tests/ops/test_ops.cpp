// Ops: every registered gradient check passes in float64, every op kind is covered by the registry,
// gradcheck itself catches wrong gradients, forward values match closed forms, bad input errors.
// The gradcheck rows themselves (one per op case, with shapes and tolerances) live in the library, in
// src/ops/op_checks.cpp, so `tapegrad gradcheck` prints the same table this test runs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <set>

#include "tapegrad/op_checks.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

TEST_CASE("every registered op passes its float64 gradient check", "[ops][gradcheck]") {
  for (const OpCheck& check : op_checks()) {
    CAPTURE(check.name, check.shapes);
    const GradcheckResult r = run_op_check(check);
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("every registered op passes its float64 second-order check", "[ops][gradcheck][create_graph]") {
  for (const OpCheck& check : op_checks()) {
    CAPTURE(check.name, check.shapes);
    GradcheckResult r;
    try {
      r = run_op_check(check, 2);
    } catch (const Error& e) {
      r.message = e.what();
    }
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("the registry exercises every op kind, and a row named after a kind records that kind",
          "[ops][gradcheck]") {
  std::set<OpKind> seen;
  for (const OpCheck& check : op_checks()) {
    const std::vector<OpKind> recorded = run_op_check(check).ops_seen;
    seen.insert(recorded.begin(), recorded.end());
    for (int i = 0; i < kOpCount; ++i)
      if (check.name == op_name(OpKind(i))) {
        CAPTURE(check.name, check.shapes);
        CHECK(std::count(recorded.begin(), recorded.end(), OpKind(i)) == 1);
      }
  }
  for (int i = 0; i < kOpCount; ++i) {
    if (OpKind(i) == OpKind::custom) continue;  // no function of its own: tests/autograd checks record_custom
    CAPTURE(op_name(OpKind(i)));
    CHECK(seen.count(OpKind(i)) == 1);
  }
}

TEST_CASE("gradcheck fails a wrong gradient and a vacuous one", "[ops][gradcheck]") {
  Generator gen(3);
  Tensor x = Tensor::randn({4}, gen, DType::f64).requires_grad_();
  // detach() cuts the tape: the analytic gradient is missing one path, so the check must fail.
  const auto wrong = [](const std::vector<Tensor>& in) { return mul(in[0], in[0].detach()); };
  const GradcheckResult r = gradcheck(wrong, {x});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("analytic") && Catch::Contains("numeric"));
  // A constant function of x: both gradients are zero, which proves nothing.
  const auto constant = [](const std::vector<Tensor>& in) { return add(mul(in[0], 0.0), 1.0); };
  const GradcheckResult v = gradcheck(constant, {x});
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.message, Catch::Contains("vacuous"));
  CHECK_THROWS_WITH(gradcheck(wrong, {Tensor::randn({2}, gen).requires_grad_()}), Catch::Contains("float64"));
}

TEST_CASE("linear in a WeightPackScope: the same bits as without, forward and backward", "[ops]") {
  // The packed panels are the ones each GEMM would pack itself, and the arithmetic per tile is the
  // same, so the results are identical, not merely close.
  Generator gen(7);
  const int64_t B = GENERATE(1, 5, 64), H = GENERATE(3, 70, 256);
  CAPTURE(B, H);
  const Tensor h0 = Tensor::randn({B, H}, gen), w0 = Tensor::randn({3 * H, H}, gen) * (1.0 / std::sqrt(double(H))),
               b0 = Tensor::randn({3 * H}, gen);
  auto run = [&](bool packed) {
    Tensor h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor y;
    {
      std::optional<WeightPackScope> scope;
      if (packed) scope.emplace();
      Tensor s = h;
      for (int t = 0; t < 4; ++t) s = tanh(narrow(linear(s, w, b), 1, H, H));  // w applied at every step
      y = s;
    }
    backward(sum(y * y));
    return std::vector<Tensor>{y.detach(), h.grad(), w.grad(), b.grad()};
  };
  const auto plain = run(false), packed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    CHECK(plain[i].to_vector() == packed[i].to_vector());
  }
}

TEST_CASE("forward values match closed forms", "[ops]") {
  const Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  const Tensor b = Tensor::from_vector({1, 0, 0, 1, 1, 1}, {3, 2}, DType::f64);
  CHECK(matmul(a, b).to_vector() == std::vector<double>{4, 5, 10, 11});
  CHECK(add(a, Tensor::from_vector({10, 20, 30}, {3}, DType::f64)).to_vector() ==
        std::vector<double>{11, 22, 33, 14, 25, 36});
  CHECK(sum(a, 0).to_vector() == std::vector<double>{5, 7, 9});
  CHECK(mean(a).item() == Approx(3.5));
  CHECK(max(a, 1).to_vector() == std::vector<double>{3, 6});
  const auto s = softmax(a).to_vector();
  CHECK(s[0] + s[1] + s[2] == Approx(1.0));
  CHECK(s[2] / s[1] == Approx(std::exp(1.0)));
  const auto causal = softmax(Tensor::zeros({3, 3}, DType::f64), {1.0, {}, true}).to_vector();
  CHECK(causal == std::vector<double>{1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  CHECK(concat({a, a}, 0).shape() == Shape{4, 3});
  CHECK(stack({a, a, a}, 0).shape() == Shape{3, 2, 3});
  const Tensor ln = layer_norm(a, {}, {});
  CHECK(sum(ln, 1).to_vector()[0] == Approx(0.0).margin(1e-12));
  CHECK(masked_fill(a, Tensor::from_ids({0, 1, 0}, {3}), -1).to_vector() == std::vector<double>{1, -1, 3, 4, -1, 6});
  // cross-entropy of uniform logits is log V; ignored targets do not count.
  const Tensor logits = Tensor::zeros({3, 5}, DType::f64);
  CHECK(cross_entropy(logits, Tensor::from_ids({1, -100, 4}, {3})).item() == Approx(std::log(5.0)));
  // embedding gathers rows
  const Tensor table = Tensor::from_vector({0, 0, 1, 1, 2, 2}, {3, 2});
  CHECK(embedding(table, Tensor::from_ids({2, 0}, {2})).to_vector() == std::vector<double>{2, 2, 0, 0});
}

TEST_CASE("dropout is seeded, scales kept elements, and is the identity in eval", "[ops]") {
  const Tensor x = Tensor::ones({1000}, DType::f64);
  const auto a = dropout(x, 0.25, true, 5).to_vector();
  CHECK(a == dropout(x, 0.25, true, 5).to_vector());
  CHECK(a != dropout(x, 0.25, true, 6).to_vector());
  int kept = 0;
  for (double v : a) {
    CHECK((v == 0.0 || v == Approx(1.0 / 0.75)));
    kept += v != 0.0;
  }
  CHECK(kept > 650);  // ~750 expected; a binomial(1000, 0.75) is below 650 with negligible probability
  CHECK(kept < 850);
  CHECK(dropout(x, 0.25, false, 5).same(x));
}

// The backward redraws the mask from the seed; it writes a fresh gradient and adds to one that other
// uses of the input already left. Both orders: the dropout's backward first and last.
TEST_CASE("dropout's gradient is its mask, added to the input's other gradients", "[ops]") {
  for (const DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    const Tensor factors = dropout(Tensor::ones({257}, dt), 0.3, true, 9);
    for (const bool dropout_first : {true, false}) {
      CAPTURE(dropout_first);
      const Tensor x = Tensor::from_vector(std::vector<double>(257, 0.5), {257}, dt).requires_grad_(true);
      // The tape runs backwards: the op recorded last has its backward run first.
      Tensor d, twice;
      if (dropout_first)
        twice = mul(x, 2.0), d = dropout(x, 0.3, true, 9);
      else
        d = dropout(x, 0.3, true, 9), twice = mul(x, 2.0);
      backward(sum(add(d, twice)));
      const auto g = x.grad().to_vector(), f = factors.to_vector();
      for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(f[i] + 2.0));
    }
  }
}

TEST_CASE("bad input gives an error naming the op and every shape", "[ops][errors]") {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  CHECK_THROWS_WITH(matmul(a, b), "matmul: inner dimensions differ: a=[2,3] b=[4,5]");
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("[2,3]") && Catch::Contains("[4,5]"));
  CHECK_THROWS_WITH(add(a, Tensor::zeros({2, 3}, DType::f64)),
                    Catch::Contains("add") && Catch::Contains("f32[2,3]") && Catch::Contains("f64[2,3]"));
  CHECK_THROWS_WITH(sum(a, 5), Catch::Contains("sum_axis") && Catch::Contains("axis 5") && Catch::Contains("[2,3]"));
  CHECK_THROWS_WITH(narrow(a, 1, 2, 4), Catch::Contains("narrow") && Catch::Contains("[2,3]"));
  CHECK_THROWS_AS(narrow(a, 1, 2, 4), IndexError);
  CHECK_THROWS_WITH(embedding(Tensor::zeros({10, 4}), Tensor::from_ids({1, 10}, {2})),
                    Catch::Contains("embedding") && Catch::Contains("id 10") && Catch::Contains("[10,4]"));
  CHECK_THROWS_WITH(cross_entropy(Tensor::zeros({2, 5}), Tensor::from_ids({1, 7}, {2})),
                    Catch::Contains("cross_entropy") && Catch::Contains("target 7") && Catch::Contains("[2,5]"));
  CHECK_THROWS_WITH(cross_entropy(Tensor::zeros({2, 5}), Tensor::from_ids({1, 2, 3}, {3})),
                    Catch::Contains("logits=[2,5]") && Catch::Contains("targets=[3]"));
  CHECK_THROWS_WITH(concat({a, b}, 0), Catch::Contains("concat") && Catch::Contains("[2,3] [4,5]"));
  CHECK_THROWS_WITH(permute(a, {0, 0}), Catch::Contains("permute") && Catch::Contains("[2,3]"));
  CHECK_THROWS_WITH(layer_norm(a, Tensor::ones({2}), {}), Catch::Contains("layer_norm") && Catch::Contains("[2]"));
  CHECK_THROWS_WITH(linear(a, b), Catch::Contains("linear") && Catch::Contains("x=[2,3]") && Catch::Contains("weight=[4,5]"));
  CHECK_THROWS_WITH(softmax(a, {1.0, Tensor::zeros({4}), false}), Catch::Contains("softmax") && Catch::Contains("[4]"));
}
