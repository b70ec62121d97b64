// The data layer: built-in tasks checked against independent recomputations of their answers,
// vocabularies and their JSON form, UTF-8 tokenisation, TSV parsing and its error positions, and the
// exact padding layout of a batch.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tapegrad/data.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;
using namespace tapegrad::data;

namespace {

// The message of the exception of type E that f throws (fails the test if it throws none).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return "";
}

std::string text(const Vocab& v, const std::vector<int32_t>& ids) {
  return detokenize(v.decode(ids), Tokenization::chars);
}

std::vector<int32_t> ids_of(const Tensor& t) {
  std::vector<int32_t> out;
  for (double x : t.to_vector()) out.push_back(int32_t(x));
  return out;
}

// A file under the system temp directory, removed when the test ends.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name, const std::string& contents) {
    path = std::filesystem::temp_directory_path() /
           ("tapegrad_test_data_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string str() const { return path.string(); }
};

bool is_letter(char c, int symbols) {
  return c >= 'a' && c < 'a' + symbols;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The task's answer for `src`, computed from the text alone (not from the generator's code path),
// after checking that `src` is well-formed for the task. Returns "" and fails on a malformed source.
std::string expected_target(const std::string& task, const std::string& src, int symbols) {
  if (task == "copy" || task == "reverse" || task == "sort") {
    for (char c : src) REQUIRE(is_letter(c, symbols));
    std::string t = src;
    if (task == "reverse") std::reverse(t.begin(), t.end());
    if (task == "sort") std::sort(t.begin(), t.end());
    return t;
  }
  if (task == "recall") {
    // key value key value ... ? key
    REQUIRE(src.size() >= 4);
    REQUIRE(src.size() % 2 == 0);
    REQUIRE(src[src.size() - 2] == '?');
    std::map<char, char> table;
    for (size_t i = 0; i + 2 < src.size(); i += 2) {
      REQUIRE(is_letter(src[i], symbols));
      REQUIRE(is_digit(src[i + 1]));
      REQUIRE(table.emplace(src[i], src[i + 1]).second);  // keys distinct
    }
    const char key = src.back();
    REQUIRE(table.count(key) == 1);
    return std::string(1, table[key]);
  }
  if (task == "rotate") {
    REQUIRE(src.size() >= 2);
    REQUIRE(is_digit(src[0]));
    std::string syms = src.substr(1);
    for (char c : syms) REQUIRE(is_letter(c, symbols));
    const size_t k = size_t(src[0] - '0');
    REQUIRE(k < syms.size());
    std::rotate(syms.begin(), syms.begin() + std::ptrdiff_t(k), syms.end());
    return syms;
  }
  FAIL("no independent check for task " << task);
  return "";
}

}  // namespace

// ---- tasks -------------------------------------------------------------------------------------

TEST_CASE("every task emits well-formed examples with the correct target", "[data]") {
  const auto [name, min_len, max_len, symbols] = GENERATE(table<std::string, int, int, int>({
      {"copy", 1, 5, 3},
      {"copy", 8, 16, 10},
      {"reverse", 1, 6, 2},
      {"reverse", 8, 16, 26},
      {"sort", 1, 7, 4},
      {"sort", 8, 16, 10},
      {"recall", 4, 4, 1},
      {"recall", 8, 16, 10},
      {"recall", 5, 41, 26},
      {"rotate", 2, 2, 1},
      {"rotate", 8, 16, 10},
      {"rotate", 3, 30, 5},
  }));
  CAPTURE(name, min_len, max_len, symbols);
  TaskOptions opt;
  opt.min_len = min_len;
  opt.max_len = max_len;
  opt.symbols = symbols;
  const auto task = make_task(name, opt);
  CHECK(task->name() == name);
  CHECK(task->tokenization() == Tokenization::chars);
  const Vocab& v = task->vocab();
  Generator gen(7);
  std::set<size_t> lengths;
  for (int i = 0; i < 400; ++i) {
    const Example ex = task->sample(gen);
    for (const auto* seq : {&ex.src, &ex.tgt})
      for (int32_t id : *seq) {
        REQUIRE(id >= 4);  // real tokens only: no specials inside an example
        REQUIRE(id < v.size());
      }
    const std::string src = text(v, ex.src), tgt = text(v, ex.tgt);
    CAPTURE(src, tgt);
    REQUIRE(int(ex.src.size()) >= min_len);
    REQUIRE(int(ex.src.size()) <= max_len);
    REQUIRE(src.size() == ex.src.size());  // one character per token
    REQUIRE(tgt == expected_target(name, src, symbols));
    lengths.insert(ex.src.size());
  }
  // Both ends of the length range are reachable (recall only has even lengths 2n+2 with n <= symbols).
  size_t lo = size_t(min_len), hi = size_t(max_len);
  if (name == "recall") {
    lo = size_t(std::max(4, min_len + min_len % 2));
    hi = size_t(std::min(2 * symbols + 2, max_len - max_len % 2));
  }
  CHECK(*lengths.begin() == lo);
  CHECK(*lengths.rbegin() == hi);
}

