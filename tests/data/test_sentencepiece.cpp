// SentencePiece tokens in the data layer: accented Spanish and English round-trip through the pieces,
// piece ids are the vocabulary's ids, training is deterministic, a model trained for text keeps its
// line breaks, and what SentencePiece refuses (a size it cannot reach, a file that is no model, a model
// with other specials) is one clear error.
#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

using namespace tapegrad;
using namespace tapegrad::data;

namespace {

// A small bilingual corpus with accents and punctuation, built here (no data files).
struct Corpus {
  std::vector<std::string> es, en;
};
Corpus corpus() {
  const std::vector<std::pair<std::string, std::string>> words = {
      {"el niño", "the child"}, {"comió", "ate"},   {"una manzana", "an apple"}, {"árbol", "tree"},
      {"canción", "song"},      {"corazón", "heart"}, {"mañana", "morning"},    {"pequeño", "small"},
      {"¿dónde?", "where?"},    {"está", "is"},     {"la casa", "the house"},    {"azúcar", "sugar"}};
  Corpus c;
  for (size_t i = 0; i < 240; ++i) {
    std::string es, en;
    for (size_t k = 0; k < 3 + i % 5; ++k) {
      const auto& w = words[(i * 7 + k * 5 + i / 11) % words.size()];
      es += (k ? " " : "") + w.first;
      en += (k ? " " : "") + w.second;
    }
    c.es.push_back(es + ".");
    c.en.push_back(en + ".");
  }
  return c;
}

}  // namespace

TEST_CASE("SentencePiece pieces round-trip accented Spanish and English text, unigram and BPE", "[data][spm]") {
  const Corpus c = corpus();
  for (const auto type : {SentencePieceType::unigram, SentencePieceType::bpe}) {
    CAPTURE(sentencepiece_type_name(type));
    const auto tok = SentencePieceTokenizer::train(c.es, c.en, {60, type, false});
    CHECK(tok->kind() == Tokenization::sentencepiece);
    for (const std::string line : {"¿dónde está el corazón pequeño?", "the child ate an apple.", "azúcar, mañana"}) {
      const auto pieces = tok->tokenize(line);
      CHECK(pieces.size() > 1);
      CHECK(tok->detokenize(pieces) == line);
    }
  }
}

TEST_CASE("a piece's SentencePiece id is its vocabulary id, the specials first", "[data][spm]") {
  const Corpus c = corpus();
  const auto tok = SentencePieceTokenizer::train(c.es, c.en, {60, SentencePieceType::unigram, false});
  const std::vector<std::string> pieces = tok->vocabulary();
  REQUIRE(pieces.size() == 60);
  const Vocab v = Vocab::from_tokens({pieces.begin() + 4, pieces.end()});
  CHECK(v.tokens() == pieces);  // ids 0-3 are the specials in both
  // Encoding through the vocabulary and decoding back gives the text.
  const auto ids = v.encode(tok->tokenize("el niño comió una manzana."));
  for (int32_t id : ids) CHECK(id > kUnk);
  CHECK(tok->detokenize(v.decode(ids)) == "el niño comió una manzana.");
  // A character the model never saw is a piece of its own, unknown to the vocabulary.
  const auto unseen = v.encode(tok->tokenize("el 日"));
  CHECK(std::count(unseen.begin(), unseen.end(), kUnk) == 1);
  // The model's bytes load back into the same vocabulary.
  const auto again = SentencePieceTokenizer::from_models(tok->model(Side::source), "", "bytes");
  CHECK(again->vocabulary() == pieces);
}

