/// @file
/// Data for sequence-to-sequence training: vocabularies, tokenisation, built-in seeded tasks, TSV
/// files of `source<TAB>target` lines, and padded batches with the tensors models consume.
///
/// Ids: 0 `<pad>`, 1 `<bos>`, 2 `<eos>`, 3 `<unk>` in every vocabulary; real tokens start at 4.
/// A Batch holds int32 tensors, batch-first: src [B, S], tgt_in [B, T] (`<bos>` + target) and
/// tgt_out [B, T] (target + `<eos>`); positions past a sequence's end hold `<pad>`, and the loss ignores
/// `<pad>` in tgt_out (ignore_index = kPad).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tapegrad/tensor.hpp"

/// Vocabularies, tokenisation, tasks, TSV files and batches (see data.hpp).
namespace tapegrad::data {

/// The special ids every vocabulary starts with: padding, begin and end of sequence, unknown token.
/// @{
inline constexpr int32_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;
/// @}

/// How text splits into tokens: see tokenize (chars, whitespace) and SentencePieceTokenizer.
enum class Tokenization { chars, whitespace, sentencepiece };
/// "chars", "whitespace" or "sentencepiece".
const char* tokenization_name(Tokenization t);
/// "chars" | "whitespace" | "sentencepiece"; throws Error naming the valid ones.
Tokenization parse_tokenization(const std::string& name);

/// Which side of a pair a text is: per-side SentencePiece models split the two differently. Text
/// that is not a pair (a language-model corpus) is one side, source.
enum class Side { source, target };

/// Turns text into tokens (the strings a Vocab maps to ids) and back. Everything that reads or writes
/// text goes through one: TSV files, evaluation samples, translate, eval. chars and whitespace are
/// make_tokenizer's; SentencePieceTokenizer splits into subword pieces.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Which scheme this is.
  virtual Tokenization kind() const = 0;
  /// The tokens of `text` on `side` (no `<bos>`/`<eos>`).
  virtual std::vector<std::string> tokenize(const std::string& text, Side side = Side::source) const = 0;
  /// Joins tokens of `side` back into text (a `<unk>` token stays visible as the tokenizer writes it).
  virtual std::string detokenize(const std::vector<std::string>& tokens, Side side = Side::source) const = 0;
};

/// The chars or whitespace tokenizer: exactly data::tokenize / detokenize with `t`. Throws Error for
/// sentencepiece, which needs a model (SentencePieceTokenizer).
std::shared_ptr<const Tokenizer> make_tokenizer(Tokenization t);

/// The SentencePiece algorithm a model is trained with.
enum class SentencePieceType { unigram, bpe };
/// "unigram" or "bpe".
const char* sentencepiece_type_name(SentencePieceType t);
/// "unigram" | "bpe"; throws Error naming the valid ones.
SentencePieceType parse_sentencepiece_type(const std::string& name);

/// How SentencePieceTokenizer::train trains its model(s).
struct SentencePieceOptions {
  /// Pieces per model, the four specials included (SentencePiece's vocab_size).
  int64_t vocab_size = 8000;
  SentencePieceType type = SentencePieceType::unigram;  ///< the algorithm
  bool separate_sides = false;  ///< one model per side instead of one joint model
  /// Reserve the line break "\n" as a piece of its own (a user-defined symbol, id 4) so that text
  /// keeps its line breaks (--text); see SentencePieceTokenizer.
  bool newline_piece = false;
};

