// The positional experiment's exact part: a Transformer encoder without positional encoding is
// permutation-equivariant (permuting the source permutes the encoder's output vectors the same way), so
// "I love cats" and "cats love I" give it the same set of vectors; with sinusoidal or learned positions
// they differ. Measured in float64 on the encoder of models::make_model (any weights have the property;
// a briefly trained model is checked too), with numbers rather than training runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "experiments/harness.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment::detail {

namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// The encoder's output vectors for one source, rows of C doubles.
std::vector<std::vector<double>> encode_rows(models::Seq2Seq& model, const std::vector<int32_t>& src) {
  NoGrad no_grad;
  const int64_t S = int64_t(src.size());
  const Tensor out = model.encoder_states(Tensor::from_ids(src, {1, S}), {S}).contiguous();  // [1, S, C]
  const std::vector<double> v = out.to_vector();
  const int64_t C = out.size(2);
  std::vector<std::vector<double>> rows;
  for (int64_t s = 0; s < S; ++s) rows.emplace_back(v.begin() + s * C, v.begin() + (s + 1) * C);
  return rows;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Hausdorff distance (max-abs norm) between two sets of vectors: 0 exactly when every vector of one set
// is also in the other.
double set_distance(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  auto one_way = [](const auto& from, const auto& to) {
    double worst = 0;
    for (const auto& x : from) {
      double nearest = INFINITY;
      for (const auto& y : to) nearest = std::min(nearest, max_abs_diff(x, y));
      worst = std::max(worst, nearest);
    }
    return worst;
  };
  return std::max(one_way(a, b), one_way(b, a));
}

// The model in float64 and eval mode (no dropout), as the measurement needs.
void prepare(models::Seq2Seq& model) {
  model.to(DType::f64);
  model.eval();
}

}  // namespace

EquivarianceCheck permutation_check(models::Seq2Seq& model, const std::vector<int32_t>& src,
                                    const std::vector<int64_t>& perm) {
  if (perm.size() != src.size())
    throw Error("permutation check: permutation of " + std::to_string(perm.size()) +
                " positions for a source of " + std::to_string(src.size()));
  std::vector<int32_t> permuted(src.size());
  for (size_t i = 0; i < src.size(); ++i) permuted[i] = src[size_t(perm[i])];
  const auto out = encode_rows(model, src), out_permuted = encode_rows(model, permuted);
  EquivarianceCheck c;
  for (size_t i = 0; i < src.size(); ++i) {
    // equivariance: encoder(x[perm])[i] == encoder(x)[perm[i]]
    c.max_diff = std::max(c.max_diff, max_abs_diff(out_permuted[i], out[size_t(perm[i])]));
    for (double v : out[i]) c.scale = std::max(c.scale, std::abs(v));
  }
  return c;
}

double sentence_set_distance(models::Seq2Seq& model, const data::Vocab& vocab, const std::string& a,
                             const std::string& b) {
  const auto ids = [&](const std::string& s) {
    return vocab.encode(data::tokenize(s, data::Tokenization::whitespace));
  };
  return set_distance(encode_rows(model, ids(a)), encode_rows(model, ids(b)));
}

