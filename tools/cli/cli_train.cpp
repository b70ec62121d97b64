// Model subcommands: train, eval, translate.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "curves.hpp"
#include "run_options.hpp"
#include "score_output.hpp"
#include "tapegrad/distributed.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::cli {

namespace {

std::string format_duration(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) / 60 % 60);
  return buf;
}

// --beam and --length-penalty, as eval and translate take them.
void add_decoding_options(CLI::App* sub, int64_t* beam, double* length_penalty) {
  sub->add_option("--beam", *beam, "Beam width (1: greedy)")->capture_default_str()->check(int_range(1, 64));
  sub->add_option("--length-penalty", *length_penalty,
                  "Beam search's alpha: hypotheses ranked by log P(y) / |y|^alpha, |y| counting <eos> (0: "
                  "log-probability alone, favouring short outputs; 1: per-token mean); used when --beam > 1")
      ->capture_default_str()
      ->check(finite_range(0, 10));
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

void print_eval(const char* prefix, const train::EvalResult& r) {
  if (r.bits_per_char > 0) {  // text: a language model's figures
    std::printf("%sloss: %.4f nats/token  %.4f bits/char  (%lld blocks)\n", prefix, r.loss, r.bits_per_char,
                (long long)r.examples);
    std::fflush(stdout);
    return;
  }
  std::printf("%sloss: %.4f  token_accuracy: %.4f  exact_match: %.4f  (%lld examples)\n", prefix, r.loss,
              r.token_accuracy, r.exact_match, (long long)r.examples);
  for (const auto& s : r.samples) std::printf("    %s\n", s.c_str());
  std::fflush(stdout);
}

// Runs `train` on every rank of an mpirun launch (or in the only process): rank 0 alone prints; a
// refusal every rank reaches (CollectiveError, a non-finite loss) exits normally on each, rank 0
// printing it; any other error stops every rank rather than leave the others waiting for this one.
int on_every_rank(const Runner& train) {
  const train::World& w = train::world();
  if (w.rank > 0) std::freopen("/dev/null", "w", stdout);
  try {
    return train();
  } catch (const train::CollectiveError&) {
    if (w.rank == 0) throw;
    return 2;
  } catch (const NonFiniteError&) {
    if (w.rank == 0) throw;
    return 3;
  } catch (const std::exception& e) {
    if (w.size == 1) throw;
    std::fflush(stdout);
    std::fprintf(stderr, "tapegrad: rank %d of %d: %s; stopping every rank\n", w.rank, w.size, e.what());
    std::fflush(stderr);
    train::abort_world(2);
    throw;
  }
}

}  // namespace

