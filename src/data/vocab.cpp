// Vocab: the token <-> id table, with the four specials at fixed ids, and its JSON form (which the
// checkpoint metadata carries so a trained model can decode). It knows nothing about tokenisation.
#include <nlohmann/json.hpp>

#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

namespace {
const char* const kSpecials[] = {"<pad>", "<bos>", "<eos>", "<unk>"};
}  // namespace

Vocab::Vocab() {
  for (const char* s : kSpecials) add(s);
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sequences) {
  Vocab v;
  for (const auto& seq : sequences)
    for (const auto& tok : seq) v.add(tok);
  return v;
}

Vocab Vocab::from_tokens(const std::vector<std::string>& tokens_after_specials) {
  Vocab v;
  for (size_t i = 0; i < tokens_after_specials.size(); ++i) {
    const std::string& tok = tokens_after_specials[i];
    // A silent merge would shift every later id away from its position in the list.
    if (v.index_.count(tok))
      throw Error("Vocab::from_tokens: token '" + tok + "' at position " + std::to_string(i) +
                  " is a duplicate or a special");
    v.add(tok);
  }
  return v;
}

int32_t Vocab::add(const std::string& token) {
  auto it = index_.find(token);
  if (it != index_.end()) return it->second;
  const auto id = int32_t(tokens_.size());
  tokens_.push_back(token);
  index_.emplace(token, id);
  return id;
}

int32_t Vocab::id(const std::string& token) const {
  auto it = index_.find(token);
  return it == index_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= int32_t(tokens_.size()))
    throw IndexError("Vocab::token: id " + std::to_string(id) + " out of range [0, " +
                     std::to_string(tokens_.size()) + ")");
  return tokens_[size_t(id)];
}

std::vector<int32_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(id(t));
  return ids;
}

std::vector<std::string> Vocab::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> out;
  for (int32_t i : ids) {
    if (i == kEos) break;
    if (i == kPad || i == kBos) continue;
    out.push_back(token(i));
  }
  return out;
}

std::string Vocab::to_json() const {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (first_invalid_utf8(tokens_[i]) >= 0)
      throw Error("Vocab::to_json: token " + std::to_string(i) + " is not valid UTF-8");
  return nlohmann::json(tokens_).dump();
}

Vocab Vocab::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw IoError(std::string("vocab json: not valid JSON: ") + e.what());
  }
  if (!j.is_array())
    throw IoError(std::string("vocab json: expected an array of strings, found ") + j.type_name());
  if (j.size() < 4)
    throw IoError("vocab json: expected at least the 4 specials, found " + std::to_string(j.size()) +
                  " entries");
  Vocab v;
  v.tokens_.clear();
  v.index_.clear();
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string where = "vocab json: entry " + std::to_string(i);
    if (!j[i].is_string()) throw IoError(where + ": expected a string, found " + j[i].dump());
    const std::string tok = j[i].get<std::string>();
    if (i < 4 && tok != kSpecials[i])
      throw IoError(where + ": expected special '" + kSpecials[i] + "', found '" + tok + "'");
    if (tok.empty()) throw IoError(where + ": empty token");
    auto it = v.index_.find(tok);
    if (it != v.index_.end())
      throw IoError(where + ": duplicate token '" + tok + "' (first at entry " + std::to_string(it->second) +
                    ")");
    v.add(tok);
  }
  return v;
}

}  // namespace tapegrad::data
