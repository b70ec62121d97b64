// The built-in seeded tasks: synthetic sequence-to-sequence problems whose answers are known exactly,
// for training and testing models without a data set. Each task's vocabulary is a function of its
// options alone (letters a.., then digits 0-9 and "?" where the task uses them), so a checkpoint's
// vocabulary decodes whatever the task emits. Every token is one character, so `translate` can read
// plain lines with chars tokenisation.
//
//   copy     "cabd"      -> "cabd"    source = L random symbols, target = source
//   reverse  "cabd"      -> "dbac"    target = source reversed
//   sort     "cabd"      -> "abcd"    target = source sorted ascending (repeats kept)
//   recall   "a3c7b1?c"  -> "7"       n pairs key,value (keys distinct letters, values digits), then
//                                     "?" and one of the keys; target = its value. L = 2n + 2, and the
//                                     queried pair is uniform over all n, so it is often far back.
//   rotate   "2abcde"    -> "cdeab"   a digit k < min(10, L-1), then L-1 symbols; target = the
//                                     symbols rotated left by k.
//
// L is the source length and lies in [min_len, max_len]. Not here: curricula, noise, or tasks with
// multi-character tokens.
#include <algorithm>
#include <string>

#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

namespace {

// Guards against a typo producing sequences no model here can train on in reasonable time.
constexpr int kMaxTaskLen = 4096;

const std::vector<std::string> kTaskNames = {"copy", "reverse", "sort", "recall", "rotate", "pair-recall"};

// Every draw goes through Generator::uniform_int (unbiased, and the same numbers with any standard
// library), so the same seed gives the same data everywhere.
int uniform_int(Generator& gen, int lo, int hi) {
  return int(gen.uniform_int(lo, hi));
}

std::string letter(int i) {
  return std::string(1, char('a' + i));
}
std::string digit(int d) {
  return std::string(1, char('0' + d));
}

// Bounds on recall's pair count n, from L = 2n + 2 in [min_len, max_len] and n distinct keys.
struct PairRange {
  int lo, hi;
};
PairRange recall_pairs(const TaskOptions& o) {
  return {std::max(1, (o.min_len - 2 + 1) / 2), std::min(o.symbols, (o.max_len - 2) / 2)};
}
// pair-recall: L = n + 2.
PairRange pair_recall_pairs(const TaskOptions& o) {
  return {std::max(1, o.min_len - 2), std::min(o.symbols, o.max_len - 2)};
}

// Distinct keys: the first n entries of a partial Fisher-Yates shuffle of the letters.
std::vector<int> distinct_keys(Generator& gen, int n, int symbols) {
  std::vector<int> keys(static_cast<size_t>(symbols));
  for (int i = 0; i < symbols; ++i) keys[size_t(i)] = i;
  gen.shuffle_prefix(keys, size_t(n));
  keys.resize(size_t(n));
  return keys;
}

// Shared setup: the vocabulary (letters, then digits and "?" if used) and the ids of each group.
class BuiltinTask : public Task {
 protected:
  BuiltinTask(const std::string& name, const TaskOptions& options, bool digits, bool question) {
    validate_task_options(name, options);
    options_ = options;
    std::vector<std::string> toks;
    for (int i = 0; i < options.symbols; ++i) toks.push_back(letter(i));
    if (digits)
      for (int d = 0; d < 10; ++d) toks.push_back(digit(d));
    if (question) toks.push_back("?");
    vocab_ = Vocab::from_tokens(toks);
    for (int i = 0; i < options.symbols; ++i) letter_ids_.push_back(vocab_.id(letter(i)));
    if (digits)
      for (int d = 0; d < 10; ++d) digit_ids_.push_back(vocab_.id(digit(d)));
    question_id_ = question ? vocab_.id("?") : kUnk;
  }

  std::vector<int32_t> random_symbols(Generator& gen, int n) const {
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (auto& x : out) x = letter_ids_[size_t(uniform_int(gen, 0, options_.symbols - 1))];
    return out;
  }

