// Sessions (data + model + optimizer), the training loop, and evaluation by greedy decoding.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "src/train/distributed.hpp"
#include "src/train/run_directory.hpp"
#include "src/train/token_batches.hpp"
#include "src/train/train_internal.hpp"
#include "tapegrad/autograd.hpp"
#include "tapegrad/distributed.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/instruments.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

namespace {

// Stream ids keep the generators of different purposes independent for one seed.
constexpr uint64_t kTrainStream = 0x7261696eull, kValidStream = 0x76616c69ull, kSplitStream = 0x73706c74ull;

int64_t longest_target(const std::vector<data::Example>& ex) {
  size_t n = 0;
  for (const auto& e : ex) n = std::max(n, e.tgt.size());
  return int64_t(n);
}

}  // namespace

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, optim::ParamList params) {
  // The Transformer paper's betas and eps by default (--beta2, --adam-eps).
  const optim::AdamOptions adam{.lr = o.lr,
                                .betas = {0.9, o.beta2},
                                .eps = o.adam_eps,
                                .weight_decay = o.weight_decay,
                                .decay_vectors = o.decay == "all"};
  if (o.optimizer == "adamw") return std::make_unique<optim::AdamW>(std::move(params), adam);
  if (o.optimizer == "adam") return std::make_unique<optim::Adam>(std::move(params), adam);
  if (o.optimizer == "sgd")
    return std::make_unique<optim::Sgd>(std::move(params),
                                        optim::SgdOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  throw Error("optimizer: unknown '" + o.optimizer + "' (expected adamw, adam or sgd)");
}

// Data files are kept as absolute paths, so a checkpoint resumes (and a config.json repeats) from
// any working directory: a relative path means the directory it was given in, which is only known now.
std::string absolute_path(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

data::Batch Session::batch_for_step(int64_t s) const { return batch_of(examples_for_step(s)); }

data::Batch Session::batch_of(const std::vector<data::Example>& examples) const {
  return options.text.empty() ? data::make_batch(examples) : data::make_block_batch(examples);
}

std::vector<data::Example> Session::examples_for_step(int64_t s) const {
  std::vector<data::Example> ex;
  const int64_t B = options.batch_size;
  if (!options.text.empty()) {  // B blocks at uniform offsets, as nanoGPT's get_batch draws them
    Generator gen = Generator::derive(options.seed ^ kTrainStream, uint64_t(s));
    const int64_t last = int64_t(train_text.size()) - options.block_size - 1;
    std::vector<int64_t> offsets;
    for (int64_t i = 0; i < B; ++i) offsets.push_back(gen.uniform_int(0, last));
    return data::text_blocks(train_text, offsets, options.block_size);
  }
  if (token_batches) {
    for (int64_t i : token_batches->batch(s)) ex.push_back(train_examples[size_t(i)]);
  } else if (task) {
    Generator gen = Generator::derive(options.seed ^ kTrainStream, uint64_t(s));
    for (int64_t i = 0; i < B; ++i) ex.push_back(task->sample(gen));
  } else {
    // Epoch e visits a permutation seeded by (seed, e); step s takes the next B examples of it.
    const int64_t n = int64_t(train_examples.size());
    std::vector<int64_t> perm;
    int64_t perm_epoch = -1;
    for (int64_t i = 0; i < B; ++i) {
      const int64_t k = (s - 1) * B + i, epoch = k / n, pos = k % n;
      if (epoch != perm_epoch) {
        perm.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) perm[size_t(j)] = j;
        Generator::derive(options.seed ^ kSplitStream, uint64_t(epoch)).shuffle(perm);
        perm_epoch = epoch;
      }
      ex.push_back(train_examples[size_t(perm[size_t(pos)])]);
    }
  }
  return ex;
}

std::string Session::describe() const {
  std::ostringstream os;
  os << models::model_name(options.model.kind) << " with " << model->parameter_count()
     << " parameters, vocab " << vocab.size() << ", ";
  if (!options.text.empty())
    os << train_text.size() << " training tokens from " << options.text << " in blocks of " << options.block_size;
  else if (task)
    os << "task " << task->name() << " (lengths " << options.task_options.min_len << "-"
       << options.task_options.max_len << ")";
  else
    os << train_examples.size() << " training pairs from " << options.train;
  if (blank_lines) os << " (" << blank_lines << " blank line" << (blank_lines == 1 ? "" : "s") << " skipped)";
  os << ", " << valid_examples.size() << " held out";
  if (options.tokens == data::Tokenization::sentencepiece) {
    // Pieces the vocabulary lacks (characters the model never saw) train as <unk>: say how many.
    int64_t tokens = int64_t(train_text.size()), unknown = std::count(train_text.begin(), train_text.end(), data::kUnk);
    for (const auto& e : train_examples)
      for (const auto* side : {&e.src, &e.tgt}) {
        tokens += int64_t(side->size());
        unknown += std::count(side->begin(), side->end(), data::kUnk);
      }
    os << "; SentencePiece " << (options.spm_model.empty() ? data::sentencepiece_type_name(options.spm_type)
                                                           : options.spm_model.c_str())
       << ", " << unknown << " of " << tokens << " training tokens unknown";
  }
  return os.str();
}

namespace {

// The options a resumed run takes from the request (the table's resumable rows); everything else
// comes from the checkpoint. From the command line (`given` non-empty) only those given explicitly
// and those never saved; from code, all of them.
TrainOptions resumed_options(const TrainOptions& saved, const TrainOptions& requested) {
  TrainOptions o = saved;
  for (const OptionSpec& row : option_table())
    if (row.resumable && (requested.given.empty() || requested.given.count(row.flag) || !*row.key))
      row.copy(requested, o);
  if (o.out_dir.empty()) o.out_dir = requested.resume_dir;
  o.given = requested.given;
  return o;
}

// TSV pairs must fit the model: a line longer than max_len is refused here, naming FILE:LINE,
// rather than at the step that first samples it.
void check_lengths(const std::vector<data::TextPair>& pairs, const std::string& file, int64_t max_len) {
  for (const auto& p : pairs) {
    const size_t longest = std::max(p.src.size(), p.tgt.size() + 1);  // the target gains <bos>/<eos>
    if (int64_t(longest) > max_len)
      throw IoError(file + ":" + std::to_string(p.line) + ": " + std::to_string(longest) +
                    " tokens (with <bos>/<eos>), more than the model's max_len " + std::to_string(max_len));
  }
}

// A resumed run's data file, as its checkpoint recorded it: one it no longer finds is an error saying
// where the path came from. Checkpoints written before paths were stored absolute may hold a relative
// one, which can only mean the working directory (as it did then).
void check_recorded_file(const std::string& recorded, const std::string& option, const std::string& dir) {
  if (recorded.empty() || std::filesystem::exists(absolute_path(recorded))) return;
  const bool relative = std::filesystem::path(recorded).is_relative();
  throw IoError(
      "--resume " + dir + ": " + recorded + ": no such file (the " + option +
      " path recorded in the checkpoint" +
      (relative ? ", relative to the directory it was trained in; looked for at " + absolute_path(recorded)
                : "") +
      ")");
}

// The SentencePiece model of --text: --spm-model (which must keep line breaks), or one trained on the
// lines of the training part alone (`train_part`), never on the validation text.
std::shared_ptr<const data::SentencePieceTokenizer> text_piece_model(const TrainOptions& o, const std::string& train_part) {
  if (!o.spm_model.empty()) {
    std::shared_ptr<const data::SentencePieceTokenizer> model;
    try {
      model = data::SentencePieceTokenizer::load(o.spm_model);
    } catch (const Error& e) {
      throw Error(std::string("--spm-model: ") + e.what());
    }
    if (!model->keeps_line_breaks())
      throw Error("--spm-model " + o.spm_model +
                  ": has no line-break piece, which --text needs (a model from a --text run has it: "
                  "RUN/sentencepiece.model)");
    return model;
  }
  std::vector<std::string> lines;
  for (size_t begin = 0; begin < train_part.size();) {
    const size_t nl = std::min(train_part.find('\n', begin), train_part.size());
    if (nl > begin) lines.push_back(train_part.substr(begin, nl - begin));
    begin = nl + 1;
  }
  return data::SentencePieceTokenizer::train(lines, {}, {.vocab_size = o.vocab_size, .type = o.spm_type,
                                                         .newline_piece = true});
}

// --text: the file split 90/10 at a character (code point) boundary, nanoGPT's int(n * 0.9) of its
// characters: the first part trains, the last part's ids are cut into --valid-size evenly spaced
// blocks. Characters: the vocabulary is every character of the file (or the checkpoint's), one id per
// character, so the split is the same in ids. Pieces: the SentencePiece model is trained on the first
// part (or given, or the checkpoint's) and each part is encoded on its own.
void read_text_data(Session& s, const TrainOptions& o, const LoadedModel* resumed) {
  const std::string text = data::read_text(o.text);
  const int64_t characters = data::count_characters(text);
  const auto n_train_chars = int64_t(double(characters) * 0.9);
  size_t cut = 0;  // the byte where character n_train_chars starts: past n_train_chars character starts
  for (int64_t c = 0; c < n_train_chars; ++c)
    do ++cut;
    while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80);
  const std::string train_part = text.substr(0, cut), valid_part = text.substr(cut);
  if (resumed) {
    s.tokenizer = resumed->tokenizer;
    s.vocab = resumed->vocab;
  } else if (o.tokens == data::Tokenization::sentencepiece) {
    const auto pieces = text_piece_model(o, train_part);
    s.tokenizer = pieces;
    const auto tokens = pieces->vocabulary();
    s.vocab = data::Vocab::from_tokens({tokens.begin() + 4, tokens.end()});
  } else {
    s.tokenizer = data::make_tokenizer(o.tokens);
    s.vocab = data::char_vocab(text);
  }
  std::vector<int32_t> ids = data::encode_text(train_part, s.vocab, *s.tokenizer);
  const std::vector<int32_t> valid = data::encode_text(valid_part, s.vocab, *s.tokenizer);
  for (const auto& [part, n] : {std::pair{"first 90%", ids.size()}, std::pair{"last 10%", valid.size()}})
    if (int64_t(n) < o.block_size + 1)
      throw IoError(o.text + ": its " + part + " holds " + std::to_string(n) + " tokens, fewer than --block-size " +
                    std::to_string(o.block_size) + " + 1");
  s.train_text = std::move(ids);
  s.valid_examples = data::text_blocks(
      valid, data::evenly_spaced_offsets(int64_t(valid.size()), o.block_size, o.valid_size), o.block_size);
  // Bits per character of pieces: the validation text's nats per token over its characters (code points
  // of the original text) per token; a character is one token, so characters count their own (evaluate_text).
  if (o.tokens == data::Tokenization::sentencepiece)
    s.valid_characters_per_token = double(characters - n_train_chars) / double(valid.size());
}

// The run's tokenizer: chars or whitespace; or SentencePiece, loaded from --spm-model or trained on
// the training split alone (the lines `kept` of `text`), never on held-out lines.
std::shared_ptr<const data::Tokenizer> make_tokenizer(const TrainOptions& o, const data::TsvText& text,
                                                      const std::vector<size_t>& kept) {
  if (o.tokens != data::Tokenization::sentencepiece) return data::make_tokenizer(o.tokens);
  if (!o.spm_model.empty()) {
    try {
      return data::SentencePieceTokenizer::load(o.spm_model);
    } catch (const Error& e) {
      throw Error(std::string("--spm-model: ") + e.what());
    }
  }
  std::vector<size_t> order = kept;  // in file order, so the model does not depend on the split's shuffle
  std::sort(order.begin(), order.end());
  std::vector<std::string> src, tgt;
  for (size_t i : order) src.push_back(text.src[i]), tgt.push_back(text.tgt[i]);
  return data::SentencePieceTokenizer::train(
      src, tgt, {o.vocab_size, o.spm_type, o.spm_sides == "separate"});
}

}  // namespace