/// Subword pieces through SentencePiece (Kudo and Richardson 2018): one joint model for both sides,
/// or one per side. Every model has ids 0-3 `<pad>` `<bos>` `<eos>` `<unk>`, as Vocab does, so
/// vocabulary() lists the same tokens in the same order as the (joint) model's piece ids: a piece's
/// id in the model is its id in the Vocab (with separate sides, the source model's are).
/// tokenize gives the model's pieces (a character the model lacks stays a piece of its own, which
/// the Vocab maps to `<unk>`); detokenize is SentencePiece's decoding, so output text reads as
/// normal text.
///
/// Line breaks: SentencePiece's normaliser turns "\n" into a space, so a model trained for text
/// (SentencePieceOptions::newline_piece) has "\n" as a piece of its own. With such a model, tokenize
/// encodes each line on its own (each starts with SentencePiece's word-start mark, as the lines it was
/// trained on did) with the "\n" piece between lines, and detokenize decodes the pieces between two
/// "\n" pieces on their own and joins them with real line breaks. Models without it (translation)
/// split and decode the whole text at once, as SentencePiece does.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Trains on `source` and `target` lines (one model over both, or one per side as `options` say;
  /// `target` may be empty for text that is not pairs: one model over `source`). Deterministic: the
  /// same lines and options give the same model bytes (every line is used, in order, with a fixed
  /// thread count). Throws Error "--vocab-size N: ..." when SentencePiece cannot reach the size on this
  /// text, and Error with SentencePiece's message for anything else it refuses.
  static std::shared_ptr<const SentencePieceTokenizer> train(const std::vector<std::string>& source,
                                                             const std::vector<std::string>& target,
                                                             const SentencePieceOptions& options);
  /// From serialized model protos (the bytes of a .model file): one joint model (`target` empty) or
  /// one per side. Throws Error naming `what` (a file, a checkpoint entry) if a model does not parse
  /// or its ids 0-3 are not `<pad>` `<bos>` `<eos>` `<unk>`.
  static std::shared_ptr<const SentencePieceTokenizer> from_models(const std::string& source,
                                                                   const std::string& target,
                                                                   const std::string& what);
  /// from_models on the bytes of `path` (a .model file written by spm_train or by a run); throws
  /// Error naming the file when it is missing or not such a model.
  static std::shared_ptr<const SentencePieceTokenizer> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  Tokenization kind() const override { return Tokenization::sentencepiece; }  ///< sentencepiece
  /// The pieces of `text` under `side`'s model (line by line with "\n" pieces between lines when
  /// keeps_line_breaks()).
  std::vector<std::string> tokenize(const std::string& text, Side side = Side::source) const override;
  /// SentencePiece's decoding of `tokens` under `side`'s model (`<unk>` shows as " ⁇ "; a "\n" piece
  /// as a line break when keeps_line_breaks()).
  std::string detokenize(const std::vector<std::string>& tokens, Side side = Side::source) const override;
  /// The (source or joint) model has the "\n" piece: text keeps its line breaks.
  bool keeps_line_breaks() const;
  /// One model for both sides.
  bool joint() const;
  /// `side`'s model as serialized proto bytes (the same for both sides of a joint model).
  const std::string& model(Side side) const;
  /// Every token of the shared vocabulary, specials first: the source (or joint) model's pieces in id
  /// order, then the target model's pieces not already among them. Vocab::from_tokens of all but
  /// the first four gives the Vocab.
  std::vector<std::string> vocabulary() const;

  struct Impl;  ///< SentencePiece's processors (sentencepiece.cpp)
  /// Use train, from_models or load.
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

/// Splits a line into tokens: one token per UTF-8 code point (chars; a multi-byte character stays whole,
/// a malformed byte becomes a token of its own) or per word between runs of ASCII whitespace (whitespace).
/// sentencepiece throws Error (it needs a model: see Tokenizer).
std::vector<std::string> tokenize(const std::string& line, Tokenization t);
/// Joins tokens back: concatenated (chars) or space-separated (whitespace).
std::string detokenize(const std::vector<std::string>& tokens, Tokenization t);
/// Byte offset of the first malformed UTF-8 byte in `s`, or -1 if `s` is valid UTF-8.
int64_t first_invalid_utf8(const std::string& s);

/// Token strings <-> ids, the four specials first. One vocabulary serves source and target.
class Vocab {
 public:
  Vocab();  ///< only the four specials
  /// Specials, then every token of `sequences` in order of first appearance (deterministic).
  static Vocab build(const std::vector<std::vector<std::string>>& sequences);
  /// Specials, then exactly these tokens with ids 4, 5, ...; throws Error on a duplicate or a special.
  static Vocab from_tokens(const std::vector<std::string>& tokens_after_specials);
  int32_t add(const std::string& token);                    ///< returns its id (existing or new)
  int32_t id(const std::string& token) const;               ///< kUnk if unknown
  const std::string& token(int32_t id) const;               ///< throws IndexError if out of range
  int64_t size() const { return int64_t(tokens_.size()); }  ///< Number of ids, specials included.
  /// id() of every token (unknown ones become kUnk); no `<bos>`/`<eos>` added.
  std::vector<int32_t> encode(const std::vector<std::string>& tokens) const;
  /// Stops at `<eos>`; drops `<pad>` and `<bos>`.
  std::vector<std::string> decode(const std::vector<int32_t>& ids) const;
  /// Every token by id, specials included.
  const std::vector<std::string>& tokens() const { return tokens_; }
  /// JSON array of all tokens (specials included), and back; from_json validates (an array of
  /// distinct, non-empty strings starting with the four specials in order) and throws IoError.
  /// to_json throws Error if a token is not valid UTF-8 (JSON cannot carry it).
  /// @{
  std::string to_json() const;
  static Vocab from_json(const std::string& json);
  /// @}

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
};