TEST_CASE("tasks are reproducible for a seed and differ across seeds", "[data]") {
  for (const std::string& name : task_names()) {
    CAPTURE(name);
    const auto task = make_task(name, TaskOptions{});
    Generator a(123), b(123), c(124);
    const auto xa = task->sample_many(a, 50), xb = task->sample_many(b, 50), xc = task->sample_many(c, 50);
    bool same_ab = true, same_ac = true;
    for (size_t i = 0; i < xa.size(); ++i) {
      same_ab = same_ab && xa[i].src == xb[i].src && xa[i].tgt == xb[i].tgt;
      same_ac = same_ac && xa[i].src == xc[i].src && xa[i].tgt == xc[i].tgt;
    }
    CHECK(same_ab);
    CHECK_FALSE(same_ac);
  }
}

TEST_CASE("recall queries every pair position uniformly, including the first", "[data]") {
  TaskOptions opt;
  opt.min_len = opt.max_len = 2 * 8 + 2;  // always 8 pairs
  opt.symbols = 10;
  const auto task = make_task("recall", opt);
  Generator gen(99);
  const int n = 4000;
  std::vector<int> hits(8, 0);
  for (int i = 0; i < n; ++i) {
    const std::string src = text(task->vocab(), task->sample(gen).src);
    const size_t pos = src.find(src.back());  // the key's first occurrence is its pair
    REQUIRE(pos % 2 == 0);
    REQUIRE(pos < 16);
    ++hits[pos / 2];
  }
  CAPTURE(hits);
  // 500 expected per position; the bounds are > 6 standard deviations wide.
  for (int h : hits) {
    CHECK(h > 380);
    CHECK(h < 620);
  }
}

TEST_CASE("pair-recall: distinct keys, one token per pair, the target is the queried pair's value", "[data]") {
  TaskOptions opt;
  opt.min_len = 3;
  opt.max_len = 18;
  opt.symbols = 16;
  const auto task = make_task("pair-recall", opt);
  const Vocab& v = task->vocab();
  Generator gen(5);
  std::vector<int> positions(16, 0);
  for (int i = 0; i < 2000; ++i) {
    const Example e = task->sample(gen);
    const size_t n = e.src.size() - 2;
    REQUIRE(v.token(e.src[n]) == "?");
    const std::string key = v.token(e.src[n + 1]);
    REQUIRE(key.size() == 1);
    REQUIRE(e.tgt.size() == 1);
    std::set<char> keys;
    int found = -1;
    for (size_t p = 0; p < n; ++p) {
      const std::string pair = v.token(e.src[p]);
      REQUIRE(pair.size() == 2);
      CHECK(keys.insert(pair[0]).second);  // distinct keys
      if (pair[0] == key[0]) {
        found = int(p);
        CHECK(v.token(e.tgt[0]) == std::string(1, pair[1]));
      }
    }
    REQUIRE(found >= 0);
    ++positions[size_t(found)];
  }
  CHECK(positions[0] > 0);  // the first pair is queried too
  CHECK(positions[15] > 0);
  CHECK(data::detokenize({"a3", "?", "a"}, task->tokenization()) == "a3 ? a");
}

