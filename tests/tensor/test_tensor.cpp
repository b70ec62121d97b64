// Tensor: creation, views, copies, printing, the generator and the caching allocator.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <span>

#include "tapegrad/checked.hpp"
#include "tapegrad/memory.hpp"
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

namespace {

// Pearson's chi-square statistic of observed counts against equal expected counts.
double chi_square_uniform(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const double expected = double(total) / double(counts.size());
  double chi2 = 0;
  for (int64_t c : counts) chi2 += (double(c) - expected) * (double(c) - expected) / expected;
  return chi2;
}

}  // namespace

TEST_CASE("uniform_int stays in [lo, hi] and hits every value equally often", "[tensor][random]") {
  // Ten values (not a power of two), 100k draws: chi-square with 9 degrees of freedom, below its 0.1%
  // critical value 27.88 at this fixed seed.
  Generator g(2024);
  std::vector<int64_t> counts(10);
  for (int i = 0; i < 100000; ++i) {
    const int64_t v = g.uniform_int(-3, 6);
    REQUIRE(v >= -3);
    REQUIRE(v <= 6);
    ++counts[size_t(v + 3)];
  }
  CHECK(chi_square_uniform(counts) < 27.88);
  // A range of 3 * 2^62 values, where reducing a 64-bit draw modulo the range would make the lowest
  // third twice as likely as each of the others: thirds of it, chi-square with 2 degrees of freedom
  // below its 0.1% critical value 13.82.
  const uint64_t third = uint64_t(1) << 62;
  const int64_t lo = INT64_MIN, hi = int64_t(third - 1);  // 2 * third below zero, one third above
  std::vector<int64_t> thirds(3);
  Generator wide(7);
  for (int i = 0; i < 30000; ++i) ++thirds[size_t((uint64_t(wide.uniform_int(lo, hi)) - uint64_t(lo)) / third)];
  CHECK(chi_square_uniform(thirds) < 13.82);
  // The whole 64-bit range, a single value, and an empty range.
  Generator e(1);
  CHECK(e.uniform_int(INT64_MIN, INT64_MAX) != e.uniform_int(INT64_MIN, INT64_MAX));
  CHECK(e.uniform_int(5, 5) == 5);
  CHECK_THROWS_WITH(e.uniform_int(2, 1), Catch::Contains("uniform_int") && Catch::Contains("[2, 1]"));
}

TEST_CASE("shuffle gives a permutation, and every order of three items equally often", "[tensor][random]") {
  Generator g(11);
  std::vector<int> items(1000);
  for (int i = 0; i < 1000; ++i) items[size_t(i)] = i;
  g.shuffle(items);
  std::vector<int> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i) REQUIRE(sorted[size_t(i)] == i);
  int moved = 0;
  for (int i = 0; i < 1000; ++i) moved += items[size_t(i)] != i;
  CHECK(moved > 900);
  // The 6 orders of {0, 1, 2} over 60k shuffles: chi-square with 5 degrees of freedom below its 0.1%
  // critical value 20.52 (swapping with any place, not only the later ones, fails this).
  std::map<std::vector<int>, int64_t> orders;
  for (int i = 0; i < 60000; ++i) {
    std::vector<int> three = {0, 1, 2};
    g.shuffle(std::span<int>(three));
    ++orders[three];
  }
  REQUIRE(orders.size() == 6);
  std::vector<int64_t> counts;
  for (const auto& [order, n] : orders) counts.push_back(n);
  CHECK(chi_square_uniform(counts) < 20.52);
  // A prefix: the first k places are distinct items, and exactly k numbers are drawn.
  Generator a(3), b(3);
  std::vector<int> letters = {0, 1, 2, 3, 4, 5, 6, 7};
  a.shuffle_prefix(letters, 3);
  for (int i = 0; i < 3; ++i) b.uniform_int(i, 7);
  CHECK(a.next_u64() == b.next_u64());
  CHECK(std::set<int>(letters.begin(), letters.end()).size() == 8);
  CHECK_THROWS_WITH(a.shuffle_prefix(letters, 9), Catch::Contains("count 9") && Catch::Contains("8 items"));
  std::vector<int> none;
  a.shuffle(none);  // nothing to do, and no draw
}