Session make_session(const TrainOptions& requested_options) {
  requested_options.validate();
  TrainOptions requested = requested_options;
  requested.train = absolute_path(requested.train);
  requested.valid = absolute_path(requested.valid);
  requested.text = absolute_path(requested.text);
  Session s;
  TrainOptions o = requested;
  int64_t resume_step = 0;
  std::unique_ptr<LoadedModel> resumed;
  if (!requested.resume_dir.empty()) {
    resumed = std::make_unique<LoadedModel>(load_checkpoint(requested.resume_dir));
    check_recorded_file(resumed->options.train, "--train", requested.resume_dir);
    check_recorded_file(resumed->options.valid, "--valid", requested.resume_dir);
    check_recorded_file(resumed->options.text, "--text", requested.resume_dir);
    resumed->options.text = absolute_path(resumed->options.text);
    resumed->options.train = absolute_path(resumed->options.train);
    resumed->options.valid = absolute_path(resumed->options.valid);
    requested_options.check_resume(resumed->options);  // the paths as given, in its message
    o = resumed_options(resumed->options, requested);
    if (o.steps < resumed->step)
      throw Error("--steps " + std::to_string(o.steps) + ": below the checkpoint's step " +
                  std::to_string(resumed->step) + " in " + requested.resume_dir +
                  " (steps count the whole run)");
    resume_step = resumed->step;
  }

  if (!o.text.empty()) {
    read_text_data(s, o, resumed.get());
  } else if (o.train.empty()) {
    s.task = data::make_task(o.task, o.task_options);
    s.vocab = s.task->vocab();
    o.tokens = s.task->tokenization();
    s.tokenizer = data::make_tokenizer(o.tokens);
    Generator vg = Generator::derive(o.seed ^ kValidStream, 0);
    for (int64_t i = 0; i < o.valid_size; ++i) s.valid_examples.push_back(s.task->sample(vg));
  } else {
    const data::TsvText train_text = data::read_tsv_text(o.train, &s.blank_lines);
    std::optional<data::TsvText> valid_text;
    if (!o.valid.empty()) valid_text = data::read_tsv_text(o.valid, &s.blank_lines);
    // Without --valid, hold out a seeded random fraction of the training file.
    const size_t n = train_text.src.size();
    std::vector<size_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = i;
    size_t n_valid = 0;
    if (!valid_text) {
      Generator::derive(o.seed ^ kSplitStream, 0xffff).shuffle(idx);
      n_valid = size_t(std::ceil(double(n) * o.valid_fraction));
    }
    if (n_valid >= n)
      throw Error("train: no training pairs left in " + o.train + ": its " + std::to_string(n) +
                  " pair(s) were all held out by --valid-fraction " + std::to_string(o.valid_fraction) +
                  " (pass --valid FILE or a smaller --valid-fraction)");
    s.tokenizer = resumed ? resumed->tokenizer : make_tokenizer(o, train_text, {idx.begin() + long(n_valid), idx.end()});
    const auto train_pairs = data::tokenize_tsv(train_text, *s.tokenizer, o.train);
    check_lengths(train_pairs, o.train, o.model.max_len);
    std::vector<data::TextPair> valid_pairs, kept;
    if (valid_text) {
      valid_pairs = data::tokenize_tsv(*valid_text, *s.tokenizer, o.valid);
      check_lengths(valid_pairs, o.valid, o.model.max_len);
    }
    for (size_t i = 0; i < n; ++i) (i < n_valid ? valid_pairs : kept).push_back(train_pairs[idx[i]]);
    if (resumed) {
      s.vocab = resumed->vocab;
    } else if (const auto* spm = dynamic_cast<const data::SentencePieceTokenizer*>(s.tokenizer.get())) {
      const auto pieces = spm->vocabulary();
      s.vocab = data::Vocab::from_tokens({pieces.begin() + 4, pieces.end()});
    } else {
      std::vector<std::vector<std::string>> seqs;
      for (const auto& p : kept) seqs.push_back(p.src), seqs.push_back(p.tgt);
      s.vocab = data::Vocab::build(seqs);
    }
    s.train_examples = data::encode_pairs(kept, s.vocab);
    s.valid_examples = data::encode_pairs(valid_pairs, s.vocab);
  }
  if (o.batch_tokens > 0) {
    int64_t longest = 0;
    for (const auto& e : s.train_examples) longest = std::max(longest, TokenBatches::cost(e));
    if (longest > o.batch_tokens)
      throw Error("--batch-tokens " + std::to_string(o.batch_tokens) + ": below the longest training example (" +
                  std::to_string(longest) + " tokens with <bos>/<eos>), which would fit no batch");
    s.token_batches = std::make_shared<TokenBatches>(s.train_examples, o.batch_tokens, o.seed);
  }
  o.model.vocab_size = s.vocab.size();
  if (!o.text.empty()) o.model.max_len = o.block_size;  // the gpt's positions cover one block
  if (o.decode_max_len <= 0) {
    int64_t longest = longest_target(s.valid_examples);
    if (s.task)
      longest = std::max<int64_t>(longest, o.task_options.max_len);
    else
      longest = std::max(longest, longest_target(s.train_examples));
    o.decode_max_len = longest + 8;
  }
  // The model's size is checked before anything is written or allocated, naming the option.
  if (!resumed) models::check_config(o.model);
  // The run directory is locked (and a checkpoint in it refused) before the model is built; in a
  // data-parallel run, by rank 0 alone, which alone writes it.
  if (!o.out_dir.empty() && world().rank == 0)
    s.run_dir = std::make_shared<RunDirectory>(
        o.out_dir, o.overwrite || (resumed && same_directory(o.out_dir, o.resume_dir)));
  if (resumed) {
    s.model = std::move(resumed->model);
    s.model->train();
  } else {
    s.model = models::make_model(o.model, o.seed);
  }
  s.optimizer = make_optimizer(o, s.model->named_parameters());
  s.options = o;
  s.step = resume_step;
  if (resumed) restore_training_state(s, io::load_safetensors(resumed->optimizer_path));
  return s;
}

