// The positional experiment's exact check (src/train/experiments/equivariance.cpp): a Transformer encoder
// without positional encoding is permutation-equivariant in float64, and "I love cats" / "cats love I" give
// it the same set of vectors; sinusoidal and learned positions break both by far more than the tolerance.
#include <catch2/catch.hpp>
#include <numeric>

#include "experiments/harness.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;
namespace ex = tapegrad::experiment::detail;

namespace {

std::unique_ptr<models::Seq2Seq> encoder_model(nn::PositionalKind pos, bool norm_first, int64_t vocab,
                                               uint64_t seed) {
  models::ModelConfig c = ex::transformer_config(pos, /*quick=*/true);
  c.vocab_size = vocab;
  c.layers = 2;
  c.norm_first = norm_first;
  auto model = models::make_model(c, seed);
  model->to(DType::f64);
  model->eval();
  return model;
}

}  // namespace

TEST_CASE("encoder without positions is permutation-equivariant, with positions it is not",
          "[models][equivariance]") {
  const auto pos =
      GENERATE(nn::PositionalKind::none, nn::PositionalKind::sinusoidal, nn::PositionalKind::learned);
  const bool norm_first = GENERATE(false, true);
  const uint64_t seed = GENERATE(3, 4);
  CAPTURE(nn::positional_name(pos), norm_first, seed);
  auto model = encoder_model(pos, norm_first, 14, seed);
  const std::vector<int32_t> src = {4, 9, 5, 13, 7, 4, 11};  // a repeated token too
  const std::vector<int64_t> perm = {3, 0, 6, 1, 5, 2, 4};
  const ex::EquivarianceCheck c = ex::permutation_check(*model, src, perm);
  CAPTURE(c.max_diff, c.scale);
  CHECK(c.scale > 0.1);  // the outputs are not all zero
  if (pos == nn::PositionalKind::none)
    CHECK(c.max_diff < ex::kEquivarianceTolerance);
  else
    CHECK(c.max_diff > 1000 * ex::kEquivarianceTolerance);

  const data::Vocab words = data::Vocab::build({{"I", "love", "cats"}});
  auto word_model = encoder_model(pos, norm_first, words.size(), seed);
  const double d = ex::sentence_set_distance(*word_model, words, "I love cats", "cats love I");
  CAPTURE(d);
  if (pos == nn::PositionalKind::none)
    CHECK(d < ex::kEquivarianceTolerance);
  else
    CHECK(d > 1000 * ex::kEquivarianceTolerance);
  // A sentence with a different word is a different set even without positions.
  CHECK(ex::sentence_set_distance(*word_model, words, "I love cats", "I love I") >
        1000 * ex::kEquivarianceTolerance);
}

TEST_CASE("permutation check refuses a permutation of the wrong length", "[models][equivariance]") {
  auto model = encoder_model(nn::PositionalKind::none, false, 10, 1);
  CHECK_THROWS_AS(ex::permutation_check(*model, {4, 5, 6}, {1, 0}), Error);
}

TEST_CASE("permutation_equivariance: one row per kind and seed, plus a trained row per kind",
          "[models][equivariance]") {
  const auto rows = ex::permutation_equivariance({5, 6}, /*quick=*/true, /*trained_steps=*/5, /*threads=*/1);
  REQUIRE(rows.size() == 3 * 2 + 3);
  int trained = 0;
  for (const auto& r : rows) {
    CAPTURE(nn::positional_name(r.positional), r.seed, r.trained_steps);
    trained += r.trained_steps > 0;
    if (r.positional == nn::PositionalKind::none)
      CHECK(r.check.max_diff < ex::kEquivarianceTolerance);
    else
      CHECK(r.check.max_diff > 1000 * ex::kEquivarianceTolerance);
  }
  CHECK(trained == 3);
  const auto summary = ex::equivariance_summary(rows);
  REQUIRE(summary.size() == 3);
  for (const auto& line : summary)
    CHECK_THAT(line, Catch::EndsWith("as expected (threshold 1e-5)") && !Catch::Contains("NOT"));
  CHECK_THAT(ex::equivariance_markdown(rows), Catch::Contains("| 5 | none | initial |"));
}
