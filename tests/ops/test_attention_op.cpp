// scaled_dot_product_attention against the unfused composition it replaces (permute, matmul,
// softmax with scale / mask / causal, dropout, matmul) in float64 and float32: the output and the
// gradients of q, k and v, for masks of each shape MultiHeadAttention passes, causal with Tq < Tk and
// Tq > Tk, dropout, and q, k, v as strided views of one projection. Also its errors, and that the
// tape keeps nothing of size [B, H, Tq, Tk]. (Its float64 gradient checks are rows of the op
// registry, src/ops/op_checks.cpp.)
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

struct Case {
  std::string name;
  int64_t B, Tq, Tk, H, dk, dv;
  int mask;  // 0 none, 1 key padding [B,1,1,Tk] (-1e9), 2 full [Tq,Tk], 3 per head [1,H,Tq,Tk]
  bool causal;
  double dropout;
};

// The unfused path: heads moved to dim 1, weights materialised.
Tensor unfused(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& s) {
  Tensor w = softmax(matmul(q.permute({0, 2, 1, 3}), k.permute({0, 2, 3, 1})), {s.scale, s.mask, s.causal});
  w = dropout(w, s.dropout, true, s.dropout_seed);
  return matmul(w, v.permute({0, 2, 1, 3})).permute({0, 2, 1, 3});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Output and d(sum(o * W))/d(q, k, v) of `attend` on fresh leaves holding `values`.
std::vector<Tensor> run(const std::vector<Tensor>& values, const Tensor& weights,
                        const std::function<Tensor(const std::vector<Tensor>&)>& attend) {
  std::vector<Tensor> leaves;
  for (const Tensor& x : values) leaves.push_back(x.clone().requires_grad_());
  const Tensor o = attend(leaves);
  backward(sum(mul(o, weights)));
  return {o.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
}

}  // namespace

TEST_CASE("scaled_dot_product_attention matches softmax(q k^T) v, forward and backward", "[ops][attention]") {
  const std::vector<Case> cases = {
      {"plain", 2, 5, 7, 2, 8, 8, 0, false, 0.0},
      {"key padding", 3, 6, 6, 2, 4, 4, 1, false, 0.0},
      {"full mask, causal", 2, 9, 9, 3, 5, 6, 2, true, 0.0},
      {"causal Tq < Tk", 1, 3, 17, 2, 8, 8, 0, true, 0.0},
      {"causal Tq > Tk (rows with no key)", 2, 17, 3, 2, 8, 8, 0, true, 0.0},
      {"per-head mask", 2, 4, 33, 2, 32, 32, 3, false, 0.0},
      {"dropout, key padding", 2, 33, 33, 2, 32, 32, 1, false, 0.3},
      {"long rows (several key blocks), causal", 1, 150, 300, 2, 16, 16, 1, true, 0.0},
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    for (const Case& c : cases) {
      CAPTURE(c.name, dtype_name(dtype));
      Generator gen(42);
      const Tensor q = Tensor::randn({c.B, c.Tq, c.H, c.dk}, gen, dtype);
      const Tensor k = Tensor::randn({c.B, c.Tk, c.H, c.dk}, gen, dtype);
      const Tensor v = Tensor::randn({c.B, c.Tk, c.H, c.dv}, gen, dtype);
      const Tensor w = Tensor::randn({c.B, c.Tq, c.H, c.dv}, gen, dtype);
      AttentionSpec spec{1.0 / std::sqrt(double(c.dk)), {}, c.causal, c.dropout, 99};
      if (c.mask == 1) {
        std::vector<double> m(size_t(c.B * c.Tk), 0.0);
        for (int64_t b = 0; b < c.B; ++b)
          for (int64_t j = c.Tk - 1 - b; j < c.Tk; ++j) m[size_t(b * c.Tk + j)] = -1e9;  // b pads b + 1 keys
        spec.mask = Tensor::from_vector(m, {c.B, 1, 1, c.Tk}, dtype);
      } else if (c.mask == 2) {
        spec.mask = Tensor::randn({c.Tq, c.Tk}, gen, dtype);
      } else if (c.mask == 3) {
        spec.mask = Tensor::randn({1, c.H, c.Tq, c.Tk}, gen, dtype);
      }
      const auto fused = run({q, k, v}, w, [&](const std::vector<Tensor>& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], spec);
      });
      const auto reference =
          run({q, k, v}, w, [&](const std::vector<Tensor>& x) { return unfused(x[0], x[1], x[2], spec); });
      // float64: the two differ only in rounding; float32: by the kernels' summation order.
      const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
      const char* what[] = {"o", "dq", "dk", "dv"};
      for (int i = 0; i < 4; ++i) {
        CAPTURE(what[i]);
        CHECK(max_abs_diff(fused[size_t(i)], reference[size_t(i)]) <= tol);
      }
    }
  }
}