EvalResult evaluate(models::Seq2Seq& model, const data::Vocab& vocab, data::Tokenization tok,
                    const std::vector<data::Example>& examples, int64_t batch_size, int64_t max_len,
                    int samples) {
  return evaluate(model, vocab, *data::make_tokenizer(tok), examples, batch_size, max_len, samples);
}

namespace {
// f(chunk) for consecutive slices of at most batch_size examples, in order, with `model` in evaluation
// mode and nothing recorded on the tape (its training mode restored after): the batches of an evaluation.
template <class F>
void evaluate_chunks(models::Seq2Seq& model, const std::vector<data::Example>& examples, int64_t batch_size, F f) {
  const bool was_training = model.training();
  model.eval();
  NoGrad no_grad;
  for (size_t start = 0; start < examples.size(); start += size_t(batch_size))
    f(std::vector<data::Example>(examples.begin() + long(start),
                                 examples.begin() + long(std::min(examples.size(), start + size_t(batch_size)))));
  model.train(was_training);
}
}  // namespace

EvalResult evaluate(models::Seq2Seq& model, const data::Vocab& vocab, const data::Tokenizer& tokenizer,
                    const std::vector<data::Example>& examples, int64_t batch_size, int64_t max_len,
                    int samples) {
  EvalResult r;
  r.examples = int64_t(examples.size());
  if (examples.empty()) return r;
  int64_t tokens = 0, correct = 0, exact = 0;
  double loss_sum = 0;
  int64_t loss_tokens = 0;
  evaluate_chunks(model, examples, batch_size, [&](const std::vector<data::Example>& chunk) {
    const data::Batch batch = data::make_batch(chunk);
    const int64_t n_tok = batch.target_tokens();
    loss_sum += model.loss(batch).item() * double(n_tok);
    loss_tokens += n_tok;
    const auto outputs = model.greedy_decode(batch.src, batch.src_len, max_len);
    for (size_t i = 0; i < chunk.size(); ++i) {
      const auto& want = chunk[i].tgt;
      const auto& got = outputs[i];
      for (size_t k = 0; k < want.size(); ++k) correct += k < got.size() && got[k] == want[k];
      tokens += int64_t(want.size());
      exact += got == want;
      r.outputs.push_back(tokenizer.detokenize(vocab.decode(got), data::Side::target));
      if (int(r.samples.size()) < samples)
        r.samples.push_back(tokenizer.detokenize(vocab.decode(chunk[i].src), data::Side::source) + " -> " +
                            tokenizer.detokenize(vocab.decode(got), data::Side::target) + "   (target " +
                            tokenizer.detokenize(vocab.decode(want), data::Side::target) + ")");
    }
  });
  r.loss = loss_tokens ? loss_sum / double(loss_tokens) : 0;
  r.token_accuracy = tokens ? double(correct) / double(tokens) : 1.0;
  r.exact_match = double(exact) / double(examples.size());
  return r;
}