/// One training pair as ids, without `<bos>`/`<eos>`.
struct Example {
  /// Source and target ids.
  /// @{
  std::vector<int32_t> src, tgt;
  /// @}
};

/// Examples padded into the tensors models consume (see data.hpp).
struct Batch {
  Tensor src;      ///< int32 [B, S], `<pad>`-padded
  Tensor tgt_in;   ///< int32 [B, T]: `<bos>` t1 .. tn, `<pad>`-padded
  Tensor tgt_out;  ///< int32 [B, T]: t1 .. tn `<eos>`, `<pad>`-padded
  /// Real lengths per sequence (tgt_len counts `<eos>`).
  /// @{
  std::vector<int64_t> src_len, tgt_len;
  /// @}
  int64_t batch_size() const { return int64_t(src_len.size()); }  ///< B.
  int64_t target_tokens() const;                                  ///< non-pad tokens in tgt_out
  /// `<pad>` positions over all positions of src and tgt_out together (0 when no position is padding).
  double padding_fraction() const;
};

/// Pads to the longest source / target in `examples` (at least 1 position each).
Batch make_batch(const std::vector<Example>& examples);

// ---- built-in tasks, generated from a seed ----------------------------------------------------
/// The knobs of a built-in task.
struct TaskOptions {
  /// Source length range (inclusive), in tokens.
  /// @{
  int min_len = 8;
  int max_len = 16;
  /// @}
  int symbols = 10;  ///< distinct content symbols, at most 26 (letters a..)
};
/// Throws Error naming the offending option (and the task) if `options` make no sense for it.
void validate_task_options(const std::string& task, const TaskOptions& options);

/// A task produces examples from a Generator; its vocabulary is fixed by its options.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;         ///< As make_task takes it, e.g. "reverse".
  virtual std::string description() const = 0;  ///< One line for help texts.
  /// One example drawn from `gen` (its source length in [min_len, max_len]).
  virtual Example sample(Generator& gen) const = 0;
  /// n examples from successive draws of `gen`.
  std::vector<Example> sample_many(Generator& gen, int64_t n) const;
  const Vocab& vocab() const { return vocab_; }            ///< Every token the task can produce.
  const TaskOptions& options() const { return options_; }  ///< As constructed.
  /// How a line of this task's text splits into tokens (chars, or whitespace for multi-character tokens).
  Tokenization tokenization() const { return tokenization_; }

 protected:
  Vocab vocab_;                                      ///< set by the subclass's constructor
  TaskOptions options_;                              ///< set by the subclass's constructor
  Tokenization tokenization_ = Tokenization::chars;  ///< set by the subclass if not chars
};

/// The built-in task called `name`, with `options`.
/// Names (formats in src/data/tasks.cpp, the letters from a on are the `symbols` content symbols):
/// ```
///   copy     "cabd"        -> "cabd"
///   reverse  "cabd"        -> "dbac"
///   sort     "cabd"        -> "abcd"        (ascending, repeats kept)
///   recall   "a3c7b1?c"    -> "7"           (long-range: distinct keys with digit values, then '?' and
///                                             a key; the target is its value, uniformly any pair)
///   rotate   "2abcde"      -> "cdeab"       (order-sensitive: rotate the symbols left by the digit)
///   pair-recall "a3 c7 b1 ? c" -> "7"       (recall with each key-value pair one token, whitespace
///                                             tokens: the lookup without binding a value to the key
///                                             before it; L = pairs + 2)
/// ```
/// Source lengths (including recall's "?key" and rotate's digit) lie in [min_len, max_len].
/// Throws Error naming the valid tasks for an unknown name, or the bad option.
std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options);
/// Every name make_task accepts.
std::vector<std::string> task_names();

