// The experiments behind `tapegrad experiment` (see experiment.hpp): their names and descriptions,
// option checks, the dispatch that runs one and writes its results.csv and report.txt, and the model
// sizes the experiments share. Sizes are chosen so that a default run takes a few minutes on 2 cores and
// a --quick run seconds.
#include <filesystem>

#include "experiments/harness.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment {

namespace {
const std::vector<std::string> kNames = {"bottleneck", "long-range", "positional", "parallelism",
                                         "gradient-path",
                                         "attention-maps", "bleu-vs-length"};
}  // namespace

namespace detail {

models::ModelConfig rnn_config(models::ModelKind kind, bool quick) {
  models::ModelConfig c;
  c.kind = kind;
  c.cell = nn::CellKind::gru;
  c.d_model = quick ? 32 : 64;
  c.hidden = quick ? 32 : 128;
  c.layers = 1;
  c.dropout = 0;
  return c;
}

models::ModelConfig transformer_config(nn::PositionalKind positional, bool quick) {
  models::ModelConfig c;
  c.kind = models::ModelKind::transformer;
  c.positional = positional;
  c.d_model = quick ? 32 : 64;
  c.heads = quick ? 2 : 4;
  c.d_ff = quick ? 64 : 256;
  c.layers = quick ? 1 : 2;
  c.dropout = 0;
  c.max_len = 64;  // longest source or decoded output here is 42; learned positions stay comparable in size
  return c;
}

std::string arm_label(const models::ModelConfig& c) {
  if (c.kind == models::ModelKind::transformer)
    return std::string("transformer-") + nn::positional_name(c.positional);
  return std::string(models::model_name(c.kind)) + "-" + nn::cell_name(c.cell);
}

}  // namespace detail

std::vector<std::string> names() {
  return kNames;
}

std::string description(const std::string& name) {
  if (name == "bottleneck")
    return "vanilla GRU seq2seq vs attention GRU on copy and reverse, trained on lengths 4-32 and scored per "
           "length bin (4-8, 12-16, 20-24, 28-32): the vanilla decoder sees the source only through the "
           "encoder's "
           "final state, so its accuracy should fall as sources grow; with attention it should not (default "
           "1500 "
           "steps per arm)";
  if (name == "long-range")
    return "the recall task (key-value pairs, then '?key'; the answer may sit far back) at lengths 6-34, "
           "scored "
           "per bin: vanilla rnn vs attention-rnn vs transformer; the vanilla state must carry every pair "
           "(default 3000 steps "
           "per arm)";
  if (name == "positional")
    return "Transformer with sinusoidal, learned and no positional encoding on reverse (order matters: "
           "without "
           "positions it must fail) and sort (a control: the answer ignores the source order), lengths 8-16 "
           "(default 1000 steps per arm)";
  if (name == "parallelism")
    return "training-step time (forward + backward + update) and tokens/s at lengths 16, 32, 64, 128, "
           "256 for an attention GRU and a Transformer of similar size, at 1 and --threads threads, once "
           "per seed, beside each model's critical path (the longest chain of dependent tape entries in one "
           "step), its work (forward + backward FLOPs) and parallel width (work per dependent level), which "
           "measure the claim independently of this machine's cores: the RNN's path grows with the length, "
           "the Transformer's does not (batch 32; median of 10 timed steps after 3 warm-up steps up to "
           "length 64, of 5 and 3 timed steps after 1 warm-up step at 128 and 256)";
  if (name == "gradient-path")
    return "after training a vanilla GRU, an attention GRU and a Transformer on reverse (lengths 4-16, 1000 "
           "steps each), the norm of the gradient of each output token's log-probability log p(y_j) with "
           "respect to the source embedding it must reproduce (position i = 15 - j of a 16-token source), "
           "against their distance d = (encoder steps after i) + (decoder steps before j) + 1 = 2j + 1 "
           "(also divided by the gradient at that output's logits, and before training): it should decay for "
           "the vanilla GRU and not for the attention models; then the critical path of one "
           "training step (the longest chain of dependent tape entries), its work and parallel width against "
           "the source length (8, 16, 32, 64): it should grow for the RNNs and stay constant for the "
           "Transformer";
  if (name == "attention-maps")
    return "a Transformer (sinusoidal) and an attention GRU trained on reverse (lengths 8-16, default 1000 "
           "steps per arm and seed): the fraction of the last decoder layer's cross-attention mass (heads "
           "averaged) and of the GRU's alignment on the expected source position (output j <- source S-1-j), "
           "teacher-forced on held-out examples, with one example's map per arm as a heatmap";
  if (name == "bleu-vs-length")
    return "the vanilla GRU, the attention GRU and the Transformer trained on a TSV corpus (--corpus DIR with "
           "train.tsv, valid.tsv, test.tsv; default data/bible-es-en) with one budget (default 800 steps of "
           "about 4000 padded tokens over one 4000-piece SentencePiece model, trained once), each at the learning rate (3e-4, 1e-3, 3e-3) with the lowest "
           "validation loss after a fifth of the steps, two seeds; test BLEU (13a, as sacreBLEU) per source "
           "length in words (1-10, ..., 41-50, 51+): Bahdanau et al. 2015's Figure 2 on real data (the "
           "vanilla decoder should fall with length, attention should hold)";
  std::string valid;
  for (const auto& n : kNames) valid += (valid.empty() ? "" : ", ") + n;
  throw Error("experiment: unknown '" + name + "' (expected one of " + valid + ")");
}

void validate(const std::string& name, const Options& o) {
  description(name);
  if (o.steps < 0) throw Error("experiment: --steps must be positive, got " + std::to_string(o.steps));
  if (o.seeds < 0) throw Error("experiment: --seeds must be positive, got " + std::to_string(o.seeds));
  if (o.threads < 0) throw Error("experiment: --threads must be positive, got " + std::to_string(o.threads));
  if (o.jobs < 1) throw Error("experiment: --jobs must be positive, got " + std::to_string(o.jobs));
  // Only where a run's result is a function of its options: timings would measure the runs beside them.
  if (o.jobs > 1 && name != "bleu-vs-length")
    throw Error("experiment " + name + ": --jobs applies to bleu-vs-length only (its runs are independent "
                "trainings scored by BLEU; the others run in order)");
}

Report run(const std::string& name, const Options& opts, const Callbacks& cb) {
  validate(name, opts);
  if (!opts.out_dir.empty()) std::filesystem::create_directories(opts.out_dir);
  Report r = name == "bottleneck"       ? detail::bottleneck(opts, cb)
             : name == "long-range"     ? detail::long_range(opts, cb)
             : name == "positional"     ? detail::positional(opts, cb)
             : name == "gradient-path"  ? detail::gradient_path(opts, cb)
             : name == "attention-maps" ? detail::attention_maps(opts, cb)
             : name == "bleu-vs-length" ? detail::bleu_vs_length(opts, cb)
                                        : detail::parallelism(opts, cb);
  if (!opts.out_dir.empty()) {
    detail::write_file(opts.out_dir + "/results.csv", r.table.to_csv());
    detail::write_file(opts.out_dir + "/report.txt", "experiment " + name + "\n" + r.to_text());
    detail::write_file(opts.out_dir + "/report.md", r.to_markdown());
  }
  return r;
}

}  // namespace tapegrad::experiment
