// Strided copies (contiguous(), permute and narrow backwards): copy_strided, add_strided and
// write_strided against the scalar reference, bitwise, on views small enough for one thread and large
// enough to split across two (by outer index, or into pieces of a single long run), with awkward extents.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/ref/ref.hpp"

namespace k = tapegrad::kernels;
namespace ref = tapegrad::kernels::ref;

namespace {

struct ThreadGuard {
  int threads = k::num_threads();
  ~ThreadGuard() { k::set_num_threads(threads); }
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A view of `shape` into a buffer laid out as `base` (row-major), with the view's dims permuted by
// `perm` and starting at `offset`: the strides a permute of a narrow produces.
struct View {
  std::vector<int64_t> shape, strides;
  int64_t offset = 0, span = 0;  // elements of the underlying buffer
};

View make_view(const std::vector<int64_t>& base, const std::vector<int64_t>& narrow_to,
               const std::vector<int>& perm) {
  std::vector<int64_t> bs(base.size());
  int64_t st = 1;
  for (size_t d = base.size(); d-- > 0;) bs[d] = st, st *= base[d];
  View v;
  v.span = st;
  v.offset = (base.back() - narrow_to.back()) * bs.back();  // narrow the last axis to its end
  for (int p : perm) v.shape.push_back(narrow_to[size_t(p)]), v.strides.push_back(bs[size_t(p)]);
  return v;
}

}  // namespace

TEST_CASE("copy_strided, add_strided and write_strided match the reference at 1 and 2 threads",
          "[kernels][strided]") {
  ThreadGuard guard;
  // base buffer, the narrowed view of it, the permutation: [B,T,3C] -> q part -> [B,H,T,d]-like
  // views (large: 2 x 64 x 33 x 3 x 97), one long run (a contiguous 300k copy), a single row
  // strided by 3, tiny ones.
  struct Case {
    std::vector<int64_t> base, narrow_to;
    std::vector<int> perm;
  };
  const std::vector<Case> cases = {
      {{64, 33, 3 * 97}, {64, 33, 97}, {0, 1, 2}},
      {{2, 64, 33, 3, 97}, {2, 64, 33, 3, 97}, {0, 3, 2, 1, 4}},
      {{300001}, {300001}, {0}},
      {{100003, 3}, {100003, 1}, {1, 0}},
      {{1}, {1}, {0}},
      {{3, 17}, {3, 5}, {1, 0}},
  };
  for (const Case& c : cases) {
    const View v = make_view(c.base, c.narrow_to, c.perm);
    int64_t n = 1;
    for (int64_t e : v.shape) n *= e;
    const std::vector<float> buffer = random_floats(size_t(v.span), 3), grad = random_floats(size_t(n), 4);
    std::vector<float> want_copy(static_cast<size_t>(n)), want_add = buffer, want_write = buffer;
    ref::copy_strided<float>(int(v.shape.size()), v.shape.data(), buffer.data() + v.offset, v.strides.data(),
                             want_copy.data());
    ref::add_strided<float>(int(v.shape.size()), v.shape.data(), grad.data(), want_add.data() + v.offset,
                            v.strides.data());
    ref::write_strided<float>(int(v.shape.size()), v.shape.data(), grad.data(), want_write.data() + v.offset,
                              v.strides.data());
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(c.base, c.narrow_to, threads);
      std::vector<float> got_copy(size_t(n), -7.0f), got_add = buffer, got_write = buffer;
      k::copy_strided<float>(int(v.shape.size()), v.shape.data(), buffer.data() + v.offset, v.strides.data(),
                             got_copy.data());
      k::add_strided<float>(int(v.shape.size()), v.shape.data(), grad.data(), got_add.data() + v.offset,
                            v.strides.data());
      k::write_strided<float>(int(v.shape.size()), v.shape.data(), grad.data(), got_write.data() + v.offset,
                              v.strides.data());
      CHECK(got_copy == want_copy);
      CHECK(got_add == want_add);
      CHECK(got_write == want_write);  // the view's elements replaced, the rest of the buffer untouched
    }
  }
}
