// Batched matmul over batch dims that do not merge: attention's q [B,H,T,d] as a view of a [B,T,3C]
// projection (strides T*3C and d for B and H). The longest dim is the batched one whichever it is;
// the result must be bitwise the one of the same product on contiguous copies (where [B,H] merges
// into one batch), at 1 and 2 threads, forward and backward.
#include <catch2/catch.hpp>
#include <vector>

#include "tapegrad/runtime.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

TEST_CASE("matmul over unmergeable batch dims equals the contiguous product, bitwise", "[ops][matmul]") {
  const int threads_before = runtime::num_threads();
  Generator gen(3);
  // B x H: many sequences and few heads (the Transformer's), and the other way round.
  const auto [B, H] = GENERATE(table<int64_t, int64_t>({{64, 4}, {3, 9}}));
  const int64_t T = 17, d = 8, C = H * d;
  const Tensor qkv0 = Tensor::randn({B, T, 3 * C}, gen), dy = Tensor::randn({B, H, T, T}, gen);
  auto run = [&](bool contiguous, int threads) {
    runtime::set_num_threads(threads);
    const Tensor qkv = qkv0.clone().requires_grad_();
    Tensor q = narrow(qkv, 2, 0, C).reshape({B, T, H, d}).permute({0, 2, 1, 3});   // [B,H,T,d]
    Tensor kt = narrow(qkv, 2, C, C).reshape({B, T, H, d}).permute({0, 2, 3, 1});  // [B,H,d,T]
    if (contiguous) q = q.contiguous(), kt = kt.contiguous();
    const Tensor s = matmul(q, kt);
    backward(s, dy);
    return std::vector<std::vector<double>>{s.detach().to_vector(), qkv.grad().to_vector()};
  };
  const auto want = run(true, 1);
  for (int threads : {1, 2}) {
    CAPTURE(B, H, threads);
    CHECK(run(false, threads) == want);
    CHECK(run(true, threads) == want);
  }
  runtime::set_num_threads(threads_before);
}