TEST_CASE("scaled_dot_product_attention reads views of one projection in place", "[ops][attention]") {
  Generator gen(7);
  const int64_t B = 2, T = 9, H = 2, dk = 4;
  const Tensor x = Tensor::randn({B, T, 3 * H * dk}, gen, DType::f64);
  const Tensor w = Tensor::randn({B, T, H, dk}, gen, DType::f64);
  auto parts = [&](const Tensor& qkv, int i) {
    return narrow(qkv, 2, i * H * dk, H * dk).reshape({B, T, H, dk});
  };
  const AttentionSpec spec{0.5, {}, true};
  Tensor a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
  const Tensor fused = scaled_dot_product_attention(parts(a, 0), parts(a, 1), parts(a, 2), spec);
  backward(sum(mul(fused, w)));
  const Tensor reference = unfused(parts(b, 0), parts(b, 1), parts(b, 2), spec);
  backward(sum(mul(reference, w)));
  CHECK(max_abs_diff(fused, reference) <= 1e-12);
  CHECK(max_abs_diff(a.grad(), b.grad()) <= 1e-12);
}

TEST_CASE("scaled_dot_product_attention_stacked: the op on narrowed views, gradients in the stacked tensors",
          "[ops][attention]") {
  // Self-attention on qkv [B,T,3C], and q [B,Tq,C] with kv [B,Tk,2C] (the shapes MultiHeadAttention
  // passes: 4 heads of 32). The first backward writes fresh gradients: the same bits as the op on
  // views of the same tensors, whose three slices narrow's backward gathers; a second backward adds
  // to them (in another order: close, not the same bits). (The registry's gradient checks of the
  // stacked form catch a column range added to instead of written.)
  const bool self = GENERATE(true, false);
  CAPTURE(self);
  Generator gen(3);
  const int64_t B = 3, Tq = 32, Tk = self ? Tq : 20, H = 4, d = 32, C = H * d;
  const Tensor q0 = Tensor::randn({B, Tq, self ? 3 * C : C}, gen), kv0 = Tensor::randn({B, Tk, 2 * C}, gen);
  const Tensor w = Tensor::randn({B, Tq, H, d}, gen);
  auto part = [&](const Tensor& t, int i, int64_t T) { return narrow(t, 2, i * C, C).reshape({B, T, H, d}); };
  const AttentionSpec spec{1 / std::sqrt(double(d)), {}, self, 0.1, 11};
  Tensor qa = q0.clone().requires_grad_(), kva = kv0.clone().requires_grad_();
  Tensor qb = q0.clone().requires_grad_(), kvb = kv0.clone().requires_grad_();
  auto stacked = [&] { return scaled_dot_product_attention_stacked(qa, self ? Tensor() : kva, H, spec); };
  auto views = [&] {
    return self ? scaled_dot_product_attention(part(qb, 0, Tq), part(qb, 1, Tq), part(qb, 2, Tq), spec)
                : scaled_dot_product_attention(part(qb, 0, Tq), part(kvb, 0, Tk), part(kvb, 1, Tk), spec);
  };
  const Tensor oa = stacked();
  backward(sum(mul(oa, w)));
  const Tensor ob = views();
  backward(sum(mul(ob, w)));
  CHECK(max_abs_diff(oa, ob) == 0);
  CHECK(max_abs_diff(qa.grad(), qb.grad()) == 0);
  if (!self) CHECK(max_abs_diff(kva.grad(), kvb.grad()) == 0);
  backward(sum(mul(stacked(), w)));
  backward(sum(mul(views(), w)));
  CHECK(max_abs_diff(qa.grad(), qb.grad()) <= 1e-5);  // float32 sums of a few dozen terms of size ~1
  if (!self) CHECK(max_abs_diff(kva.grad(), kvb.grad()) <= 1e-5);
  CHECK_THROWS_WITH(scaled_dot_product_attention_stacked(q0, {}, 5, spec),
                    Catch::Contains("scaled_dot_product_attention_stacked") && Catch::Contains("heads=5"));
  CHECK_THROWS_WITH(scaled_dot_product_attention_stacked(q0, q0, H, spec), Catch::Contains("kv="));
}