TEST_CASE("separate sides: each side its own model, one vocabulary (source pieces, then the target's new ones)",
          "[data][spm]") {
  const Corpus c = corpus();
  const auto tok = SentencePieceTokenizer::train(c.es, c.en, {40, SentencePieceType::bpe, true});
  CHECK_FALSE(tok->joint());
  CHECK(tok->model(Side::source) != tok->model(Side::target));
  const auto src_only = SentencePieceTokenizer::from_models(tok->model(Side::source), "", "source");
  const auto tgt_only = SentencePieceTokenizer::from_models(tok->model(Side::target), "", "target");
  const auto pieces = tok->vocabulary();
  const auto src_pieces = src_only->vocabulary(), tgt_pieces = tgt_only->vocabulary();
  CHECK(std::vector<std::string>(pieces.begin(), pieces.begin() + 40) == src_pieces);
  for (const auto& p : tgt_pieces) CHECK(std::count(pieces.begin(), pieces.end(), p) == 1);
  CHECK(pieces.size() < src_pieces.size() + tgt_pieces.size() - 4);  // shared pieces appear once
  CHECK(tok->tokenize("the child ate", Side::target) == tgt_only->tokenize("the child ate"));
  CHECK(tok->detokenize(tok->tokenize("corazón", Side::source), Side::source) == "corazón");
}

TEST_CASE("SentencePiece training is deterministic: the same lines and options give the same model bytes",
          "[data][spm]") {
  const Corpus c = corpus();
  for (const auto type : {SentencePieceType::unigram, SentencePieceType::bpe}) {
    const auto a = SentencePieceTokenizer::train(c.es, c.en, {40, type, false});
    const auto b = SentencePieceTokenizer::train(c.es, c.en, {40, type, false});
    CHECK(a->model(Side::source) == b->model(Side::source));
    // ... and they depend on the lines: other text, other model.
    const std::vector<std::string> half(c.es.begin(), c.es.begin() + 100);
    const auto other = SentencePieceTokenizer::train(half, c.en, {40, type, false});
    CHECK(other->model(Side::source) != a->model(Side::source));
  }
}

TEST_CASE("a model trained for text keeps line breaks: '\\n' is piece 4, between lines encoded alone, and decodes to a line break",
          "[data][spm]") {
  const Corpus c = corpus();
  const std::string text = "the child ate an apple.\nwhere? is the house.\n\nthe song\n";
  for (const auto type : {SentencePieceType::unigram, SentencePieceType::bpe}) {
    CAPTURE(sentencepiece_type_name(type));
    const auto tok = SentencePieceTokenizer::train(c.en, {}, {.vocab_size = 40, .type = type, .newline_piece = true});
    CHECK(tok->keeps_line_breaks());
    CHECK(tok->vocabulary()[4] == "\n");
    const auto pieces = tok->tokenize(text);
    CHECK(std::count(pieces.begin(), pieces.end(), "\n") == 4);
    // Each line is encoded on its own: the pieces after a line break are the line's pieces alone.
    const auto second = tok->tokenize("where? is the house.");
    CHECK(std::equal(second.begin(), second.end(), std::find(pieces.begin(), pieces.end(), "\n") + 1));
    CHECK(tok->detokenize(pieces) == text);
    CHECK(tok->detokenize(tok->tokenize("\n")) == "\n");
  }
  // A translation model has no such piece: SentencePiece's normaliser makes line breaks spaces.
  const auto pairs = SentencePieceTokenizer::train(c.es, c.en, {60, SentencePieceType::unigram, false});
  CHECK_FALSE(pairs->keeps_line_breaks());
  CHECK(pairs->detokenize(pairs->tokenize(text)).find('\n') == std::string::npos);
}

TEST_CASE("what SentencePiece refuses is one error naming the option or the file", "[data][spm]") {
  const Corpus c = corpus();
  CHECK_THROWS_WITH(SentencePieceTokenizer::train(c.es, c.en, {100000, SentencePieceType::unigram, false}),
                    Catch::StartsWith("--vocab-size 100000: SentencePiece cannot reach it") &&
                        Catch::Contains("<="));
  const auto dir = std::filesystem::temp_directory_path();
  const std::string not_model = (dir / "tapegrad-spm-not-a-model.model").string();
  std::ofstream(not_model) << "el niño\tthe child\n";
  CHECK_THROWS_WITH(SentencePieceTokenizer::load(not_model),
                    Catch::StartsWith(not_model + ": not a SentencePiece model"));
  std::filesystem::remove(not_model);
  CHECK_THROWS_WITH(SentencePieceTokenizer::load((dir / "tapegrad-no-such.model").string()),
                    Catch::Contains("tapegrad-no-such.model: cannot open"));
}