namespace {

// FNV-1a over every token id of `count` examples of `task` sampled from Generator(seed), with a
// separator between sources, targets and examples.
uint64_t task_fingerprint(const tapegrad::data::Task& task, uint64_t seed, int count) {
  tapegrad::Generator gen(seed);
  uint64_t h = 1469598103934665603ull;
  auto add = [&](int64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ uint64_t((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (int i = 0; i < count; ++i) {
    const tapegrad::data::Example ex = task.sample(gen);
    for (int32_t x : ex.src) add(x);
    add(-1);
    for (int32_t x : ex.tgt) add(x);
    add(-2);
  }
  return h;
}

}  // namespace

TEST_CASE("every built-in task draws exactly the examples it drew before its draws moved to Generator",
          "[data]") {
  // Recorded with the task code as it was (its own rejection sampler, two recall samplers): a seed's
  // data, and so every run on a built-in task, stays bitwise the same.
  const std::map<std::string, uint64_t> recorded = {
      {"copy", 0x00f2298b96a32803ull},   {"reverse", 0x99c1af118367e683ull}, {"sort", 0x06d55554bdd54623ull},
      {"recall", 0xbf4775bc4fb9bbc6ull}, {"rotate", 0x5fe11cc982e7ba98ull},  {"pair-recall", 0x31ed09315e32993bull},
  };
  REQUIRE(recorded.size() == data::task_names().size());
  for (const auto& name : data::task_names()) {
    INFO(name);
    CHECK(task_fingerprint(*data::make_task(name, {4, 20, 12}), 7, 500) == recorded.at(name));
  }
}

TEST_CASE("a task's vocabulary is fixed by its options and covers everything it emits", "[data]") {
  TaskOptions opt;
  opt.symbols = 5;
  opt.min_len = 4;  // pair-recall needs min_len - 2 distinct keys
  for (const std::string& name : task_names()) {
    CAPTURE(name);
    const auto t1 = make_task(name, opt), t2 = make_task(name, opt);
    CHECK(t1->vocab().tokens() == t2->vocab().tokens());
    CHECK(t1->options().symbols == 5);
    std::vector<std::string> expect = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e"};
    const bool recall = name == "recall" || name == "pair-recall";
    if (recall || name == "rotate")
      for (char d = '0'; d <= '9'; ++d) expect.push_back(std::string(1, d));
    if (recall) expect.push_back("?");
    if (name == "pair-recall")
      for (char k = 'a'; k <= 'e'; ++k)
        for (char d = '0'; d <= '9'; ++d) expect.push_back(std::string{k, d});
    CHECK(t1->vocab().tokens() == expect);
    CHECK(t1->tokenization() == (name == "pair-recall" ? Tokenization::whitespace : Tokenization::chars));
    // Everything a task emits is in its vocabulary (no <unk>), and sources lie in [min_len, max_len].
    Generator gen(3);
    for (const auto& e : t1->sample_many(gen, 200)) {
      CHECK(int(e.src.size()) >= opt.min_len);
      CHECK(int(e.src.size()) <= opt.max_len);
      for (int32_t id : e.src) CHECK(id > kUnk);
      for (int32_t id : e.tgt) CHECK(id > kUnk);
    }
    CHECK_FALSE(t1->description().empty());
  }
}

TEST_CASE("bad task names and options are rejected with the offending name", "[data]") {
  CHECK_THAT(message_of<Error>([] { make_task("shuffle", TaskOptions{}); }),
             Catch::Contains("shuffle") && Catch::Contains("copy, reverse, sort, recall, rotate, pair-recall"));
  CHECK(task_names() == std::vector<std::string>{"copy", "reverse", "sort", "recall", "rotate", "pair-recall"});
  const auto bad = [](const std::string& task, int min_len, int max_len, int symbols) {
    TaskOptions o;
    o.min_len = min_len;
    o.max_len = max_len;
    o.symbols = symbols;
    return message_of<Error>([&] { make_task(task, o); });
  };
  CHECK_THAT(bad("copy", 8, 16, 0), Catch::Contains("symbols=0"));
  CHECK_THAT(bad("sort", 8, 16, 27), Catch::Contains("symbols=27"));
  CHECK_THAT(bad("reverse", 0, 16, 10), Catch::Contains("min_len=0"));
  CHECK_THAT(bad("copy", 8, 4, 10), Catch::Contains("max_len=4") && Catch::Contains("min_len=8"));
  CHECK_THAT(bad("copy", 8, 1000000, 10), Catch::Contains("max_len=1000000"));
  CHECK_THAT(bad("rotate", 1, 5, 10), Catch::Contains("min_len=1"));
  CHECK_THAT(bad("recall", 1, 3, 10), Catch::Contains("max_len=3"));
  CHECK_THAT(bad("pair-recall", 1, 2, 10), Catch::Contains("max_len=2") && Catch::Contains("task pair-recall"));
  CHECK_THAT(bad("pair-recall", 13, 20, 10), Catch::Contains("min_len=13") && Catch::Contains("symbols=10"));
  CHECK_THAT(bad("recall", 30, 40, 10), Catch::Contains("min_len=30") && Catch::Contains("symbols=10"));
  CHECK_THAT(bad("recall", 9, 9, 10), Catch::Contains("min_len=9 max_len=9"));
  CHECK_THAT(bad("recall", 9, 9, 10), Catch::Contains("task recall"));
}

// ---- vocabulary ----------------------------------------------------------------------------------

TEST_CASE("vocab builds in first-appearance order, encodes unknowns as <unk>, decodes to <eos>", "[data]") {
  const Vocab v = Vocab::build({{"b", "a", "b"}, {"c", "a"}});
  CHECK(v.tokens() == std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "b", "a", "c"});
  CHECK(v.size() == 7);
  CHECK(v.id("<pad>") == kPad);
  CHECK(v.id("<bos>") == kBos);
  CHECK(v.id("<eos>") == kEos);
  CHECK(v.id("<unk>") == kUnk);
  CHECK(v.encode({"c", "z", "b"}) == std::vector<int32_t>{6, kUnk, 4});
  CHECK(v.decode({kBos, 4, kPad, 5, kUnk, kEos, 6, 6}) == std::vector<std::string>{"b", "a", "<unk>"});
  CHECK(v.decode({}).empty());
  CHECK_THAT(message_of<IndexError>([&] { v.token(7); }), Catch::Contains("7") && Catch::Contains("[0, 7)"));
  CHECK_THROWS_AS(v.token(-1), IndexError);
  CHECK(Vocab().size() == 4);
  CHECK(Vocab::from_tokens({"x", "y"}).id("y") == 5);
  CHECK_THAT(message_of<Error>([] { Vocab::from_tokens({"x", "y", "x"}); }), Catch::Contains("'x'"));
  CHECK_THROWS_AS(Vocab::from_tokens({"<eos>"}), Error);
}

TEST_CASE("vocab json round-trips", "[data]") {
  const Vocab v = Vocab::build({tokenize("naïve 日本 \"q\"\\", Tokenization::chars)});
  const std::string j = v.to_json();
  CHECK(j.front() == '[');
  const Vocab w = Vocab::from_json(j);
  CHECK(w.tokens() == v.tokens());
  CHECK(w.id("日") == v.id("日"));
  CHECK(w.id("\"") == v.id("\""));
  CHECK(Vocab::from_json(Vocab().to_json()).size() == 4);
  CHECK_THROWS_AS(Vocab::from_tokens({"\xff"}).to_json(), Error);
}

TEST_CASE("vocab json rejects malformed input with a clear message", "[data]") {
  const auto [json, expect] = GENERATE(table<std::string, std::string>({
      {"", "not valid JSON"},
      {"[\"<pad>\", ", "not valid JSON"},
      {"{\"a\": 1}", "expected an array"},
      {"[\"<pad>\", \"<bos>\", \"<eos>\"]", "at least the 4 specials"},
      {"[\"<pad>\", \"<eos>\", \"<bos>\", \"<unk>\"]", "entry 1: expected special '<bos>'"},
      {"[\"<pad>\", \"<bos>\", \"<eos>\", \"<unk>\", 5]", "entry 4: expected a string"},
      {"[\"<pad>\", \"<bos>\", \"<eos>\", \"<unk>\", \"a\", \"b\", \"a\"]",
       "entry 6: duplicate token 'a' (first at entry 4)"},
      {"[\"<pad>\", \"<bos>\", \"<eos>\", \"<unk>\", \"<pad>\"]", "entry 4: duplicate token '<pad>'"},
      {"[\"<pad>\", \"<bos>\", \"<eos>\", \"<unk>\", \"\"]", "entry 4: empty token"},
  }));
  CAPTURE(json);
  CHECK_THAT(message_of<IoError>([&] { Vocab::from_json(json); }),
             Catch::Contains("vocab json") && Catch::Contains(expect));
}

// ---- tokenisation --------------------------------------------------------------------------------

TEST_CASE("chars tokenisation keeps multi-byte UTF-8 characters whole", "[data]") {
  const std::string s = "aé日😀 b";  // 1, 2, 3, 4-byte characters, a space
  const auto toks = tokenize(s, Tokenization::chars);
  CHECK(toks == std::vector<std::string>{"a", "é", "日", "😀", " ", "b"});
  CHECK(detokenize(toks, Tokenization::chars) == s);
  CHECK(tokenize("", Tokenization::chars).empty());
  // Combining marks are code points of their own (no normalisation).
  CHECK(tokenize("e\xCC\x81", Tokenization::chars).size() == 2);
  // Malformed bytes become single-byte tokens and still round-trip.
  const std::string bad = "a\xff\xe6\x97z\xe6";  // stray byte, truncated sequence, truncated at the end
  const auto bt = tokenize(bad, Tokenization::chars);
  CHECK(bt == std::vector<std::string>{"a", "\xff", "\xe6", "\x97", "z", "\xe6"});
  CHECK(detokenize(bt, Tokenization::chars) == bad);
  CHECK(first_invalid_utf8(s) == -1);
  CHECK(first_invalid_utf8(bad) == 1);
  CHECK(first_invalid_utf8("ok\xC0\x80") == 2);        // overlong NUL
  CHECK(first_invalid_utf8("\xED\xA0\x80") == 0);      // surrogate
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0);  // above U+10FFFF
}

TEST_CASE("whitespace tokenisation splits on runs of spaces and tabs", "[data]") {
  const auto toks = tokenize("  the\t cat  sat日 ", Tokenization::whitespace);
  CHECK(toks == std::vector<std::string>{"the", "cat", "sat日"});
  CHECK(detokenize(toks, Tokenization::whitespace) == "the cat sat日");
  CHECK(tokenize(" \t ", Tokenization::whitespace).empty());
  CHECK(parse_tokenization("chars") == Tokenization::chars);
  CHECK(parse_tokenization("whitespace") == Tokenization::whitespace);
  CHECK(std::string(tokenization_name(Tokenization::whitespace)) == "whitespace");
  CHECK_THAT(message_of<Error>([] { parse_tokenization("bytes"); }),
             Catch::Contains("bytes") && Catch::Contains("chars"));
}

TEST_CASE("the chars and whitespace tokenizers are exactly tokenize and detokenize, on either side", "[data]") {
  const std::string s = "  el niño\tcomió  日😀 ";
  for (const Tokenization t : {Tokenization::chars, Tokenization::whitespace}) {
    const auto tok = make_tokenizer(t);
    CHECK(tok->kind() == t);
    for (const Side side : {Side::source, Side::target}) {
      CHECK(tok->tokenize(s, side) == tokenize(s, t));
      CHECK(tok->detokenize(tokenize(s, t), side) == detokenize(tokenize(s, t), t));
    }
  }
  // SentencePiece pieces need a model: the model-free entry points say so instead of guessing.
  CHECK_THAT(message_of<Error>([] { make_tokenizer(Tokenization::sentencepiece); }),
             Catch::Contains("sentencepiece") && Catch::Contains("model"));
  CHECK_THROWS_AS(tokenize("x", Tokenization::sentencepiece), Error);
  CHECK(parse_tokenization("sentencepiece") == Tokenization::sentencepiece);
}

// ---- TSV -----------------------------------------------------------------------------------------

TEST_CASE("read_tsv parses pairs, counting blank lines, keeping '#' lines as data, stripping \\r", "[data]") {
  const TempFile f("good.tsv", "\nthe cat\tle chat\r\n   \ndog\tchien\n#x\ty\nnaïve\t日本");
  int64_t blank = 0;
  auto pairs = read_tsv(f.str(), Tokenization::whitespace, &blank);
  CHECK(blank == 2);
  REQUIRE(pairs.size() == 4);
  CHECK(pairs[0].src == std::vector<std::string>{"the", "cat"});
  CHECK(pairs[0].tgt == std::vector<std::string>{"le", "chat"});
  CHECK(pairs[0].line == 2);
  CHECK(pairs[1].src == std::vector<std::string>{"dog"});
  CHECK(pairs[2].src == std::vector<std::string>{"#x"});  // a source may start with '#'
  CHECK(pairs[2].line == 5);
  CHECK(pairs[3].tgt == std::vector<std::string>{"日本"});
  pairs.erase(pairs.begin() + 2);  // the vocabulary below is of the other three
  const auto chars = read_tsv(f.str(), Tokenization::chars);
  CHECK(chars[3].src == std::vector<std::string>{"n", "a", "ï", "v", "e"});
  CHECK(chars[0].tgt.back() == "t");  // the \r is gone

  const Vocab v = vocab_from_pairs(pairs);
  CHECK(v.tokens() == std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "the", "cat", "le", "chat",
                                               "dog", "chien", "naïve", "日本"});
  const auto ex = encode_pairs({{{"dog", "emu"}, {"chien"}}}, v);
  REQUIRE(ex.size() == 1);
  CHECK(ex[0].src == std::vector<int32_t>{8, kUnk});
  CHECK(ex[0].tgt == std::vector<int32_t>{9});
}

