// Tensor: creation, views, copies, printing, the generator and the caching allocator.
#include <catch2/catch.hpp>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

TEST_CASE("creation and queries", "[tensor]") {
  const Tensor z = Tensor::zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.numel() == 6);
  CHECK(z.dtype() == DType::f32);
  CHECK(z.to_vector() == std::vector<double>(6, 0.0));
  CHECK(Tensor::ones({3}, DType::f64).to_vector() == std::vector<double>{1, 1, 1});
  CHECK(Tensor::full({2}, 2.5).to_vector() == std::vector<double>{2.5, 2.5});
  CHECK(Tensor::arange(4).to_vector() == std::vector<double>{0, 1, 2, 3});
  CHECK(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).size(-1) == 3);
  CHECK_THROWS_WITH(Tensor::from_vector({1, 2, 3}, {2, 2}), Catch::Contains("from_vector") && Catch::Contains("[2,2]"));
  CHECK(Tensor::full({}, 4.0).item() == 4.0);
}

TEST_CASE("seeded random tensors are reproducible", "[tensor]") {
  Generator g1(42), g2(42), g3(43);
  const auto a = Tensor::randn({5, 7}, g1).to_vector();
  CHECK(a == Tensor::randn({5, 7}, g2).to_vector());
  CHECK(a != Tensor::randn({5, 7}, g3).to_vector());
  // Moments of a large sample are close to the requested ones (loose: a statistical check).
  Generator g(1);
  const auto big = Tensor::randn({20000}, g, DType::f64, 2.0, 3.0).to_vector();
  double mean = 0, var = 0;
  for (double v : big) mean += v;
  mean /= double(big.size());
  for (double v : big) var += (v - mean) * (v - mean);
  var /= double(big.size());
  CHECK(mean == Approx(2.0).margin(0.1));
  CHECK(std::sqrt(var) == Approx(3.0).epsilon(0.05));
  // Generator state round-trips exactly.
  Generator s(9);
  s.next_u64();
  Generator t(0);
  t.set_state(s.state());
  CHECK(s.next_u64() == t.next_u64());
}

TEST_CASE("views share storage; contiguous copies", "[tensor]") {
  const Tensor a = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  const Tensor t = transpose(a, 0, 1);
  CHECK(t.shape() == Shape{3, 2});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  const Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.to_vector() == t.to_vector());
  const Tensor r = reshape(a, {3, 2});
  CHECK(r.impl()->storage == a.impl()->storage);
  const Tensor n = narrow(a, 1, 1, 2);
  CHECK(n.to_vector() == std::vector<double>{1, 2, 4, 5});
  CHECK(permute(Tensor::zeros({2, 3, 4}), {2, 0, 1}).shape() == Shape{4, 2, 3});
  CHECK(a.to(DType::f64).dtype() == DType::f64);
  CHECK(a.clone().impl()->storage != a.impl()->storage);
}

TEST_CASE("to_string prints shape, dtype and values like numpy", "[tensor]") {
  const Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  const std::string s = a.to_string();
  CHECK(s == "tensor([[1, 2],\n        [3, 4]], shape=[2,2], dtype=float32)");
  const std::string big = Tensor::arange(100).to_string();
  CHECK_THAT(big, Catch::Contains("...") && Catch::Contains("shape=[100]"));
  CHECK(Tensor::from_ids({3, 1}, {2}).to_string() == "tensor([3, 1], shape=[2], dtype=int32)");
}

TEST_CASE("the caching allocator reuses freed blocks", "[tensor][memory]") {
  { Tensor warm = Tensor::empty({1000, 100}); }
  const auto before = memory::stats();
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1000, 100});
    CHECK(reinterpret_cast<uintptr_t>(t.data<float>()) % 64 == 0);
  }
  const auto after = memory::stats();
  CHECK(after.os_allocations == before.os_allocations);
  CHECK(after.cache_hits >= before.cache_hits + 10);
}

TEST_CASE("bad shapes and dtypes give errors naming the op", "[tensor][errors]") {
  const Tensor a = Tensor::zeros({2, 3});
  CHECK_THROWS_AS(a.data<double>(), DTypeError);
  CHECK_THROWS_WITH(a.size(2), Catch::Contains("axis 2") && Catch::Contains("[2,3]"));
  CHECK_THROWS_WITH(reshape(a, {4, 2}), Catch::Contains("reshape") && Catch::Contains("[2,3]") && Catch::Contains("[4,2]"));
  CHECK_THROWS_WITH(Tensor::from_ids({1}, {1}).requires_grad_(), Catch::Contains("integer"));
}
