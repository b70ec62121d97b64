// Fuzz target: the vocabulary JSON stored in checkpoints. An accepted vocabulary must survive
// to_json/from_json unchanged and map every token to its own id.
#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"
#include "targets.hpp"

namespace tapegrad::fuzz {

void vocab(const uint8_t* data, size_t size) {
  data::Vocab v;
  try {
    v = data::Vocab::from_json(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const Error&) {
    return;  // refused cleanly
  }
  require(v.size() >= 4, "an accepted vocabulary without the four specials");
  for (int64_t i = 0; i < v.size(); ++i)
    require(v.id(v.token(int32_t(i))) == int32_t(i), "a token that does not map back to its id");
  const data::Vocab again = data::Vocab::from_json(v.to_json());  // must not throw: v came from JSON
  require(again.tokens() == v.tokens(), "a vocabulary changed in a to_json/from_json round trip");
}

}  // namespace tapegrad::fuzz
