// bleu-vs-length: the real-data version of Bahdanau et al. 2015's Figure 2. The vanilla GRU seq2seq, the
// attention GRU and the Transformer train on a TSV corpus (default data/bible-es-en) with one budget
// (the same steps and batch size), each at the learning rate a short sweep chose for it by validation
// loss, on at least two seeds; each run's greedy outputs on the test split are scored with corpus BLEU
// (score.hpp) per bin of source length in words. The verdicts are computed from the table: does the
// attention GRU stay above the vanilla GRU on the longest bin by more than the seeds' spread, and does
// the Transformer lead.
//
// Tokens: whitespace words for now (kTokens below); the switch to SentencePiece pieces, once that
// tokenizer is in the library, is that one line. BLEU is computed on the detokenised outputs against
// the test file's target text as written, so the figure does not depend on the tokens chosen. Not here:
// beam search (greedy outputs), significance tests.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "experiments/harness.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/score.hpp"

namespace tapegrad::experiment::detail {

namespace {

// How the corpus splits into tokens for training. Set to data::Tokenization::sentencepiece (with a
// vocabulary size in run_options below) when the SentencePiece tokenizer is available.
constexpr data::Tokenization kTokens = data::Tokenization::whitespace;

// Source-length bins in words (the last is open-ended): the default edges; bleu_vs_length merges a sparse
// last bin into the one before.
using Bins = std::vector<std::pair<int, int>>;
constexpr int kOpen = 1 << 30;
const Bins kDefaultBins = {{1, 10}, {11, 20}, {21, 30}, {31, 40}, {41, 50}, {51, kOpen}};
// A full run's longest bin needs enough pairs for its BLEU to mean something (corpus BLEU over a
// handful of sentences swings by many points); --quick keeps every bin.
constexpr int64_t kMinPairsInLastBin = 30;

std::string bin_name(const Bins& bins, size_t b) {
  return bins[b].second >= kOpen ? std::to_string(bins[b].first) + "+" : range_name(bins[b].first, bins[b].second);
}

size_t bin_of(const Bins& bins, int64_t words) {
  for (size_t b = 0; b < bins.size(); ++b)
    if (words >= bins[b].first && words <= bins[b].second) return b;
  return 0;  // an empty source (read_tsv refuses those)
}

int64_t word_count(const std::string& text) { return int64_t(data::tokenize(text, data::Tokenization::whitespace).size()); }

struct ModelArm {
  std::string name;
  models::ModelConfig config;
};

std::vector<ModelArm> model_arms(bool quick, int64_t max_len) {
  models::ModelConfig rnn = rnn_config(models::ModelKind::rnn, quick);
  models::ModelConfig attention = rnn_config(models::ModelKind::attention_rnn, quick);
  models::ModelConfig transformer = transformer_config(nn::PositionalKind::sinusoidal, quick);
  if (!quick) {  // a real vocabulary: wider embeddings and states than the synthetic tasks need
    for (auto* c : {&rnn, &attention}) c->d_model = 256, c->hidden = 256;
    transformer.d_model = 256, transformer.heads = 4, transformer.d_ff = 1024, transformer.layers = 3;
  }
  transformer.max_len = max_len;
  return {{"rnn", rnn}, {"attention-rnn", attention}, {"transformer", transformer}};
}

train::TrainOptions tsv_options(const models::ModelConfig& model, const std::string& dir, int64_t steps,
                                int64_t batch_size, double lr, uint64_t seed, int threads) {
  train::TrainOptions o = run_options(model, train::TrainOptions{}.task, {}, steps, batch_size, 200, lr, seed, threads);
  o.train = dir + "/train.tsv";
  o.valid = dir + "/valid.tsv";
  o.tokens = kTokens;
  return o;
}

// Teacher-forced mean cross-entropy per target token over the session's validation examples (what the
// sweep ranks by: cheaper than decoding, and smooth where BLEU on a short run is mostly noise).
double validation_loss(train::Session& s) {
  NoGrad no_grad;
  s.model->eval();
  double sum = 0;
  int64_t tokens = 0;
  constexpr size_t kBatch = 64;
  for (size_t start = 0; start < s.valid_examples.size(); start += kBatch) {
    const std::vector<data::Example> chunk(s.valid_examples.begin() + long(start),
                                           s.valid_examples.begin() + long(std::min(s.valid_examples.size(), start + kBatch)));
    const data::Batch b = data::make_batch(chunk);
    sum += s.model->loss(b).item() * double(b.target_tokens());
    tokens += b.target_tokens();
  }
  s.model->train();
  return tokens ? sum / double(tokens) : 0;
}

}  // namespace

Report bleu_vs_length(const Options& opts, const Callbacks& cb) {
  const std::string dir = opts.corpus.empty() ? "data/bible-es-en" : opts.corpus;
  for (const char* split : {"train", "valid", "test"})
    if (!std::filesystem::exists(dir + "/" + split + ".tsv"))
      throw Error("bleu-vs-length: no " + dir + "/" + split + ".tsv (build it with `tools/run corpus bible-es-en`, "
                  "or give --corpus DIR holding train.tsv, valid.tsv and test.tsv)");
  const data::TsvText test = data::read_tsv_text(dir + "/test.tsv");
  // Positions for the Transformer: the longest side in characters bounds its length in any tokens.
  int64_t longest = 0;
  for (const auto* split : {"train", "valid", "test"}) {
    const data::TsvText text = data::read_tsv_text(dir + "/" + split + ".tsv");
    for (const auto* side : {&text.src, &text.tgt})
      for (const std::string& s : *side) longest = std::max<int64_t>(longest, int64_t(s.size()));
  }
  const int64_t steps = opts.steps > 0 ? opts.steps : (opts.quick ? 30 : 6000);
  const int64_t batch_size = opts.quick ? 8 : 32;
  const int64_t sweep_steps = std::max<int64_t>(steps / 5, 1);
  const std::vector<double> lrs = opts.quick ? std::vector<double>{1e-3, 3e-3} : std::vector<double>{3e-4, 1e-3, 3e-3};
  Options seeded = opts;
  if (seeded.seeds == 0 && !opts.quick) seeded.seeds = 2;
  const std::vector<uint64_t> seeds = seed_list(seeded);
  const std::vector<ModelArm> arms = model_arms(opts.quick, longest + 2);

  // The bins: the default edges, the open last bin merged into the one before while it holds fewer
  // than kMinPairsInLastBin test pairs (so "41+" rather than a "51+" of 14 verses).
  Bins bins = kDefaultBins;
  std::vector<int64_t> pairs_in_bin;
  for (;;) {
    pairs_in_bin.assign(bins.size(), 0);
    for (const std::string& src : test.src) ++pairs_in_bin[bin_of(bins, word_count(src))];
    if (opts.quick || bins.size() <= 2 || pairs_in_bin.back() >= kMinPairsInLastBin) break;  // two bins at least
    bins.pop_back();
    bins.back().second = kOpen;
  }

  const int total_runs = int(arms.size() * (lrs.size() + seeds.size()));
  int index = 0;
  // The sweep: every learning rate on a short run of the first seed, ranked by validation loss.
  Table sweep;
  sweep.columns = {"model", "lr", "steps", "valid_loss"};
  std::map<std::string, double> chosen_lr;
  for (const ModelArm& arm : arms) {
    double best = INFINITY;
    for (double lr : lrs) {
      const std::string what = arm.name + " lr " + fmt_sig(lr, 2) + " (sweep)";
      Trained t = train_logged(tsv_options(arm.config, dir, sweep_steps, batch_size, lr, seeds[0], opts.threads),
                               what, ++index, total_runs, cb);
      const double loss = validation_loss(t.session);
      sweep.add({arm.name, fmt_sig(lr, 2), std::to_string(sweep_steps), fmt(loss, 4)});
      if (loss < best) best = loss, chosen_lr[arm.name] = lr;
    }
  }

  Report report;
  report.name = "bleu-vs-length";
  report.table.columns = {"experiment", "model", "seed", "lr", "bin", "pairs", "bleu", "test_bleu", "test_chrf"};
  report.aggregate.columns = {"model", "bin", "pairs", "bleu"};
  // bleu[model][bin] over seeds; overall[model] over seeds.
  std::map<std::string, std::vector<std::vector<double>>> bleu;
  std::map<std::string, std::vector<double>> overall;
  for (const ModelArm& arm : arms) {
    bleu[arm.name].assign(bins.size(), {});
    for (uint64_t seed : seeds) {
      const double lr = chosen_lr[arm.name];
      const std::string what = arm.name + " seed " + std::to_string(seed) + " lr " + fmt_sig(lr, 2);
      Trained t = train_logged(tsv_options(arm.config, dir, steps, batch_size, lr, seed, opts.threads), what, ++index,
                               total_runs, cb);
      // The test split in the run's own tokens (SentencePiece: the model trained on its training split).
      const data::Tokenizer& tokenizer = *t.session.tokenizer;
      const std::vector<data::Example> examples =
          data::encode_pairs(data::tokenize_tsv(test, tokenizer, dir + "/test.tsv"), t.session.vocab);
      int64_t decode_len = t.session.options.decode_max_len;  // training's: longest train/valid target + 8
      for (const auto& e : examples) decode_len = std::max<int64_t>(decode_len, int64_t(e.tgt.size()) + 8);
      const train::EvalResult r = train::evaluate(*t.session.model, t.session.vocab, tokenizer, examples, 64, decode_len, 0);
      const std::vector<std::string>& refs = test.tgt;
      const double all = data::corpus_bleu(r.outputs, {refs}).score;
      const double chrf = data::corpus_chrf(r.outputs, {refs}).score;
      overall[arm.name].push_back(all);
      for (size_t b = 0; b < bins.size(); ++b) {
        std::vector<std::string> hyp_bin, ref_bin;
        for (size_t i = 0; i < test.src.size(); ++i)
          if (bin_of(bins, word_count(test.src[i])) == b) hyp_bin.push_back(r.outputs[i]), ref_bin.push_back(refs[i]);
        if (hyp_bin.empty()) continue;
        const double score = data::corpus_bleu(hyp_bin, {ref_bin}).score;
        bleu[arm.name][b].push_back(score);
        report.table.add({"bleu-vs-length", arm.name, std::to_string(seed), fmt_sig(lr, 2), bin_name(bins, b), std::to_string(pairs_in_bin[b]),
                          fmt(score, 2), fmt(all, 2), fmt(chrf, 2)});
      }
      if (cb.log) cb.log("  " + what + ": test BLEU " + fmt(all, 2) + ", chrF2 " + fmt(chrf, 2));
    }
  }

  Figure fig = line_figure("bleu_vs_length.png", "Test BLEU by source length (mean of " + std::to_string(seeds.size()) +
                           " seed(s), bars min-max)", "source length (words; bin midpoint)", "BLEU");
  size_t longest_bin = 0;
  for (size_t b = 0; b < bins.size(); ++b)
    if (pairs_in_bin[b] > 0) longest_bin = b;
  for (const ModelArm& arm : arms) {
    Series s;
    s.label = arm.name;
    for (size_t b = 0; b < bins.size(); ++b) {
      if (bleu[arm.name][b].empty()) continue;
      const Spread sp = spread(bleu[arm.name][b]);
      report.aggregate.add({arm.name, bin_name(bins, b), std::to_string(pairs_in_bin[b]), fmt_spread(sp, 2)});
      s.x.push_back(b + 1 < bins.size() ? 0.5 * (bins[b].first + bins[b].second) : bins[b].first + 4.5);
      s.y.push_back(sp.mean), s.y_lo.push_back(sp.min), s.y_hi.push_back(sp.max);
    }
    fig.series.push_back(std::move(s));
  }
  report.figures.push_back(std::move(fig));

  // The verdicts, from the figures above.
  const Spread vanilla = spread(bleu["rnn"][longest_bin]), attention = spread(bleu["attention-rnn"][longest_bin]);
  const double seed_spread = std::max(vanilla.max - vanilla.min, attention.max - attention.min);
  const double margin = attention.mean - vanilla.mean;
  report.summary.push_back("attention-rnn vs rnn on the longest bin (" + bin_name(bins, longest_bin) + ", " +
                           std::to_string(pairs_in_bin[longest_bin]) + " pairs): BLEU " + fmt(attention.mean, 2) +
                           " vs " + fmt(vanilla.mean, 2) + ", margin " + fmt(margin, 2) + " against the seeds' spread " +
                           fmt(seed_spread, 2) + ": " +
                           (margin > seed_spread ? "holds (attention above by more than the spread)" : "does not hold"));
  std::string leader;
  double best_overall = -1;
  for (const ModelArm& arm : arms)
    if (const double m = spread(overall[arm.name]).mean; m > best_overall) best_overall = m, leader = arm.name;
  const Spread tr = spread(overall["transformer"]), tr_long = spread(bleu["transformer"][longest_bin]);
  report.summary.push_back(
      "transformer " + std::string(leader == "transformer" ? "leads" : "does not lead") + " on the whole test set: BLEU " +
      fmt_spread(tr, 2) + " (best: " + leader + " " + fmt(best_overall, 2) + "); on the longest bin " +
      fmt(tr_long.mean, 2) + " vs attention-rnn " + fmt(attention.mean, 2));
  std::string lr_line = "learning rates chosen by validation loss after " + std::to_string(sweep_steps) + " steps:";
  for (const ModelArm& arm : arms) lr_line += " " + arm.name + " " + fmt_sig(chosen_lr[arm.name], 2) + ";";
  report.summary.push_back(lr_line + " every run " + std::to_string(steps) + " steps of batch " +
                           std::to_string(batch_size) + ", " + data::tokenization_name(kTokens) + " tokens");
  report.sections.push_back("Learning-rate sweep (first seed, validation loss per target token):\n\n" +
                            sweep.to_markdown({}));
  return report;
}

}  // namespace tapegrad::experiment::detail
