// Beam search's length penalty (Seq2Seq::beam_search): on a model whose next-token distribution is
// written by hand, alpha decides between a short and a long hypothesis exactly as the documented score
// log P(y) / max(|y|, 1)^alpha says.
#include <catch2/catch.hpp>
#include <cmath>

#include "tapegrad/tapegrad.hpp"
#include "tapegrad/models/seq2seq.hpp"

using namespace tapegrad;

namespace {

constexpr int32_t kA = 4, kB = 5;  // the two real tokens after the four specials
constexpr int64_t kV = 6;

// Next-token probabilities that depend only on how many tokens the prefix has after <bos>:
//   0 tokens: <eos> 0.4, A 0.6       (the short hypothesis "" has log P = log 0.4)
//   1-2:      A 0.5, B 0.45, <eos> 0.01
//   3:        <eos> 0.99             (the long one, e.g. "A A A", has log P = log 0.6 + 2 log 0.5 + log 0.99)
// The rest of each row gets 1e-6.
class ScriptedModel : public models::Seq2Seq {
 public:
  ScriptedModel() : Seq2Seq(config(), 1) {}
  Tensor next_token_log_probs(const std::vector<int32_t>&, const std::vector<std::vector<int32_t>>& prefixes) override {
    std::vector<double> lp;
    for (const auto& p : prefixes) {
      std::vector<double> row(kV, 1e-6);
      const size_t generated = p.size() - 1;
      if (generated == 0) row[data::kEos] = 0.4, row[kA] = 0.6;
      else if (generated < 3) row[kA] = 0.5, row[kB] = 0.45, row[data::kEos] = 0.01;
      else row[data::kEos] = 0.99;
      for (double x : row) lp.push_back(std::log(x));
    }
    return Tensor::from_vector(lp, {int64_t(prefixes.size()), kV}, DType::f64);
  }
  Tensor logits(const data::Batch&) override { throw Error("not used"); }
  Tensor encoder_states(const Tensor&, const std::vector<int64_t>&) override { throw Error("not used"); }
  std::vector<std::vector<int32_t>> greedy_decode(const Tensor&, const std::vector<int64_t>&, int64_t) override {
    throw Error("not used");
  }
  void keep_attention(bool) override {}
  std::vector<std::pair<std::string, Tensor>> attention_head_maps() const override { return {}; }

 private:
  static models::ModelConfig config() {
    models::ModelConfig c;
    c.vocab_size = kV;
    return c;
  }
};

}  // namespace

TEST_CASE("the length penalty alpha moves beam search from the short to the long hypothesis", "[models][beam]") {
  ScriptedModel m;
  // alpha 0: raw log-probability, log 0.4 = -0.92 beats -1.91: the empty output.
  CHECK(m.beam_search({kA}, 2, 10, 0.0).empty());
  // alpha 1: -1.91 / 4 = -0.48 beats -0.92 / 1: three tokens.
  CHECK(m.beam_search({kA}, 2, 10, 1.0).size() == 3);
  // The default 0.6: 4^0.6 = 2.30, -1.91 / 2.30 = -0.83 still beats -0.92.
  CHECK(m.beam_search({kA}, 2, 10).size() == 3);
  // Where the two scores cross: log P_long / 4^alpha = log P_short.
  const double long_logp = std::log(0.6) + 2 * std::log(0.5) + std::log(0.99), short_logp = std::log(0.4);
  const double crossing = std::log(long_logp / short_logp) / std::log(4.0);
  CHECK(m.beam_search({kA}, 2, 10, crossing - 0.01).empty());
  CHECK(m.beam_search({kA}, 2, 10, crossing + 0.01).size() == 3);
}