EvalResult evaluate_text(models::Seq2Seq& model, const data::Vocab& vocab, const std::vector<data::Example>& blocks,
                         int64_t batch_size, double characters_per_token) {
  EvalResult r;
  r.examples = int64_t(blocks.size());
  if (blocks.empty()) return r;
  double loss_sum = 0;
  int64_t tokens = 0, chars = 0;
  evaluate_chunks(model, blocks, batch_size, [&](const std::vector<data::Example>& chunk) {
    const data::Batch batch = data::make_block_batch(chunk);
    const int64_t n = batch.target_tokens();
    loss_sum += model.loss(batch).item() * double(n);
    tokens += n;
    if (characters_per_token <= 0)
      for (const data::Example& e : chunk)
        for (auto id = e.tgt.begin() + 1; id != e.tgt.end(); ++id)
          chars += int64_t(data::tokenize(vocab.token(*id), data::Tokenization::chars).size());
  });
  r.loss = loss_sum / double(tokens);
  // A piece's spelling is not the text it covers (its word-start mark, normalised spaces), so pieces
  // scale nats per token by the text's own characters per token instead of counting them.
  r.bits_per_char = characters_per_token > 0
                        ? r.loss / (characters_per_token * std::log(2.0))
                        : loss_sum / (double(std::max<int64_t>(chars, 1)) * std::log(2.0));
  return r;
}