TEST_CASE("derive gives reproducible generators that differ across streams and seeds", "[tensor][random]") {
  CHECK(Generator::derive(5, 1).next_u64() == Generator::derive(5, 1).next_u64());
  const uint64_t base = Generator::derive(5, 1).next_u64();
  CHECK(Generator::derive(5, 2).next_u64() != base);
  CHECK(Generator::derive(6, 1).next_u64() != base);
  CHECK(Generator::derive(5, 1).next_u64() != Generator(5).next_u64());
  // Fixed values: training batches, held-out examples and TSV splits of every saved run depend on them.
  CHECK(Generator::derive_seed(20261130, 0x7261696eull) == 0x711bd92817812988ull);
  CHECK(Generator::derive_seed(0, 5) == 0x49d55178ca54cf69ull);
  CHECK(Generator::derive(0, 5).state() == Generator(0x49d55178ca54cf69ull).state());
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

TEST_CASE("sizes are overflow-checked and named", "[tensor][errors][sizes]") {
  CHECK(checked_mul(3, 4, "x") == 12);
  CHECK(checked_add(3, 4, "x") == 7);
  CHECK_THROWS_WITH(checked_mul(int64_t(1) << 62, 4, "table max_len x d_model"),
                    Catch::Contains("table max_len x d_model") && Catch::Contains("overflows"));
  CHECK_THROWS_WITH(checked_add(INT64_MAX, 1, "offset"),
                    Catch::Contains("offset") && Catch::Contains("overflows"));
  CHECK_THROWS_WITH(checked_mul(-2, 4, "rows"), Catch::Contains("rows") && Catch::Contains("negative"));
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KB");
  CHECK(format_bytes(56.0 * 1024 * 1024 * 1024) == "56.0 GB");
  // The element count of a shape whose product wraps around is refused, not a negative number.
  CHECK_THROWS_AS(Shape({int64_t(1) << 62, 8}).numel(), ShapeError);
  CHECK_THROWS_WITH(Shape({int64_t(1) << 62, 8}).numel(), Catch::Contains("[4611686018427387904,8]"));
  CHECK_THROWS_WITH(Tensor::empty({int64_t(1) << 62, 8}), Catch::Contains("[4611686018427387904,8]"));
  CHECK_THROWS_WITH(Tensor::empty({3, -4}), Catch::Contains("[3,-4]") && Catch::Contains("dimension 1") &&
                                                Catch::Contains("negative"));
}

TEST_CASE("a tensor larger than the machine is OutOfMemory naming bytes and shape",
          "[tensor][memory][sizes]") {
  // 2^40 x 2^12 float32 = 16 PB: refused before the attempt, never std::bad_alloc.
  const Shape huge{int64_t(1) << 40, int64_t(1) << 12};
  CHECK_THROWS_AS(Tensor::zeros(huge), OutOfMemory);
  CHECK_THROWS_WITH(Tensor::zeros(huge), Catch::Contains("out of memory: cannot allocate 16.0 PB") &&
                                             Catch::Contains("[1099511627776,4096]"));
  // Within 2^63 bytes but beyond the element size: the byte count overflows.
  CHECK_THROWS_AS(Tensor::empty({int64_t(1) << 61, 2}, DType::f64), OutOfMemory);
  CHECK(memory::machine_limit_bytes() > (int64_t(1) << 26));
}

TEST_CASE("returning a block to the allocator cannot throw or allocate", "[tensor][memory]") {
  static_assert(noexcept(memory::release(nullptr, 0)));
  // Blocks of many distinct size classes come back to free lists of their own and are reused.
  std::vector<Tensor> ts;
  for (int64_t n = 1; n < 4096; n = n * 5 / 4 + 1) ts.push_back(Tensor::empty({n}));
  const auto before = memory::stats();
  std::vector<std::pair<int64_t, const void*>> freed;
  for (const Tensor& t : ts) freed.emplace_back(t.numel(), t.data<float>());
  for (Tensor& t : ts) t = Tensor();  // freed first to last
  ts.clear();
  const auto cached = memory::stats();
  CHECK(cached.bytes_in_use < before.bytes_in_use);
  CHECK(cached.bytes_cached > before.bytes_cached);
  for (auto it = freed.rbegin(); it != freed.rend(); ++it) {
    // Last freed, first reused: each request of the same class gets its block back.
    Tensor again = Tensor::empty({it->first});
    CHECK(static_cast<const void*>(again.data<float>()) == it->second);
    ts.push_back(again);
  }
  CHECK(memory::stats().os_allocations == before.os_allocations);
}

TEST_CASE("running out of address space mid-way is OutOfMemory, and unwinding frees cleanly",
          "[tensor][memory]") {
  // In a child process with `ulimit -v` just above its current size: tensors are allocated until the
  // OS refuses, the exception unwinds through every ~Storage, and the child reports what it caught.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    long vm_pages = 0;
    std::ifstream("/proc/self/statm") >> vm_pages;
    rlimit limit{};
    ::getrlimit(RLIMIT_AS, &limit);
    limit.rlim_cur = rlim_t(vm_pages) * rlim_t(::sysconf(_SC_PAGE_SIZE)) + (rlim_t(256) << 20);
    ::setrlimit(RLIMIT_AS, &limit);
    int code = 3;  // nothing thrown
    try {
      std::vector<Tensor> held;
      held.reserve(1000);
      for (int i = 0; i < 1000; ++i) held.push_back(Tensor::empty({int64_t(1) << 20}));  // 4 MB each
    } catch (const OutOfMemory& e) {
      code = std::string(e.what()).find(
                 "out of memory: cannot allocate 4.0 MB for a tensor of shape [1048576]") == 0
                 ? 0
                 : 5;
    } catch (...) {
      code = 4;  // std::bad_alloc or another non-tapegrad error
    }
    std::_Exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));  // not killed by std::terminate's abort
  CHECK(WEXITSTATUS(status) == 0);
}