// ---- TSV files ---------------------------------------------------------------------------------
/// One line of a TSV file, tokenised.
struct TextPair {
  /// Source and target tokens.
  /// @{
  std::vector<std::string> src, tgt;
  /// @}
  int64_t line = 0;  ///< 1-based line in its file, for messages
};
/// Reads `source<TAB>target` lines. Every line is data: there are no comment lines (a source may
/// start with '#'). Blank (whitespace-only) lines are skipped and counted in *blank_lines, which
/// the trainer reports, so nothing is dropped silently. A line
/// without exactly one tab, with an empty side (no tokens), or with invalid UTF-8 throws IoError
/// "PATH:LINE: ..."; a missing or unreadable file, or one with no pairs at all, throws IoError "PATH: ...".
std::vector<TextPair> read_tsv(const std::string& path, const Tokenizer& tokenizer, int64_t* blank_lines = nullptr);
/// read_tsv with make_tokenizer(t) (chars or whitespace).
std::vector<TextPair> read_tsv(const std::string& path, Tokenization t, int64_t* blank_lines = nullptr);
/// The lines of a TSV file's sides as read_tsv accepts them, untokenised: what a tokenizer is
/// trained on. Throws what read_tsv throws for the file's structure.
struct TsvText {
  /// Each non-blank line's source and target text, in file order.
  /// @{
  std::vector<std::string> src, tgt;
  /// @}
  std::vector<int64_t> line;  ///< 1-based line of each pair
};
/// Reads `path` into TsvText (blank lines skipped and counted in *blank_lines).
TsvText read_tsv_text(const std::string& path, int64_t* blank_lines = nullptr);
/// `text` (read from `path`, which messages name) split by `tokenizer`, source with Side::source and
/// target with Side::target: the pairs read_tsv returns, with its checks of empty sides and specials.
std::vector<TextPair> tokenize_tsv(const TsvText& text, const Tokenizer& tokenizer, const std::string& path);
/// Each pair as ids through vocab.encode (tokens it lacks become kUnk).
std::vector<Example> encode_pairs(const std::vector<TextPair>& pairs, const Vocab& vocab);
/// One vocabulary shared by sources and targets: each pair's source tokens, then its target tokens,
/// in order of first appearance.
Vocab vocab_from_pairs(const std::vector<TextPair>& pairs);

// ---- plain text for language models (src/data/text.cpp) ---------------------------------------
/// The whole file (a UTF-8 byte-order mark dropped). A missing, unreadable or empty file throws
/// IoError "PATH: ..."; invalid UTF-8 throws IoError "PATH:LINE: invalid UTF-8 at byte N of the file".
std::string read_text(const std::string& path);
/// The characters (code points) of `text`, which is valid UTF-8 (read_text's).
int64_t count_characters(const std::string& text);
/// The specials, then every distinct character (code point) of `text` in code-point order: nanoGPT's
/// sorted(set(text)), each id shifted up by the 4 specials.
Vocab char_vocab(const std::string& text);
/// `text` as ids: each line (its newline kept) split by `tokenizer` (chars: one id per character,
/// newlines too), through vocab.encode.
std::vector<int32_t> encode_text(const std::string& text, const Vocab& vocab, const Tokenizer& tokenizer);
/// The block at each offset o as an example without source: tgt = ids[o, o + block + 1) (the inputs
/// and, shifted by one, the targets). An offset whose block passes the end throws IndexError.
std::vector<Example> text_blocks(const std::vector<int32_t>& ids, const std::vector<int64_t>& offsets, int64_t block);
/// `count` offsets spread evenly from 0 to the last one whose block fits in `tokens` ids (fewer when
/// fewer fit; none when no block fits): i * last / (count - 1), rounded down.
std::vector<int64_t> evenly_spaced_offsets(int64_t tokens, int64_t block, int64_t count);
/// Blocks (text_blocks' examples, all of one length N + 1) as a batch: tgt_in [B, N] = the first N ids,
/// tgt_out [B, N] = the last N, no `<bos>`/`<eos>`; src [B, 1] of `<pad>` with src_len 0. Throws
/// ShapeError for a block of another length or with a source.
Batch make_block_batch(const std::vector<Example>& blocks);

}  // namespace tapegrad::data