std::vector<EquivarianceRow> permutation_equivariance(const std::vector<uint64_t>& seeds, bool quick,
                                                      int64_t trained_steps, int threads) {
  const std::string sentence = "I love cats", swapped = "cats love I";
  const data::Vocab words = data::Vocab::build({data::tokenize(sentence, data::Tokenization::whitespace)});
  // Random sources of one length from the reverse task (the task the trained check learns, at lengths up
  // to that one).
  const int length = quick ? 6 : 12;
  const data::TaskOptions train_options{quick ? 3 : 6, length, 10}, source_options{length, length, 10};
  const auto task = data::make_task("reverse", source_options);
  std::vector<EquivarianceRow> rows;
  for (const auto kind :
       {nn::PositionalKind::none, nn::PositionalKind::sinusoidal, nn::PositionalKind::learned}) {
    models::ModelConfig config = transformer_config(kind, quick);
    for (const uint64_t seed : seeds) {
      Generator gen(seed * 7919 + 17);
      const std::vector<int32_t> src = task->sample(gen).src;
      std::vector<int64_t> perm(static_cast<size_t>(length));
      std::iota(perm.begin(), perm.end(), 0);
      while (std::is_sorted(perm.begin(), perm.end())) gen.shuffle(perm);  // redrawn if it moved nothing

      config.vocab_size = task->vocab().size();
      auto model = models::make_model(config, seed);
      prepare(*model);
      config.vocab_size = words.size();
      auto word_model = models::make_model(config, seed);
      prepare(*word_model);
      EquivarianceRow row{seed, kind, 0, permutation_check(*model, src, perm), 0};
      row.sentence_distance = sentence_set_distance(*word_model, words, sentence, swapped);
      rows.push_back(row);

      // A trained encoder, once per positional kind (first seed): weights away from their initial values.
      if (trained_steps > 0 && seed == seeds.front()) {
        const train::TrainOptions o = run_options(transformer_config(kind, quick), "reverse", train_options,
                                                  trained_steps, 16, trained_steps / 10, Recipe{}.lr, seed, threads);
        train::Session s = train::make_session(o);
        train::train(s, nullptr, nullptr);
        prepare(*s.model);
        rows.push_back({seed, kind, trained_steps, permutation_check(*s.model, src, perm), NAN});
      }
    }
  }
  return rows;
}

std::string equivariance_markdown(const std::vector<EquivarianceRow>& rows) {
  Table t{{"seed", "positional", "weights", "max abs diff enc(x[p]) vs enc(x)[p]", "max abs enc(x)",
           "set distance \"I love cats\" / \"cats love I\"", "equivariant (< 1e-5)"},
          {}};
  for (const auto& r : rows)
    t.add({std::to_string(r.seed), nn::positional_name(r.positional),
           r.trained_steps > 0 ? "trained " + std::to_string(r.trained_steps) + " steps" : "initial",
           sci(r.check.max_diff), fmt(r.check.scale, 2),
           std::isnan(r.sentence_distance) ? "-" : sci(r.sentence_distance),
           r.check.max_diff < kEquivarianceTolerance ? "yes" : "no"});
  return "### Permutation equivariance of the encoder (float64)\n\n"
         "Each row encodes a random source x and a permutation x[p] of it with the encoder of a Transformer "
         "(weights from the seed, or after a short training run on reverse) and compares the outputs "
         "permuted back; the sentence column is the largest distance from a vector of one sentence's output "
         "to the nearest vector of the other's (0: the same set of vectors).\n\n" +
         t.to_markdown({});
}

std::vector<std::string> equivariance_summary(const std::vector<EquivarianceRow>& rows) {
  std::vector<std::string> lines;
  for (const auto kind :
       {nn::PositionalKind::none, nn::PositionalKind::sinusoidal, nn::PositionalKind::learned}) {
    double lo = INFINITY, hi = 0, sentence_lo = INFINITY, sentence_hi = 0;
    for (const auto& r : rows)
      if (r.positional == kind) {
        lo = std::min(lo, r.check.max_diff), hi = std::max(hi, r.check.max_diff);
        if (!std::isnan(r.sentence_distance))
          sentence_lo = std::min(sentence_lo, r.sentence_distance),
          sentence_hi = std::max(sentence_hi, r.sentence_distance);
      }
    if (lo == INFINITY) continue;
    const bool none = kind == nn::PositionalKind::none;
    const bool as_expected = none ? hi < kEquivarianceTolerance : lo > kEquivarianceTolerance;
    lines.push_back(std::string("encoder, positional ") + nn::positional_name(kind) +
                    ": permuting the source " + (none ? "permutes" : "does not permute") +
                    " the outputs (max difference " + sci(lo) + " to " + sci(hi) +
                    " in float64; \"I love cats\" vs \"cats love I\" set distance " + sci(sentence_lo) +
                    " to " + sci(sentence_hi) + "): " + (as_expected ? "as expected" : "NOT as expected") +
                    " (threshold 1e-5)");
  }
  return lines;
}

}  // namespace tapegrad::experiment::detail