  std::vector<int32_t> letter_ids_, digit_ids_;
  int32_t question_id_ = kUnk;
};

class CopyTask : public BuiltinTask {
 public:
  explicit CopyTask(const TaskOptions& o) : BuiltinTask("copy", o, false, false) {}
  std::string name() const override { return "copy"; }
  std::string description() const override { return "copy: target = source, e.g. cabd -> cabd"; }
  Example sample(Generator& gen) const override {
    Example ex;
    ex.src = random_symbols(gen, uniform_int(gen, options_.min_len, options_.max_len));
    ex.tgt = ex.src;
    return ex;
  }
};

class ReverseTask : public BuiltinTask {
 public:
  explicit ReverseTask(const TaskOptions& o) : BuiltinTask("reverse", o, false, false) {}
  std::string name() const override { return "reverse"; }
  std::string description() const override { return "reverse: target = source reversed, e.g. cabd -> dbac"; }
  Example sample(Generator& gen) const override {
    Example ex;
    ex.src = random_symbols(gen, uniform_int(gen, options_.min_len, options_.max_len));
    ex.tgt.assign(ex.src.rbegin(), ex.src.rend());
    return ex;
  }
};

class SortTask : public BuiltinTask {
 public:
  explicit SortTask(const TaskOptions& o) : BuiltinTask("sort", o, false, false) {}
  std::string name() const override { return "sort"; }
  std::string description() const override {
    return "sort: target = source symbols in ascending order, repeats kept, e.g. cabd -> abcd";
  }
  Example sample(Generator& gen) const override {
    Example ex;
    ex.src = random_symbols(gen, uniform_int(gen, options_.min_len, options_.max_len));
    ex.tgt = ex.src;
    // Letter ids are assigned in alphabetical order, so sorting ids sorts symbols.
    std::sort(ex.tgt.begin(), ex.tgt.end());
    return ex;
  }
};

// The sampler of both recall tasks: n pairs (n uniform over the task's pair range) with distinct keys
// and uniform digit values, written by write_pair, then "?" and the key of one pair; the target is that
// pair's value. The queried pair is uniform over all n, so the answer sits anywhere from the first pair
// to the last.
class RecallSampler : public BuiltinTask {
 protected:
  using BuiltinTask::BuiltinTask;
  virtual PairRange pair_range() const = 0;
  virtual void write_pair(std::vector<int32_t>& src, int key, int value) const = 0;

 public:
  Example sample(Generator& gen) const final {
    const PairRange r = pair_range();
    const int n = uniform_int(gen, r.lo, r.hi);
    const std::vector<int> keys = distinct_keys(gen, n, options_.symbols);
    Example ex;
    std::vector<int> values(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      values[size_t(i)] = uniform_int(gen, 0, 9);
      write_pair(ex.src, keys[size_t(i)], values[size_t(i)]);
    }
    const int q = uniform_int(gen, 0, n - 1);
    ex.src.push_back(question_id_);
    ex.src.push_back(letter_ids_[size_t(keys[size_t(q)])]);
    ex.tgt = {digit_ids_[size_t(values[size_t(q)])]};
    return ex;
  }
};

// A pair is two tokens, the key's letter and the value's digit.
class RecallTask : public RecallSampler {
 public:
  explicit RecallTask(const TaskOptions& o) : RecallSampler("recall", o, true, true) {}
  std::string name() const override { return "recall"; }
  std::string description() const override {
    return "recall: key-value pairs (distinct letter keys, digit values), then '?' and a key; target = its "
           "value, e.g. a3c7b1?c -> 7";
  }

 protected:
  PairRange pair_range() const override { return recall_pairs(options_); }
  void write_pair(std::vector<int32_t>& src, int key, int value) const override {
    src.push_back(letter_ids_[size_t(key)]);
    src.push_back(digit_ids_[size_t(value)]);
  }
};

// A pair is one token, "a0" .. ; the pair tokens follow the built-in ones, so the vocabulary is a
// function of the options.
class PairRecallTask : public RecallSampler {
 public:
  explicit PairRecallTask(const TaskOptions& o) : RecallSampler("pair-recall", o, true, true) {
    for (int k = 0; k < o.symbols; ++k)
      for (int d = 0; d < 10; ++d) pair_ids_.push_back(vocab_.add(letter(k) + digit(d)));
    tokenization_ = Tokenization::whitespace;
  }
  std::string name() const override { return "pair-recall"; }
  std::string description() const override {
    return "pair-recall: key-value pairs as single tokens (distinct keys), then '?' and a key; target = its "
           "value, e.g. a3 c7 b1 ? c -> 7";
  }

 protected:
  PairRange pair_range() const override { return pair_recall_pairs(options_); }
  void write_pair(std::vector<int32_t>& src, int key, int value) const override {
    src.push_back(pair_ids_[size_t(key * 10 + value)]);
  }