Runner add_train(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  std::string resumable;
  for (const auto& n : train::kResumableOptions) resumable += (resumable.empty() ? "" : ", ") + n;
  auto* sub = app.add_subcommand(
      "train",
      "Train a sequence-to-sequence model on a built-in task or on TSV files.\n"
      "Example: tapegrad train --model transformer --task reverse --steps 2000 --out runs/rev");
  add_run_options(sub, *a);
  auto config = std::make_shared<std::string>();
  sub->add_option("--config", *config,
                  "Read the options from a JSON file: a run's --out/config.json (which every run with --out "
                  "writes: all its effective options) or any subset of its keys; options given on the "
                  "command line override the file's (a warmup in the file counts as given with --schedule "
                  "constant). Repeats a run exactly with a new --out");
  add_run_options(sub, *a, train::OptionScope::train);
  sub->footer("A resumed run (--resume) keeps its checkpoint's options; only " + resumable +
              " may be given differently.");
  Runner run = [a, sub, config] {
    const train::World& w = train::world();
    if (!config->empty()) {
      if (!a->o.resume_dir.empty())
        throw Error("--config " + *config +
                    ": cannot be combined with --resume (a resumed run keeps its "
                    "checkpoint's options)");
      load_run_config(sub, *a, *config);
    }
    train::TrainOptions& o = resolve_run_options(sub, *a);
    train::Session s = train::make_session(o);
    if (s.options.threads > 0) runtime::set_num_threads(s.options.threads);  // given, or the resumed run's
    if (w.launched) std::printf("%s\n", train::data_parallel_layout(s.options).c_str());
    std::printf("training %s\n", s.describe().c_str());
    const bool by_tokens = s.options.batch_tokens > 0;
    std::printf("threads %d, isa %s, %lld steps of %s%s\n", runtime::num_threads(), runtime::active_isa().c_str(),
                (long long)s.options.steps,
                (by_tokens ? "up to " + std::to_string(s.options.batch_tokens) + " padded tokens (length-bucketed)"
                           : std::to_string(s.options.batch_size) + " sequences")
                    .c_str(),
                s.step ? (", resuming at step " + std::to_string(s.step)).c_str() : "");
    std::fflush(stdout);
    // Under mpirun the ranks get a pty even when mpirun's output is a file: log lines, no \r updates.
    const bool tty = stdout_is_tty() && !w.launched;
    const int64_t first = s.step;
    double tok_rate = 0;
    double step_seconds = 0, backward_seconds = 0, wait_seconds = 0;  // data-parallel: after the first step
    int64_t timed_steps = 0;
    train::train(
        s,
        [&](const train::StepLog& l) {
          if (l.step > first + 1)
            step_seconds += l.step_seconds, backward_seconds += l.backward_seconds,
                wait_seconds += l.allreduce_wait_seconds, ++timed_steps;
          tok_rate = tok_rate == 0 ? l.tokens_per_second : 0.9 * tok_rate + 0.1 * l.tokens_per_second;
          const double per_step = l.seconds / double(l.step - first);
          const double eta = per_step * double(s.options.steps - l.step);
          char padding[32] = "";  // batches by tokens: how much of the step's batch was padding
          if (by_tokens) std::snprintf(padding, sizeof padding, "  pad %.1f%%", 100 * l.padding_fraction);
          if (tty) {
            std::printf("\rstep %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s%s  ETA %s   ", (long long)l.step,
                        (long long)s.options.steps, l.loss, l.lr, tok_rate, padding, format_duration(eta).c_str());
            std::fflush(stdout);
          } else if (l.step % std::max<int64_t>(s.options.log_every, 1) == 0 || l.step == s.options.steps) {
            std::printf(
                "step %lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s%s  elapsed %s  ETA %s\n",
                (long long)l.step, (long long)s.options.steps, l.loss, l.lr, l.grad_norm, tok_rate, padding,
                format_duration(l.seconds).c_str(), format_duration(eta).c_str());
            std::fflush(stdout);
          }
        },
        [&](int64_t step, const train::EvalResult& r) {
          if (tty) std::printf("\n");
          print_eval(("valid @ step " + std::to_string(step) + ": ").c_str(), r);
        });
    if (w.launched && timed_steps > 0)
      std::printf("data-parallel: %lld steps after the first, mean %.2f ms per step, of which %.2f ms (%.1f%%) "
                  "waiting for gradient sums after backward; backward %.2f ms with that wait\n",
                  (long long)timed_steps, 1e3 * step_seconds / double(timed_steps),
                  1e3 * wait_seconds / double(timed_steps), 100 * wait_seconds / std::max(step_seconds, 1e-12),
                  1e3 * backward_seconds / double(timed_steps));
    if (!s.options.out_dir.empty() && w.rank == 0) {
      const std::string png = s.options.out_dir + "/curves.png";
      plot_curves({read_curves(s.options.out_dir)}, png, PlotOptions{});
    }
    if (!s.options.out_dir.empty())
      std::printf("checkpoint (latest -> step-%08lld), metrics.csv, samples.txt, curves.png: %s\n", (long long)s.step,
                  s.options.out_dir.c_str());
    return 0;
  };
  return [run] { return on_every_rank(run); };
}

