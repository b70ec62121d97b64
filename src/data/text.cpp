// Plain text for language models: a file read whole (UTF-8 checked), its character vocabulary, its
// ids, and contiguous blocks of them as examples and batches (x = ids[o, o + N), y = ids[o + 1, o + N + 1)).
// Not here: which offsets a step takes (the trainer draws them from the seed and the step) or the
// train/validation split.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "src/data/whole_file.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

std::string read_text(const std::string& path) {
  std::string text = read_whole_file(path, "a text file");
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // UTF-8 byte-order mark
  if (text.empty()) throw IoError(path + ": empty file, expected text");
  if (const int64_t bad = first_invalid_utf8(text); bad >= 0) {
    const int64_t line = 1 + std::count(text.begin(), text.begin() + bad, '\n');
    throw IoError(path + ":" + std::to_string(line) + ": invalid UTF-8 at byte " + std::to_string(bad) +
                  " of the file");
  }
  return text;
}

int64_t count_characters(const std::string& text) {
  // Every code point has exactly one byte that is not a continuation byte (10xxxxxx).
  return std::count_if(text.begin(), text.end(), [](char b) { return (static_cast<unsigned char>(b) & 0xC0) != 0x80; });
}

Vocab char_vocab(const std::string& text) {
  // UTF-8 byte order is code-point order, so a sorted set of the characters is Python's sorted(set(text)).
  const std::vector<std::string> chars = tokenize(text, Tokenization::chars);
  const std::set<std::string> distinct(chars.begin(), chars.end());
  return Vocab::from_tokens({distinct.begin(), distinct.end()});
}

std::vector<int32_t> encode_text(const std::string& text, const Vocab& vocab, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  // Line by line (newlines kept), so the tokens of a large file never exist all at once.
  for (size_t begin = 0; begin < text.size();) {
    const size_t nl = text.find('\n', begin);
    const size_t end = nl == std::string::npos ? text.size() : nl + 1;
    const std::vector<int32_t> line = vocab.encode(tokenizer.tokenize(text.substr(begin, end - begin)));
    ids.insert(ids.end(), line.begin(), line.end());
    begin = end;
  }
  return ids;
}

std::vector<Example> text_blocks(const std::vector<int32_t>& ids, const std::vector<int64_t>& offsets, int64_t block) {
  std::vector<Example> blocks;
  for (int64_t o : offsets) {
    if (o < 0 || block < 1 || o + block + 1 > int64_t(ids.size()))
      throw IndexError("text_blocks: a block of " + std::to_string(block) + " (+1) tokens at offset " +
                       std::to_string(o) + " passes the end of " + std::to_string(ids.size()) + " tokens");
    blocks.push_back({{}, {ids.begin() + o, ids.begin() + o + block + 1}});
  }
  return blocks;
}

std::vector<int64_t> evenly_spaced_offsets(int64_t tokens, int64_t block, int64_t count) {
  const int64_t last = tokens - block - 1;  // the last offset whose block and target fit
  if (last < 0 || count <= 0) return {};
  count = std::min(count, last + 1);
  std::vector<int64_t> offsets;
  for (int64_t i = 0; i < count; ++i) offsets.push_back(count == 1 ? 0 : i * last / (count - 1));
  return offsets;
}

Batch make_block_batch(const std::vector<Example>& blocks) {
  if (blocks.empty()) throw Error("make_block_batch: no blocks");
  const int64_t B = int64_t(blocks.size()), N = int64_t(blocks[0].tgt.size()) - 1;
  std::vector<int32_t> x, y;
  for (const Example& e : blocks) {
    if (!e.src.empty() || int64_t(e.tgt.size()) != N + 1 || N < 1)
      throw ShapeError("make_block_batch: every block needs no source and " + std::to_string(N + 1) +
                       " tokens, got one of " + std::to_string(e.tgt.size()));
    x.insert(x.end(), e.tgt.begin(), e.tgt.end() - 1);
    y.insert(y.end(), e.tgt.begin() + 1, e.tgt.end());
  }
  Batch batch;
  batch.src = Tensor::from_ids(std::vector<int32_t>(size_t(B), kPad), {B, 1});
  batch.tgt_in = Tensor::from_ids(x, {B, N});
  batch.tgt_out = Tensor::from_ids(y, {B, N});
  batch.src_len.assign(size_t(B), 0);
  batch.tgt_len.assign(size_t(B), N);
  return batch;
}

}  // namespace tapegrad::data