 private:
  std::vector<int32_t> pair_ids_;  // [key * 10 + value]
};

class RotateTask : public BuiltinTask {
 public:
  explicit RotateTask(const TaskOptions& o) : BuiltinTask("rotate", o, true, false) {}
  std::string name() const override { return "rotate"; }
  std::string description() const override {
    return "rotate: a digit k, then symbols; target = the symbols rotated left by k, e.g. 2abcde -> cdeab";
  }
  Example sample(Generator& gen) const override {
    const int n = uniform_int(gen, options_.min_len, options_.max_len) - 1;
    // k < n, so every k gives a different rotation and the digit always matters.
    const int k = uniform_int(gen, 0, std::min(9, n - 1));
    const std::vector<int32_t> syms = random_symbols(gen, n);
    Example ex;
    ex.src.push_back(digit_ids_[size_t(k)]);
    ex.src.insert(ex.src.end(), syms.begin(), syms.end());
    ex.tgt.resize(size_t(n));
    for (int i = 0; i < n; ++i) ex.tgt[size_t(i)] = syms[size_t((i + k) % n)];
    return ex;
  }
};

std::string valid_names() {
  std::string s;
  for (const auto& n : kTaskNames) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void validate_task_options(const std::string& task, const TaskOptions& o) {
  if (std::find(kTaskNames.begin(), kTaskNames.end(), task) == kTaskNames.end())
    throw Error("unknown task '" + task + "' (valid: " + valid_names() + ")");
  const std::string where = "task " + task + ": ";
  if (o.symbols < 1 || o.symbols > 26)
    throw Error(where + "symbols=" + std::to_string(o.symbols) + " must be in 1..26 (letters a..z)");
  if (o.min_len < 1) throw Error(where + "min_len=" + std::to_string(o.min_len) + " must be at least 1");
  if (o.max_len < o.min_len)
    throw Error(where + "max_len=" + std::to_string(o.max_len) +
                " is less than min_len=" + std::to_string(o.min_len));
  if (o.max_len > kMaxTaskLen)
    throw Error(where + "max_len=" + std::to_string(o.max_len) + " exceeds the limit " +
                std::to_string(kMaxTaskLen));
  if (task == "rotate" && o.min_len < 2)
    throw Error(where + "min_len=" + std::to_string(o.min_len) +
                " is too short: a source is a digit and at least one symbol (length >= 2)");
  if (task == "pair-recall") {
    if (o.max_len < 3)
      throw Error(where + "max_len=" + std::to_string(o.max_len) +
                  " is too short: a source is at least one pair token, '?' and a key (length >= 3)");
    if (pair_recall_pairs(o).lo > o.symbols)
      throw Error(where + "min_len=" + std::to_string(o.min_len) + " needs " + std::to_string(o.min_len - 2) +
                  " pairs with distinct keys, but symbols=" + std::to_string(o.symbols));
  }
  if (task == "recall") {
    if (o.max_len < 4)
      throw Error(where + "max_len=" + std::to_string(o.max_len) +
                  " is too short: a source is at least one key-value pair, '?' and a key (length >= 4)");
    const PairRange r = recall_pairs(o);
    if (r.lo > o.symbols)
      throw Error(where + "min_len=" + std::to_string(o.min_len) + " needs at least " + std::to_string(r.lo) +
                  " pairs with distinct keys, but symbols=" + std::to_string(o.symbols));
    if (r.lo > r.hi)
      throw Error(where + "min_len=" + std::to_string(o.min_len) + " max_len=" + std::to_string(o.max_len) +
                  " allow no source length of the form 2 * pairs + 2");
  }
}

std::vector<Example> Task::sample_many(Generator& gen, int64_t n) const {
  std::vector<Example> out;
  out.reserve(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) out.push_back(sample(gen));
  return out;
}

std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options) {
  if (name == "copy") return std::make_unique<CopyTask>(options);
  if (name == "reverse") return std::make_unique<ReverseTask>(options);
  if (name == "sort") return std::make_unique<SortTask>(options);
  if (name == "recall") return std::make_unique<RecallTask>(options);
  if (name == "rotate") return std::make_unique<RotateTask>(options);
  if (name == "pair-recall") return std::make_unique<PairRecallTask>(options);
  throw Error("unknown task '" + name + "' (valid: " + valid_names() + ")");
}

std::vector<std::string> task_names() {
  return kTaskNames;
}

}  // namespace tapegrad::data
