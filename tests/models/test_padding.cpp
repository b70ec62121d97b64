// Padding is invisible: a padded, length-bucketed batch gives the same loss and gradients (float64) as
// its sequences run one at a time, weighted by their target tokens. This is what makes --batch-tokens
// (batches of mixed lengths, padded to the longest) train the same model as unpadded data would.
#include <catch2/catch.hpp>

#include "model_fixtures.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

// Every parameter's gradient after backward of model.loss(batch), in parameter order.
std::vector<std::vector<double>> gradients(models::Seq2Seq& model, const data::Batch& batch, double* loss) {
  model.zero_grad();
  const Tensor l = model.loss(batch);
  backward(l);
  *loss = l.item();
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.grad().defined() ? p.grad().to_vector() : std::vector<double>(size_t(p.numel()), 0.0));
  return out;
}

}  // namespace

TEST_CASE("a padded batch gives the loss and gradients of its sequences one at a time, token-weighted",
          "[models][padding]") {
  // Lengths differ on both sides, so every sequence but the longest is padded in source and target.
  const std::vector<data::Example> examples = {
      {{4, 5, 6, 7, 8, 9, 4}, {9, 8, 7, 6, 5, 4, 5, 6}}, {{5, 6}, {6}}, {{7, 8, 9, 4}, {4, 9}}, {{6}, {6, 7, 8, 4, 5}}};
  for (const auto kind : {models::ModelKind::transformer, models::ModelKind::attention_rnn}) {
    CAPTURE(models::model_name(kind));
    models::ModelConfig c = test::tiny(kind, 10);
    c.d_model = 8, c.d_ff = 16, c.hidden = 8, c.heads = 2;
    if (kind == models::ModelKind::attention_rnn) c.cell = nn::CellKind::gru;
    auto model = models::make_model(c, 5);
    model->to(DType::f64);
    const data::Batch padded = data::make_batch(examples);
    REQUIRE(padded.padding_fraction() > 0.3);
    double batch_loss = 0;
    const auto batch_grads = gradients(*model, padded, &batch_loss);
    double weighted_loss = 0;
    std::vector<std::vector<double>> weighted(batch_grads.size());
    const double total = double(padded.target_tokens());
    for (const auto& e : examples) {
      double loss = 0;
      const data::Batch one = data::make_batch({e});
      const double w = double(one.target_tokens()) / total;
      const auto g = gradients(*model, one, &loss);
      weighted_loss += w * loss;
      for (size_t p = 0; p < g.size(); ++p) {
        weighted[p].resize(g[p].size());
        for (size_t k = 0; k < g[p].size(); ++k) weighted[p][k] += w * g[p][k];
      }
    }
    CHECK(batch_loss == Approx(weighted_loss).epsilon(1e-12));
    double worst = 0, largest = 0;
    for (size_t p = 0; p < weighted.size(); ++p)
      for (size_t k = 0; k < weighted[p].size(); ++k) {
        worst = std::max(worst, std::abs(batch_grads[p][k] - weighted[p][k]));
        largest = std::max(largest, std::abs(weighted[p][k]));
      }
    CAPTURE(worst, largest);
    CHECK(largest > 1e-3);
    CHECK(worst <= 1e-12 * largest);
  }
}