TEST_CASE("read_tsv names the path and the 1-based line of a bad line", "[data]") {
  const auto [line, expect] = GENERATE(table<std::string, std::string>({
      {"no tab here", "no tab in 'no tab here'"},
      {"a\tb\tc", "2 tabs in 'a\\tb\\tc'"},
      {"\tb", "an empty source"},
      {"a\t", "an empty target"},
      {"a\t  ", "an empty target"},  // whitespace-only side: no tokens
  }));
  CAPTURE(line);
  // Line 5: after a '#' data line, a blank line, a good line and a CRLF good line.
  const TempFile f("bad.tsv", "# header\tline\n\nx\ty\nx\ty\r\n" + line + "\nok\tok\n");
  const std::string msg = message_of<IoError>([&] { read_tsv(f.str(), Tokenization::whitespace); });
  CHECK_THAT(msg, Catch::StartsWith(f.str() + ":5: expected 'source<TAB>target', found "));
  CHECK_THAT(msg, Catch::Contains(expect));
}

TEST_CASE("read_tsv rejects missing, empty and non-UTF-8 files", "[data]") {
  const std::string missing = (std::filesystem::temp_directory_path() / "tapegrad_no_such_file.tsv").string();
  CHECK_THAT(message_of<IoError>([&] { read_tsv(missing, Tokenization::chars); }),
             Catch::StartsWith(missing + ": cannot open"));
  const TempFile empty("empty.tsv", "\n  \n");
  CHECK_THAT(message_of<IoError>([&] { read_tsv(empty.str(), Tokenization::chars); }),
             Catch::StartsWith(empty.str() + ": no"));
  const TempFile latin1("latin1.tsv", "ok\tfine\ncaf\xe9\tx\n");
  CHECK_THAT(message_of<IoError>([&] { read_tsv(latin1.str(), Tokenization::chars); }),
             Catch::StartsWith(latin1.str() + ":2: invalid UTF-8 at byte 4"));
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THAT(message_of<IoError>([&] { read_tsv(dir, Tokenization::chars); }), Catch::Contains(dir));
}

