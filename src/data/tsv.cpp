// Reading `source<TAB>target` files into token pairs, and mapping pairs to ids.
//
// Strict about structure (exactly one tab, both sides non-empty after tokenisation, valid UTF-8) and
// every complaint names PATH:LINE, because a silently skipped or mis-split line in a training set is
// far harder to find later. Not here: quoting or escaping (a tab cannot occur inside a side), other
// encodings, streaming of files that do not fit in memory.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

namespace {

// The line as it should appear in an error message: tabs shown as \t, cut to a readable length.
std::string quote_line(const std::string& line) {
  constexpr size_t kMax = 60;
  std::string out;
  for (size_t i = 0; i < line.size() && i < kMax; ++i)
    out += line[i] == '\t' ? std::string("\\t") : std::string(1, line[i]);
  if (line.size() > kMax) out += "...";
  return "'" + out + "'";
}

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t") == std::string::npos;
}

// Whether `tok` is the text of one of the special tokens every vocabulary starts with.
bool spells_special(const std::string& tok) {
  static const Vocab specials;  // only the specials
  for (int32_t id = 0; id < int32_t(specials.size()); ++id)
    if (tok == specials.token(id)) return true;
  return false;
}

}  // namespace

TsvText read_tsv_text(const std::string& path, int64_t* blank_lines) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IoError(path + ": is a directory, expected a TSV file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open: " + std::strerror(errno));

  TsvText text;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineno == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
    if (is_blank(line)) {
      if (blank_lines) ++*blank_lines;
      continue;
    }
    const std::string at = path + ":" + std::to_string(lineno) + ": ";
    const std::string expected = at + "expected 'source<TAB>target', found ";
    const size_t tab = line.find('\t');
    if (tab == std::string::npos)
      throw IoError(expected + "no tab in " + quote_line(line));
    const size_t tabs = size_t(std::count(line.begin(), line.end(), '\t'));
    if (tabs > 1) throw IoError(expected + std::to_string(tabs) + " tabs in " + quote_line(line));
    if (const int64_t bad = first_invalid_utf8(line); bad >= 0)
      throw IoError(at + "invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line");
    text.src.push_back(line.substr(0, tab));
    text.tgt.push_back(line.substr(tab + 1));
    text.line.push_back(lineno);
  }
  if (in.bad()) throw IoError(path + ": read error: " + std::strerror(errno));
  if (text.src.empty())
    throw IoError(path + ": no 'source<TAB>target' lines (the file is empty or blank)");
  return text;
}

std::vector<TextPair> tokenize_tsv(const TsvText& text, const Tokenizer& tokenizer, const std::string& path) {
  std::vector<TextPair> pairs;
  pairs.reserve(text.src.size());
  for (size_t i = 0; i < text.src.size(); ++i) {
    const std::string at = path + ":" + std::to_string(text.line[i]) + ": ";
    const std::string expected = at + "expected 'source<TAB>target', found ";
    const std::string line = text.src[i] + "\t" + text.tgt[i];
    TextPair p{tokenizer.tokenize(text.src[i], Side::source), tokenizer.tokenize(text.tgt[i], Side::target),
               text.line[i]};
    if (p.src.empty()) throw IoError(expected + "an empty source in " + quote_line(line));
    if (p.tgt.empty()) throw IoError(expected + "an empty target in " + quote_line(line));
    // A word spelling a special (e.g. "<eos>") would silently become that id and end or pad the sequence.
    for (const auto* side : {&p.src, &p.tgt})
      for (const std::string& tok : *side)
        if (spells_special(tok))
          throw IoError(at + "the token '" + tok +
                        "' is reserved (<pad>, <bos>, <eos>, <unk> are special ids)");
    pairs.push_back(std::move(p));
  }
  return pairs;
}

std::vector<TextPair> read_tsv(const std::string& path, const Tokenizer& tokenizer, int64_t* blank_lines) {
  return tokenize_tsv(read_tsv_text(path, blank_lines), tokenizer, path);
}

std::vector<TextPair> read_tsv(const std::string& path, Tokenization t, int64_t* blank_lines) {
  return read_tsv(path, *make_tokenizer(t), blank_lines);
}

std::vector<Example> encode_pairs(const std::vector<TextPair>& pairs, const Vocab& vocab) {
  std::vector<Example> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs) out.push_back({vocab.encode(p.src), vocab.encode(p.tgt)});
  return out;
}

Vocab vocab_from_pairs(const std::vector<TextPair>& pairs) {
  Vocab v;
  for (const auto& p : pairs) {
    for (const auto& tok : p.src) v.add(tok);
    for (const auto& tok : p.tgt) v.add(tok);
  }
  return v;
}

}  // namespace tapegrad::data