Runner add_eval(CLI::App& app) {
  struct Args {
    std::string checkpoint, task, valid, text;
    data::TaskOptions task_options;
    bool lengths_given = false;
    int64_t size = 1000, batch_size = 256, max_len = 0, beam = 1;
    uint64_t seed = 20261130;
    int threads = 0;
    bool json = false;
    bool bleu = false;
    double length_penalty = 0.6;
    std::string hyp_out;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("eval",
                         "Evaluate a checkpoint by greedy decoding; prints exact_match and token_accuracy.\n"
                         "Example: tapegrad eval --checkpoint runs/rev --task reverse");
  sub->add_option("--checkpoint", a->checkpoint, "Checkpoint directory")->required();
  sub->add_option("--task", a->task, "Built-in task (default: the one it was trained on)");
  auto* mn =
      sub->add_option("--min-len", a->task_options.min_len, "Shortest task source (default: as trained)")
          ->check(int_range(1, 100000));
  auto* mx =
      sub->add_option("--max-len", a->task_options.max_len, "Longest task source (default: as trained)")
          ->check(int_range(1, 100000));
  sub->add_option("--valid", a->valid, "TSV file to evaluate on instead of a task");
  sub->add_option("--text", a->text,
                  "Plain-text file to score a language-model checkpoint (train --model gpt --text) on: loss in "
                  "nats per token and bits per character over --size evenly spaced blocks of the whole file");
  sub->add_option("--size", a->size, "Task examples (or --text blocks) to evaluate")
      ->capture_default_str()
      ->check(int_range(1, 1 << 24));
  add_seed_option(sub, &a->seed, "Seed of the evaluation examples (differs from training's)");
  sub->add_option("--max-output", a->max_len, "Longest output to decode (default: longest target + 8)")
      ->check(int_range(1, 100000));
  sub->add_option("--threads", a->threads, "Kernel threads")->check(int_range(1, 1024));
  sub->add_flag("--json", a->json,
                "Print one JSON object instead (checkpoint, step, model, examples, exact_match, "
                "token_accuracy, loss, samples, and with --bleu bleu and chrf as `score --json` prints "
                "them), every figure at full precision: it reads back as the same double");
  sub->add_flag("--bleu", a->bleu,
                "Also print corpus BLEU (13a, as sacreBLEU) and chrF2 of the detokenised outputs against "
                "the targets as written in --valid (a task's targets detokenised)");
  add_decoding_options(sub, &a->beam, &a->length_penalty);
  sub->add_option("--hyp-out", a->hyp_out,
                  "Write the outputs (greedy, or beam search with --beam), detokenised, one line per example");
  return [a, mn, mx] {
    if (a->threads > 0) runtime::set_num_threads(a->threads);
    train::LoadedModel m = train::load_checkpoint(a->checkpoint);
    const bool language_model = m.model->config().kind == models::ModelKind::gpt;
    if (!a->text.empty() && !language_model)
      throw Error("eval: --text: only for a language-model checkpoint (train --model gpt --text); " + a->checkpoint +
                  " holds a " + models::model_name(m.model->config().kind) + " model");
    if (language_model) {
      if (a->text.empty() || !a->valid.empty() || !a->task.empty())
        throw Error("eval: " + a->checkpoint + " holds a gpt language model: pass --text FILE (not --valid or --task)");
      // The checkpoint's own tokenizer (its SentencePiece model for pieces): nothing else is needed.
      const train::CheckpointText held_out = train::text_for_checkpoint(m, a->text, a->size);
      if (held_out.unknown_tokens > 0 && !a->json)
        std::fprintf(stderr, "eval: %lld of %lld tokens unknown to the vocabulary (mapped to <unk>)\n",
                     (long long)held_out.unknown_tokens, (long long)held_out.tokens);
      const train::EvalResult r =
          train::evaluate_text(*m.model, m.vocab, held_out.blocks, 64, held_out.characters_per_token);
      if (a->json) {
        const nlohmann::json j = {{"checkpoint", a->checkpoint}, {"step", m.step},   {"model", "gpt"},
                                  {"blocks", r.examples},        {"loss", r.loss}, {"bits_per_char", r.bits_per_char}};
        std::printf("%s\n", j.dump().c_str());
        return 0;
      }
      std::printf("checkpoint: %s (step %lld, gpt)\n", a->checkpoint.c_str(), (long long)m.step);
      print_eval("", r);
      return 0;
    }
    data::TaskOptions opts = m.options.task_options;
    if (mn->count()) opts.min_len = a->task_options.min_len;
    if (mx->count()) opts.max_len = a->task_options.max_len;
    const train::CheckpointExamples held_out =
        train::examples_for_checkpoint(m, {a->valid, a->task, opts, a->size, a->seed}, "eval");
    const auto& ex = held_out.examples;
    if (ex.empty()) throw Error("eval: no examples to evaluate");
    if (held_out.unknown_tokens > 0 && !a->json)  // --json: standard output and error are one object
      std::fprintf(stderr, "eval: %lld of %lld tokens unknown to the vocabulary (mapped to <unk>)\n",
                   (long long)held_out.unknown_tokens, (long long)held_out.tokens);
    int64_t longest = 0;
    for (const auto& e : ex) longest = std::max<int64_t>(longest, int64_t(e.tgt.size()));
    const int64_t max_len = a->max_len > 0 ? a->max_len : longest + 8;
    const train::EvalResult r = train::evaluate(*m.model, m.vocab, *held_out.tokenizer, ex, a->batch_size, max_len, 5);
    std::vector<std::string> outputs = r.outputs;  // greedy
    if (a->beam > 1) {
      outputs.clear();
      for (const auto& e : ex)
        outputs.push_back(held_out.tokenizer->detokenize(
            m.vocab.decode(m.model->beam_search(e.src, a->beam, max_len, a->length_penalty)), data::Side::target));
    }
    if (!a->hyp_out.empty()) {
      std::string text;
      for (const auto& o : outputs) text += o + "\n";
      io::write_file_atomic(a->hyp_out, text);
    }
    std::optional<data::BleuScore> bleu;
    std::optional<data::ChrfScore> chrf;
    if (a->bleu) {
      bleu = data::corpus_bleu(outputs, {held_out.target_text});
      chrf = data::corpus_chrf(outputs, {held_out.target_text});
    }
    const std::string decoding = a->beam > 1 ? "beam " + std::to_string(a->beam) + ", length penalty " +
                                                   format_number(a->length_penalty)
                                             : "greedy";
    if (a->json) {
      const nlohmann::json j = {{"checkpoint", a->checkpoint},
                                {"step", m.step},
                                {"model", models::model_name(m.model->config().kind)},
                                {"examples", r.examples},
                                {"exact_match", r.exact_match},
                                {"token_accuracy", r.token_accuracy},
                                {"loss", r.loss},
                                {"samples", r.samples}};
      nlohmann::json out = j;
      if (bleu) out.update(score_json(*bleu, *chrf)), out["decoding"] = decoding;
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    std::printf("checkpoint: %s (step %lld, %s)\n", a->checkpoint.c_str(), (long long)m.step,
                models::model_name(m.model->config().kind));
    std::printf("examples: %lld\n", (long long)r.examples);
    std::printf("exact_match: %.4f\n", r.exact_match);
    std::printf("token_accuracy: %.4f\n", r.token_accuracy);
    std::printf("loss: %.4f\n", r.loss);
    for (const auto& s : r.samples) std::printf("    %s\n", s.c_str());
    if (bleu) {
      std::printf("outputs scored: %s (exact_match and token_accuracy are greedy)\n", decoding.c_str());
      std::printf("%s\n%s\n", bleu->text().c_str(), chrf->text().c_str());
    }
    return 0;
  };
}

Runner add_translate(CLI::App& app) {
  struct Args {
    std::string checkpoint;
    std::vector<std::string> inputs;
    int64_t beam = 1, max_len = 0;
    double length_penalty = 0.6;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("translate",
                                 "Decode source lines with a checkpoint: one output line per input line.\n"
                                 "Example: echo abcdef | tapegrad translate --checkpoint runs/rev");
  sub->add_option("--checkpoint", a->checkpoint, "Checkpoint directory")->required();
  add_decoding_options(sub, &a->beam, &a->length_penalty);
  sub->add_option("--max-output", a->max_len, "Longest output (default: 2 x input + 8)")
      ->check(int_range(1, 100000));
  sub->add_option("--threads", a->threads, "Kernel threads")->check(int_range(1, 1024));
  sub->add_option("inputs", a->inputs, "Source lines (default: read stdin)");
  return [a] {
    if (a->threads > 0) runtime::set_num_threads(a->threads);
    train::LoadedModel m = train::load_checkpoint(a->checkpoint);
    const data::Tokenizer& tok = *m.tokenizer;
    std::vector<std::string> lines = a->inputs;
    if (lines.empty())
      for (std::string line; std::getline(std::cin, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(line);
      }
    constexpr size_t kChunk = 64;
    int64_t tokens = 0, unknown = 0;  // input tokens, and those the vocabulary maps to <unk>
    for (size_t start = 0; start < lines.size(); start += kChunk) {
      std::vector<data::Example> ex;
      int64_t longest = 0;
      for (size_t i = start; i < std::min(lines.size(), start + kChunk); ++i) {
        auto ids = m.vocab.encode(tok.tokenize(lines[i], data::Side::source));
        tokens += int64_t(ids.size());
        unknown += std::count(ids.begin(), ids.end(), data::kUnk);
        if (ids.empty()) ids.push_back(data::kUnk);  // an empty line still gets a (meaningless) output line
        if (int64_t(ids.size()) > m.model->config().max_len)
          throw Error("translate: line " + std::to_string(i + 1) + " has " + std::to_string(ids.size()) +
                      " tokens, more than the model's max_len " + std::to_string(m.model->config().max_len));
        longest = std::max<int64_t>(longest, int64_t(ids.size()));
        ex.push_back({ids, {}});
      }
      const int64_t max_len = a->max_len > 0 ? a->max_len : 2 * longest + 8;
      std::vector<std::vector<int32_t>> outs;
      if (a->beam > 1) {
        for (const auto& e : ex) outs.push_back(m.model->beam_search(e.src, a->beam, max_len, a->length_penalty));
      } else {
        const data::Batch b = data::make_batch(ex);
        outs = m.model->greedy_decode(b.src, b.src_len, max_len);
      }
      for (const auto& o : outs) std::printf("%s\n", tok.detokenize(m.vocab.decode(o), data::Side::target).c_str());
    }
    if (unknown > 0) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "translate: %lld of %lld input tokens unknown to the vocabulary (mapped to <unk>)\n",
                   (long long)unknown, (long long)tokens);
    }
    return 0;
  };
}

}  // namespace tapegrad::cli
