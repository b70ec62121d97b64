// Data for sequence-to-sequence training: vocabularies, tokenisation, built-in seeded tasks, TSV
// files of `source<TAB>target` lines, and padded batches with the tensors models consume.
//
// Ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 <unk> in every vocabulary; real tokens start at 4.
// A Batch holds int32 tensors, batch-first: src [B, S], tgt_in [B, T] (<bos> + target) and
// tgt_out [B, T] (target + <eos>); positions past a sequence's end hold <pad>, and the loss ignores
// <pad> in tgt_out (ignore_index = kPad).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tapegrad/tensor.hpp"

namespace tapegrad::data {

inline constexpr int32_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;

enum class Tokenization { chars, whitespace };
const char* tokenization_name(Tokenization t);
Tokenization parse_tokenization(const std::string& name);  // "chars" | "whitespace"; throws Error

// Splits a line into tokens: one token per UTF-8 byte sequence (chars) or per whitespace-separated word.
std::vector<std::string> tokenize(const std::string& line, Tokenization t);
// Joins tokens back: concatenated (chars) or space-separated (whitespace).
std::string detokenize(const std::vector<std::string>& tokens, Tokenization t);

class Vocab {
 public:
  Vocab();  // only the four specials
  // Specials, then every token of `sequences` in order of first appearance (deterministic).
  static Vocab build(const std::vector<std::vector<std::string>>& sequences);
  static Vocab from_tokens(const std::vector<std::string>& tokens_after_specials);
  int32_t add(const std::string& token);  // returns its id (existing or new)
  int32_t id(const std::string& token) const;  // kUnk if unknown
  const std::string& token(int32_t id) const;  // throws IndexError if out of range
  int64_t size() const { return int64_t(tokens_.size()); }
  std::vector<int32_t> encode(const std::vector<std::string>& tokens) const;
  // Stops at <eos>; drops <pad> and <bos>.
  std::vector<std::string> decode(const std::vector<int32_t>& ids) const;
  const std::vector<std::string>& tokens() const { return tokens_; }
  // JSON array of all tokens (specials included), and back; from_json validates and throws IoError.
  std::string to_json() const;
  static Vocab from_json(const std::string& json);

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
};

// One training pair as ids, without <bos>/<eos>.
struct Example {
  std::vector<int32_t> src, tgt;
};

struct Batch {
  Tensor src;      // int32 [B, S], <pad>-padded
  Tensor tgt_in;   // int32 [B, T]: <bos> t1 .. tn, <pad>-padded
  Tensor tgt_out;  // int32 [B, T]: t1 .. tn <eos>, <pad>-padded
  std::vector<int64_t> src_len, tgt_len;  // real lengths (tgt_len counts <eos>)
  int64_t batch_size() const { return int64_t(src_len.size()); }
  int64_t target_tokens() const;  // non-pad tokens in tgt_out
};

// Pads to the longest source / target in `examples` (at least 1 position each).
Batch make_batch(const std::vector<Example>& examples);

// ---- built-in tasks, generated from a seed ----------------------------------------------------
struct TaskOptions {
  int min_len = 8;      // source length range (inclusive)
  int max_len = 16;
  int symbols = 10;     // distinct content symbols, at most 26 (letters a..)
};

// A task produces examples from a Generator; its vocabulary is fixed by its options.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual Example sample(Generator& gen) const = 0;
  const Vocab& vocab() const { return vocab_; }
  Tokenization tokenization() const { return Tokenization::chars; }

 protected:
  Vocab vocab_;
};

// Names: copy, reverse, sort, recall (long-range: key-value pairs then a query key; the target is the
// value stored with it, possibly far back), rotate (order-sensitive: the first digit k says how far to
// rotate the rest). Throws Error naming the valid tasks for an unknown name.
std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options);
std::vector<std::string> task_names();

// ---- TSV files ---------------------------------------------------------------------------------
struct TextPair {
  std::vector<std::string> src, tgt;
};
// Reads `source<TAB>target` lines (blank lines and lines starting with '#' are skipped). A line
// without exactly one tab, or with an empty side, throws IoError "PATH:LINE: ..."; a missing file too.
std::vector<TextPair> read_tsv(const std::string& path, Tokenization t);
std::vector<Example> encode_pairs(const std::vector<TextPair>& pairs, const Vocab& vocab);

}  // namespace tapegrad::data