TEST_CASE("scaled_dot_product_attention of one tensor as q, k and v adds the three gradients",
          "[ops][attention]") {
  // The kernels write dq, dk and dv interleaved; on one buffer every part must add (float32, 4 heads
  // of 32 over T 32 and 200: one key block and several).
  const int64_t T = GENERATE(32, 200);
  Generator gen(5);
  const Tensor x0 = Tensor::randn({2, T, 4, 32}, gen), w = Tensor::randn({2, T, 4, 32}, gen);
  const AttentionSpec spec{0.2, {}, true};
  Tensor a = x0.clone().requires_grad_(), b = x0.clone().requires_grad_();
  backward(sum(mul(scaled_dot_product_attention(a, a, a, spec), w)));
  backward(sum(mul(unfused(b, b, b, spec), w)));
  CAPTURE(T);
  CHECK(max_abs_diff(a.grad(), b.grad()) <= 1e-4);  // float32 sums of up to 200 terms of size ~1
}

TEST_CASE("scaled_dot_product_attention keeps nothing of size [B,H,Tq,Tk] on the tape", "[ops][attention]") {
  Generator gen(1);
  const int64_t B = 1, T = 512, H = 1, d = 8;
  const Tensor q = Tensor::randn({B, T, H, d}, gen).requires_grad_();
  const Tensor k = Tensor::randn({B, T, H, d}, gen).requires_grad_();
  const Tensor v = Tensor::randn({B, T, H, d}, gen).requires_grad_();
  memory::reset_peak();
  const int64_t before = memory::stats().bytes_in_use;
  const Tensor o = scaled_dot_product_attention(q, k, v, {0.35, {}, true});
  const int64_t kept = memory::stats().bytes_in_use - before;
  const int64_t weights_bytes = B * H * T * T * 4;
  CHECK(kept < weights_bytes / 16);  // o and the row statistics: O(T d)
  backward(sum(o));
  CHECK(memory::stats().peak_bytes_in_use - before < weights_bytes / 4);
}

TEST_CASE("scaled_dot_product_attention rejects bad shapes and masks", "[ops][attention]") {
  const Tensor q = Tensor::zeros({2, 3, 2, 4}), k = Tensor::zeros({2, 5, 2, 4}),
               v = Tensor::zeros({2, 5, 2, 4});
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, Tensor::zeros({2, 5, 2, 3}), v),
                    Catch::Contains("scaled_dot_product_attention") && Catch::Contains("k=[2,5,2,3]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q.reshape({2, 3, 8}), k, v), Catch::Contains("q=[2,3,8]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {1.0, Tensor::zeros({2, 1, 1, 4})}),
                    Catch::Contains("mask") && Catch::Contains("[2,1,1,4]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {1.0, Tensor::zeros({2, 1, 1, 5}, DType::f64)}),
                    Catch::Contains("dtype"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, {1.0, {}, false, 1.5}), Catch::Contains("dropout"));
}
