// Tokenisation: splitting a line into tokens and joining them back, for the two schemes that need no
// model (chars, whitespace), and the Tokenizer that wraps them (SentencePiece's is in sentencepiece.cpp).
//
// chars splits at UTF-8 code-point boundaries so that "é" or "日" stays one token; it does not
// normalise (NFC/NFD) or group combining marks, and it does not validate: a malformed byte becomes a
// token of its own, so detokenize(tokenize(s)) == s for every byte string. Files are validated for
// UTF-8 where they are read (tsv.cpp), which is where a position can be reported.
#include <string>
#include <vector>

#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

const char* tokenization_name(Tokenization t) {
  switch (t) {
    case Tokenization::chars:
      return "chars";
    case Tokenization::whitespace:
      return "whitespace";
    case Tokenization::sentencepiece:
      return "sentencepiece";
  }
  return "?";
}

Tokenization parse_tokenization(const std::string& name) {
  if (name == "chars") return Tokenization::chars;
  if (name == "whitespace") return Tokenization::whitespace;
  if (name == "sentencepiece") return Tokenization::sentencepiece;
  throw Error("unknown tokenization '" + name + "' (valid: chars, whitespace, sentencepiece)");
}

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 1 if it is malformed (a stray
// continuation byte, a truncated sequence, an overlong form, a surrogate, or above U+10FFFF).
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4;
  else
    return 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 1;
  // The second byte's range rules out overlong forms, surrogates and code points past U+10FFFF.
  const unsigned char c1 = b(i + 1);
  if (c == 0xE0 && c1 < 0xA0) return 1;
  if (c == 0xED && c1 > 0x9F) return 1;
  if (c == 0xF0 && c1 < 0x90) return 1;
  if (c == 0xF4 && c1 > 0x8F) return 1;
  return n;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

// Byte offset of the first malformed UTF-8 byte in s, or -1 if s is valid (used by tsv.cpp and vocab.cpp).
int64_t first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return int64_t(i);
    i += n;
  }
  return -1;
}

std::vector<std::string> tokenize(const std::string& line, Tokenization t) {
  if (t == Tokenization::sentencepiece) (void)make_tokenizer(t);  // throws: the pieces need a model
  std::vector<std::string> out;
  if (t == Tokenization::chars) {
    for (size_t i = 0; i < line.size();) {
      const size_t n = utf8_sequence_length(line, i);
      out.push_back(line.substr(i, n));
      i += n;
    }
    return out;
  }
  for (size_t i = 0; i < line.size();) {
    while (i < line.size() && is_space(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::string detokenize(const std::vector<std::string>& tokens, Tokenization t) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (t == Tokenization::whitespace && i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

namespace {

// chars and whitespace need no model and treat both sides alike.
class SplittingTokenizer final : public Tokenizer {
 public:
  explicit SplittingTokenizer(Tokenization t) : t_(t) {}
  Tokenization kind() const override { return t_; }
  std::vector<std::string> tokenize(const std::string& text, Side) const override {
    return data::tokenize(text, t_);
  }
  std::string detokenize(const std::vector<std::string>& tokens, Side) const override {
    return data::detokenize(tokens, t_);
  }

 private:
  Tokenization t_;
};

}  // namespace

std::shared_ptr<const Tokenizer> make_tokenizer(Tokenization t) {
  if (t == Tokenization::sentencepiece)
    throw Error("tokenization 'sentencepiece' needs a model (train one, or load it from a file or checkpoint)");
  return std::make_shared<SplittingTokenizer>(t);
}

}  // namespace tapegrad::data
