// Batches by padded tokens (--batch-tokens): every example once per epoch, every batch within the
// budget, a pure function of (seed, step) whatever order the steps are asked in, and far less padding
// than the same budget filled in permutation order.
#include <catch2/catch.hpp>
#include <set>

#include "src/train/token_batches.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

std::vector<data::Example> mixed_lengths(int n) {
  std::vector<data::Example> out;
  Generator gen(3);
  for (int i = 0; i < n; ++i) {
    const int s = 1 + int(gen.next_u64() % 40), t = 1 + int(gen.next_u64() % 40);
    out.push_back({std::vector<int32_t>(size_t(s), 4), std::vector<int32_t>(size_t(t), 5)});
  }
  return out;
}

}  // namespace

TEST_CASE("token batches: each example once per epoch, each batch within the budget, little padding",
          "[train][batch-tokens]") {
  const auto examples = mixed_lengths(3000);
  const int64_t budget = 400;
  const train::TokenBatches plan(examples, budget, 9);
  for (int64_t epoch : {0, 1}) {
    const auto batches = plan.epoch_batches(epoch);
    std::multiset<int64_t> seen;
    double pad = 0, positions = 0;
    for (const auto& b : batches) {
      REQUIRE_FALSE(b.empty());
      int64_t longest = 0;
      std::vector<data::Example> ex;
      for (int64_t i : b) seen.insert(i), longest = std::max(longest, train::TokenBatches::cost(examples[size_t(i)])),
                          ex.push_back(examples[size_t(i)]);
      CHECK(int64_t(b.size()) * longest <= budget);
      const data::Batch batch = data::make_batch(ex);
      pad += batch.padding_fraction() * double(batch.src.numel() + batch.tgt_out.numel());
      positions += double(batch.src.numel() + batch.tgt_out.numel());
    }
    CHECK(seen.size() == examples.size());
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == examples.size());
    // Source and target lengths are independent here, so even sorted batches keep some padding; in
    // permutation order (no bucketing) it is about half.
    CHECK(pad / positions < 0.35);
  }
  CHECK(plan.epoch_batches(0) != plan.epoch_batches(1));
}

TEST_CASE("the token batch of a step is the same whichever steps were asked for before", "[train][batch-tokens]") {
  const auto examples = mixed_lengths(500);
  train::TokenBatches in_order(examples, 300, 2), jumping(examples, 300, 2);
  std::vector<std::vector<int64_t>> expected;
  for (int64_t s = 1; s <= 400; ++s) expected.push_back(in_order.batch(s));  // several epochs
  for (int64_t s : {397, 3, 250, 1, 399, 120})
    CHECK(jumping.batch(s) == expected[size_t(s - 1)]);
}