void train(Session& s, const std::function<void(const StepLog&)>& on_step,
           const std::function<void(int64_t, const EvalResult&)>& on_eval) {
  const TrainOptions& o = s.options;
  const std::unique_ptr<DataParallel> parallel = DataParallel::start(s);  // null for one process
  const bool writer = !parallel || parallel->rank() == 0;  // logs, validates and writes the run directory
  RunDirectory* run = s.run_dir.get();
  if (!o.out_dir.empty() && !run && writer) {  // a session built by hand: lock its directory now
    s.run_dir = std::make_shared<RunDirectory>(o.out_dir, s.step > 0 || o.overwrite);
    run = s.run_dir.get();
  }
  if (run) {
    // Resuming into another directory carries the original run's curve over.
    const bool elsewhere = !o.resume_dir.empty() && !same_directory(o.out_dir, o.resume_dir);
    run->open_metrics(s.step, elsewhere ? o.resume_dir + "/metrics.csv" : "");
    // The effective options, so `train --config DIR/config.json` repeats the run.
    io::write_file_atomic(o.out_dir + "/config.json", o.to_json(2) + "\n");
    // The SentencePiece model(s) as files too, for tools outside tapegrad (piece id == vocabulary id).
    if (const auto* spm = dynamic_cast<const data::SentencePieceTokenizer*>(s.tokenizer.get())) {
      if (spm->joint()) {
        io::write_file_atomic(o.out_dir + "/sentencepiece.model", spm->model(data::Side::source));
      } else {
        io::write_file_atomic(o.out_dir + "/sentencepiece.source.model", spm->model(data::Side::source));
        io::write_file_atomic(o.out_dir + "/sentencepiece.target.model", spm->model(data::Side::target));
      }
    }
  }
  const int64_t first_step = s.step;
  auto run_eval = [&](int64_t step) {
    if (!writer) return;
    const bool text = !o.text.empty();
    const EvalResult r = text ? evaluate_text(*s.model, s.vocab, s.valid_examples, 64, s.valid_characters_per_token)
                              : evaluate(*s.model, s.vocab, *s.tokenizer, s.valid_examples, 256, o.decode_max_len);
    if (run && step > first_step) {  // a resume with no steps left keeps the rows it carried over
      MetricsRow row;
      row.step = step, row.valid_loss = r.loss;
      if (text)
        row.valid_bits_per_char = r.bits_per_char;
      else
        row.valid_token_accuracy = r.token_accuracy, row.valid_exact_match = r.exact_match;
      run->append_metrics(row);
      std::ostringstream samples;
      if (text)
        samples << "step " << step << ": loss " << r.loss << " nats/token, " << r.bits_per_char << " bits/char\n";
      else
        samples << "step " << step << ": token_accuracy " << r.token_accuracy << ", exact_match "
                << r.exact_match << "\n";
      for (const auto& line : r.samples) samples << line << "\n";
      io::write_file_atomic(o.out_dir + "/samples.txt", samples.str());
    }
    if (on_eval) on_eval(step, r);
  };
  s.model->train();
  const auto t_start = std::chrono::steady_clock::now();
  std::optional<AnomalyMode> anomaly;  // checks every op output and gradient of every step
  if (o.detect_anomaly) anomaly.emplace();
  while (s.step < o.steps) {
    StepResult r;
    double padding = 0;
    try {
      if (anomaly) anomaly->set_step(s.step + 1);
      if (parallel) {
        r = parallel->step(s);
      } else {
        const data::Batch batch = s.batch_for_step(s.step + 1);
        padding = batch.padding_fraction();
        r = train_step(s, batch);
      }
    } catch (const NonFiniteError& e) {
      if (!run) throw;
      // The parameters of step s.step gave it: if they were saved, they are not a good checkpoint.
      const int64_t kept = roll_back_checkpoint(o.out_dir, s.step);
      throw NonFiniteError(std::string(e.what()) + "; " +
                           (kept >= 0 ? "the checkpoint in " + o.out_dir + " is step " + std::to_string(kept)
                                      : "no finite checkpoint is left in " + o.out_dir));
    }
    const StepLog log{r.step,
                      r.loss,
                      r.lr,
                      r.grad_norm,
                      double(r.tokens) / std::max(r.seconds, 1e-9),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(),
                      r.seconds,
                      r.backward_seconds,
                      r.allreduce_wait_seconds,
                      padding};
    if (run && (r.step % o.log_every == 0 || r.step == o.steps)) {
      MetricsRow row;
      row.step = r.step, row.loss = log.loss, row.lr = r.lr, row.grad_norm = r.grad_norm;
      row.tokens_per_second = log.tokens_per_second;
      if (o.batch_tokens > 0) row.padding_fraction = padding;
      run->append_metrics(row);
    }
    if (on_step && writer) on_step(log);
    if (o.eval_every > 0 && r.step % o.eval_every == 0 && r.step != o.steps) run_eval(r.step);
    if (run && o.save_every > 0 && r.step % o.save_every == 0 && r.step != o.steps)
      write_checkpoint(s, o.out_dir);
  }
  if (parallel) parallel->check_in_sync(*s.model, "at the end of training");
  run_eval(s.step);
  if (run) write_checkpoint(s, o.out_dir);
}

}  // namespace tapegrad::train