// ---- batches -------------------------------------------------------------------------------------

TEST_CASE("make_batch pads sources and targets with the documented layout", "[data]") {
  // B = 3, S = 3 (longest source), T = 4 (longest target 3, + <bos>/<eos>).
  const Batch b = make_batch({{{4, 5, 6}, {7}}, {{8}, {9, 10, 11}}, {{12, 13}, {}}});
  CHECK(b.batch_size() == 3);
  CHECK(b.src.dtype() == DType::i32);
  CHECK(b.src.shape() == Shape{3, 3});
  CHECK(b.tgt_in.shape() == Shape{3, 4});
  CHECK(b.tgt_out.shape() == Shape{3, 4});
  CHECK(ids_of(b.src) == std::vector<int32_t>{4, 5, 6,  //
                                              8, 0, 0,  //
                                              12, 13, 0});
  CHECK(ids_of(b.tgt_in) == std::vector<int32_t>{1, 7, 0, 0,    //
                                                 1, 9, 10, 11,  //
                                                 1, 0, 0, 0});
  CHECK(ids_of(b.tgt_out) == std::vector<int32_t>{7, 2, 0, 0,    //
                                                  9, 10, 11, 2,  //
                                                  2, 0, 0, 0});
  CHECK(b.src_len == std::vector<int64_t>{3, 1, 2});
  CHECK(b.tgt_len == std::vector<int64_t>{2, 4, 1});
  CHECK(b.target_tokens() == 7);
}

