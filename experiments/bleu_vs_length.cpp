// bleu-vs-length: the real-data version of Bahdanau et al. 2015's Figure 2. The vanilla GRU seq2seq, the
// attention GRU and the Transformer train on a TSV corpus (default data/bible-es-en) with one budget
// (the same steps of the same token batches, the same SentencePiece pieces), each at the learning rate
// a short sweep chose for it by validation loss, on at least two seeds; each run's greedy outputs on
// the test split are scored with corpus BLEU (score.hpp) per bin of source length in words. The
// verdicts are computed from the table: does the attention GRU stay above the vanilla GRU on the
// longest bin by more than the seeds' spread, and does the Transformer lead.
//
// The piece model is trained once, on the training split, and every run loads it (OUT/sentencepiece.model),
// so all runs see the same tokens and no run spends a minute retraining it. BLEU is computed on the
// detokenised outputs against the test file's target text as written, so the figure does not depend on
// the tokens chosen. Runs are independent trainings, so --jobs N trains N at once (2 jobs of 1 thread
// use 2 cores better than 1 job of 2: small GRU steps scale poorly). Not here: beam search (greedy
// outputs), significance tests.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <atomic>
#include <unistd.h>

#include "experiments/harness.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/score.hpp"

namespace tapegrad::experiment::detail {

namespace {

// The tokens and batches every run shares: one joint unigram SentencePiece model over both languages
// (as the README's Spanish-English Transformer uses) and batches of about kBatchTokens padded tokens,
// bucketed by length, so every model spends the same tokens per step.
constexpr int64_t kVocabSize = 4000, kQuickVocabSize = 24;  // quick: what a 10-word test corpus can reach
constexpr int64_t kBatchTokens = 4000, kQuickBatchTokens = 200;
// The regularisation every arm shares (a real corpus is seen a few times over in a full run).
constexpr double kDropout = 0.1, kLabelSmoothing = 0.1;

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
  if (!quick) {
    // A real vocabulary: wider embeddings and states than the synthetic tasks need. The Transformer is
    // the README's Spanish-English one (d 192, 4 heads, d_ff 768, 2 + 2 pre-LN layers, tied embeddings);
    // the GRUs are one layer of 256 over 256-wide embeddings. Their parameter counts are in the report.
    for (auto* c : {&rnn, &attention}) c->d_model = 256, c->hidden = 256;
    transformer.d_model = 192, transformer.heads = 4, transformer.d_ff = 768, transformer.layers = 2;
    transformer.norm_first = true, transformer.tie_embeddings = true;
    for (auto* c : {&rnn, &attention, &transformer}) c->dropout = kDropout;
  }
  transformer.max_len = max_len;
  return {{"rnn", rnn}, {"attention-rnn", attention}, {"transformer", transformer}};
}

train::TrainOptions tsv_options(const models::ModelConfig& model, const std::string& dir, const std::string& spm_model,
                                int64_t steps, bool quick, double lr, uint64_t seed, int threads) {
  train::TrainOptions o = run_options(model, train::TrainOptions{}.task, {}, steps, train::TrainOptions{}.batch_size, 200, lr, seed, threads);
  o.train = dir + "/train.tsv";
  o.valid = dir + "/valid.tsv";
  o.tokens = data::Tokenization::sentencepiece;
  o.spm_model = spm_model;
  o.batch_tokens = quick ? kQuickBatchTokens : kBatchTokens;
  o.label_smoothing = quick ? 0 : kLabelSmoothing;
  return o;
}

// The piece model every run loads: trained once on the training split's two sides (in file order, as a
// run trains its own) and written to `path`.
void train_piece_model(const data::TsvText& train, int64_t vocab_size, const std::string& path) {
  const auto spm = data::SentencePieceTokenizer::train(train.src, train.tgt, {vocab_size, data::SentencePieceType::unigram, false});
  io::write_file_atomic(path, spm->model(data::Side::source));
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
  std::map<std::string, data::TsvText> splits;  // each read once: the piece model, the bins, the scores
  for (const char* split : {"train", "valid", "test"}) splits[split] = data::read_tsv_text(dir + "/" + split + ".tsv");
  const data::TsvText& test = splits["test"];
  // Positions for the Transformer: the longest side in characters bounds its length in any tokens.
  int64_t longest = 0;
  for (const auto& [name, text] : splits)
    for (const auto* side : {&text.src, &text.tgt})
      for (const std::string& s : *side) longest = std::max<int64_t>(longest, int64_t(s.size()));
  const int64_t steps = opts.steps > 0 ? opts.steps : (opts.quick ? 30 : 800);
  const int64_t sweep_steps = std::max<int64_t>(steps / 5, 1);
  const std::vector<double> lrs = opts.quick ? std::vector<double>{1e-3, 3e-3} : std::vector<double>{3e-4, 1e-3, 3e-3};
  Options seeded = opts;
  if (seeded.seeds == 0 && !opts.quick) seeded.seeds = 2;
  const std::vector<uint64_t> seeds = seed_list(seeded);
  const std::vector<ModelArm> arms = model_arms(opts.quick, longest + 2);
  const Callbacks log = serialized(cb);

  // The piece model, once: in the output directory when there is one (the runs' tokens, kept).
  const std::filesystem::path piece_dir =
      opts.out_dir.empty() ? std::filesystem::temp_directory_path() / ("tapegrad-bleu-vs-length-" + std::to_string(::getpid()))
                           : std::filesystem::path(opts.out_dir);
  std::filesystem::create_directories(piece_dir);
  struct RemoveTemporary {  // without --out, the model is the experiment's alone: removed on every exit
    std::filesystem::path dir;
    ~RemoveTemporary() {
      std::error_code ignored;
      if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
    }
  } remove_temporary{opts.out_dir.empty() ? piece_dir : std::filesystem::path()};
  const std::string spm_model = (piece_dir / "sentencepiece.model").string();
  const int64_t vocab_size = opts.quick ? kQuickVocabSize : kVocabSize;
  if (log.log) log.log("SentencePiece: training a joint unigram model of " + std::to_string(vocab_size) + " pieces on " + dir + "/train.tsv");
  train_piece_model(splits["train"], vocab_size, spm_model);
  // The bins: the default edges, the open last bin merged into the one before while it holds fewer
  // than kMinPairsInLastBin test pairs (so "41+" rather than a "51+" of 14 verses).
  std::vector<int64_t> source_words;
  for (const std::string& src : test.src) source_words.push_back(word_count(src));
  Bins bins = kDefaultBins;
  std::vector<int64_t> pairs_in_bin;
  for (;;) {
    pairs_in_bin.assign(bins.size(), 0);
    for (int64_t words : source_words) ++pairs_in_bin[bin_of(bins, words)];
    if (opts.quick || bins.size() <= 2 || pairs_in_bin.back() >= kMinPairsInLastBin) break;  // two bins at least
    bins.pop_back();
    bins.back().second = kOpen;
  }

  const int total_runs = int(arms.size() * (lrs.size() + seeds.size()));
  std::atomic<int> index{0};
  // The sweep: every learning rate on a short run of the first seed, ranked by validation loss.
  struct SweepRun {
    const ModelArm* arm;
    double lr, valid_loss = 0;
  };
  std::vector<SweepRun> sweep_runs;
  for (const ModelArm& arm : arms)
    for (double lr : lrs) sweep_runs.push_back({&arm, lr, 0});
  run_jobs(sweep_runs.size(), opts.jobs, opts.threads, [&](size_t i) {
    SweepRun& run = sweep_runs[i];
    const std::string what = run.arm->name + " lr " + fmt_sig(run.lr, 2) + " (sweep)";
    Trained t = train_logged(tsv_options(run.arm->config, dir, spm_model, sweep_steps, opts.quick, run.lr, seeds[0], opts.threads),
                             what, ++index, total_runs, log);
    run.valid_loss = validation_loss(t.session);
  });
  Table sweep;
  sweep.columns = {"model", "lr", "steps", "valid_loss"};
  std::map<std::string, double> chosen_lr, best_loss;
  for (const SweepRun& run : sweep_runs) {
    sweep.add({run.arm->name, fmt_sig(run.lr, 2), std::to_string(sweep_steps), fmt(run.valid_loss, 4)});
    if (!best_loss.count(run.arm->name) || run.valid_loss < best_loss[run.arm->name])
      best_loss[run.arm->name] = run.valid_loss, chosen_lr[run.arm->name] = run.lr;
  }

  Report report;
  report.name = "bleu-vs-length";
  report.table.columns = {"experiment", "model", "seed", "lr", "bin", "pairs", "bleu", "test_bleu", "test_chrf"};
  report.aggregate.columns = {"model", "bin", "pairs", "bleu"};
  // bleu[model][bin] over seeds; overall[model] over seeds.
  std::map<std::string, std::vector<std::vector<double>>> bleu;
  std::map<std::string, std::vector<double>> overall;
  // The runs at the chosen rates, then their scores in a fixed order (the table does not depend on
  // which run finished first).
  struct FinalRun {
    const ModelArm* arm;
    uint64_t seed;
    int64_t parameters = 0;
    std::vector<std::string> outputs;  // greedy, detokenised, one per test pair
    double bleu = 0, chrf = 0;         // of the whole test set
  };
  std::vector<FinalRun> final_runs;
  for (const ModelArm& arm : arms)
    for (uint64_t seed : seeds) final_runs.push_back({&arm, seed, 0, {}, 0, 0});
  run_jobs(final_runs.size(), opts.jobs, opts.threads, [&](size_t i) {
    FinalRun& run = final_runs[i];
    const double lr = chosen_lr[run.arm->name];
    const std::string what = run.arm->name + " seed " + std::to_string(run.seed) + " lr " + fmt_sig(lr, 2);
    Trained t = train_logged(tsv_options(run.arm->config, dir, spm_model, steps, opts.quick, lr, run.seed, opts.threads),
                             what, ++index, total_runs, log);
    const data::Tokenizer& tokenizer = *t.session.tokenizer;
    const std::vector<data::Example> examples =
        data::encode_pairs(data::tokenize_tsv(test, tokenizer, dir + "/test.tsv"), t.session.vocab);
    int64_t decode_len = t.session.options.decode_max_len;  // training's: longest train/valid target + 8
    for (const auto& e : examples) decode_len = std::max<int64_t>(decode_len, int64_t(e.tgt.size()) + 8);
    run.outputs = train::evaluate(*t.session.model, t.session.vocab, tokenizer, examples, 64, decode_len, 0).outputs;
    run.parameters = t.session.model->parameter_count();
    run.bleu = data::corpus_bleu(run.outputs, {test.tgt}).score;
    run.chrf = data::corpus_chrf(run.outputs, {test.tgt}).score;
    if (log.log) log.log("  " + what + ": test BLEU " + fmt(run.bleu, 2) + ", chrF2 " + fmt(run.chrf, 2));
  });
  std::map<std::string, int64_t> parameters;
  for (const ModelArm& arm : arms) bleu[arm.name].assign(bins.size(), {});
  for (const FinalRun& run : final_runs) {
    const std::string& name = run.arm->name;
    parameters[name] = run.parameters;
    const std::vector<std::string>& refs = test.tgt;
    overall[name].push_back(run.bleu);
    for (size_t b = 0; b < bins.size(); ++b) {
      std::vector<std::string> hyp_bin, ref_bin;
      for (size_t i = 0; i < test.src.size(); ++i)
        if (bin_of(bins, source_words[i]) == b) hyp_bin.push_back(run.outputs[i]), ref_bin.push_back(refs[i]);
      if (hyp_bin.empty()) continue;
      const double score = data::corpus_bleu(hyp_bin, {ref_bin}).score;
      bleu[name][b].push_back(score);
      report.table.add({"bleu-vs-length", name, std::to_string(run.seed), fmt_sig(chosen_lr[name], 2), bin_name(bins, b),
                        std::to_string(pairs_in_bin[b]), fmt(score, 2), fmt(run.bleu, 2), fmt(run.chrf, 2)});
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
  for (const ModelArm& arm : arms)
    lr_line += " " + arm.name + " " + fmt_sig(chosen_lr[arm.name], 2) + " (" + std::to_string(parameters[arm.name]) + " parameters);";
  report.summary.push_back(lr_line + " every run " + std::to_string(steps) + " steps of about " +
                           std::to_string(opts.quick ? kQuickBatchTokens : kBatchTokens) + " padded tokens, " +
                           std::to_string(vocab_size) + " SentencePiece pieces (joint unigram)");
  report.sections.push_back("Learning-rate sweep (first seed, validation loss per target token):\n\n" +
                            sweep.to_markdown({}));
  return report;
}

}  // namespace tapegrad::experiment::detail
