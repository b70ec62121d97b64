// Fuzz target: TSV training data. read_tsv takes a path, so the bytes go to a scratch file; accepted
// pairs are then turned into a vocabulary and ids as training does.
#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"
#include "targets.hpp"

namespace tapegrad::fuzz {

void tsv(const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/data.tsv";
  write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  for (const data::Tokenization t : {data::Tokenization::chars, data::Tokenization::whitespace}) {
    try {
      const auto pairs = data::read_tsv(path, t);
      const data::Vocab v = data::vocab_from_pairs(pairs);
      const auto examples = data::encode_pairs(pairs, v);
      require(examples.size() == pairs.size(), "encode_pairs lost pairs");
      for (size_t i = 0; i < pairs.size(); ++i) {
        require(!pairs[i].src.empty() && !pairs[i].tgt.empty(), "an accepted pair with an empty side");
        require(v.decode(examples[i].src) == pairs[i].src, "a source does not decode to its tokens");
        require(v.decode(examples[i].tgt) == pairs[i].tgt, "a target does not decode to its tokens");
      }
    } catch (const Error&) {
      // refused cleanly
    }
  }
}

}  // namespace tapegrad::fuzz