TEST_CASE("make_batch keeps at least one column and rejects bad input", "[data]") {
  const Batch b = make_batch({{{}, {}}});
  CHECK(b.src.shape() == Shape{1, 1});
  CHECK(ids_of(b.src) == std::vector<int32_t>{kPad});
  CHECK(ids_of(b.tgt_in) == std::vector<int32_t>{kBos});
  CHECK(ids_of(b.tgt_out) == std::vector<int32_t>{kEos});
  CHECK(b.src_len == std::vector<int64_t>{0});
  CHECK_THAT(message_of<Error>([] { make_batch({}); }),
             Catch::Contains("make_batch") && Catch::Contains("no examples"));
  CHECK_THROWS_AS(make_batch({{{4}, {4}}, {{4, -1}, {4}}}), IndexError);
}

TEST_CASE("a task batch decodes back to its examples", "[data]") {
  const auto task = make_task("recall", TaskOptions{});
  Generator gen(5);
  const auto exs = task->sample_many(gen, 16);
  const Batch b = make_batch(exs);
  const auto src = ids_of(b.src), out = ids_of(b.tgt_out);
  const int64_t S = b.src.size(1), T = b.tgt_out.size(1);
  for (size_t i = 0; i < exs.size(); ++i) {
    const std::vector<int32_t> row(src.begin() + int64_t(i) * S, src.begin() + int64_t(i + 1) * S);
    const std::vector<int32_t> orow(out.begin() + int64_t(i) * T, out.begin() + int64_t(i + 1) * T);
    CHECK(task->vocab().decode(row) == task->vocab().decode(exs[i].src));
    CHECK(task->vocab().decode(orow) == task->vocab().decode(exs[i].tgt));
  }
}
