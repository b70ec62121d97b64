// Subword tokenisation through Debian's libsentencepiece: training a model on lines in memory, loading
// one from its serialized bytes, and splitting text into its pieces and joining them back.
//
// Every model is made (or, when a user brings one, required) to put the four specials at ids 0-3 with
// the Vocab's spellings, so that a piece id is a tapegrad vocabulary id and outside tools reading the
// .model file agree with a checkpoint. Training is made deterministic: SentencePiece otherwise samples
// and shuffles its input when it is large, and its thread count splits its sums.
//
// Line breaks (plain text for a language model): SentencePiece's normaliser turns "\n" into a space,
// so a model trained for text gets "\n" as a user-defined piece (id 4, right after the specials) and
// the text is encoded line by line with that piece between lines, rather than letting SentencePiece
// see the "\n" itself: each line then starts with the word-start mark, as every line it was trained
// on did, and decoding line by line gives back the lines without a stray space after each break.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "src/data/whole_file.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

const char* sentencepiece_type_name(SentencePieceType t) {
  return t == SentencePieceType::bpe ? "bpe" : "unigram";
}

SentencePieceType parse_sentencepiece_type(const std::string& name) {
  if (name == "unigram") return SentencePieceType::unigram;
  if (name == "bpe") return SentencePieceType::bpe;
  throw Error("unknown SentencePiece model type '" + name + "' (valid: unigram, bpe)");
}

struct SentencePieceTokenizer::Impl {
  std::string source_bytes, target_bytes;  // target_bytes empty: joint
  sentencepiece::SentencePieceProcessor source, target;

  const sentencepiece::SentencePieceProcessor& processor(Side side) const {
    return side == Side::target && !target_bytes.empty() ? target : source;
  }
};

namespace {

// SentencePiece's status text without its source position ("Internal: ./src/x.cc(660) [cond] msg").
std::string status_message(const sentencepiece::util::Status& status) {
  std::string text = status.ToString();
  if (const size_t bracket = text.rfind("] "); bracket != std::string::npos) text = text.substr(bracket + 2);
  return text;
}

// Feeds lines held in memory to SentencePiece's trainer, in order.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::vector<const std::vector<std::string>*> parts) : parts_(std::move(parts)) { skip_empty(); }
  bool done() const override { return part_ >= parts_.size(); }
  void Next() override {
    ++line_;
    skip_empty();
  }
  const std::string& value() const override { return (*parts_[part_])[line_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void skip_empty() {
    while (part_ < parts_.size() && line_ >= parts_[part_]->size()) ++part_, line_ = 0;
  }
  std::vector<const std::vector<std::string>*> parts_;
  size_t part_ = 0, line_ = 0;
};

constexpr const char* kSpecials[] = {"<pad>", "<bos>", "<eos>", "<unk>"};
constexpr char kNewlinePiece[] = "\n";

bool has_newline_piece(const sentencepiece::SentencePieceProcessor& p) {
  return p.PieceToId(kNewlinePiece) != p.unk_id();
}

std::string train_model(const std::vector<const std::vector<std::string>*>& parts, const SentencePieceOptions& o) {
  std::unordered_map<std::string, std::string> spec = {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", sentencepiece_type_name(o.type)},
      {"pad_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"unk_id", "3"},
      {"pad_piece", kSpecials[0]}, {"bos_piece", kSpecials[1]},
      {"eos_piece", kSpecials[2]}, {"unk_piece", kSpecials[3]},
      // Deterministic: every sentence, in the order given (no sampling, no shuffle), and a thread
      // count fixed here rather than taken from the machine, since it splits the trainer's sums.
      {"input_sentence_size", "0"}, {"shuffle_input_sentence", "false"}, {"num_threads", "2"},
      // Spanish and English need every character they use; pieces cover all of the training text.
      {"character_coverage", "1.0"},
      // SentencePiece's progress log is for its own command-line tool; errors come back as status.
      {"minloglevel", "2"},
  };
  if (o.newline_piece) spec.emplace("user_defined_symbols", kNewlinePiece);
  LineIterator lines(parts);
  std::string proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &lines, &proto);
  if (!status.ok()) {
    const std::string message = status_message(status);
    if (message.find("ocabulary size") != std::string::npos)
      throw Error("--vocab-size " + std::to_string(o.vocab_size) + ": SentencePiece cannot reach it on this text: " +
                  message);
    throw Error("SentencePiece training failed: " + message);
  }
  return proto;
}

void load_into(sentencepiece::SentencePieceProcessor& p, const std::string& bytes, const std::string& what) {
  if (const auto status = p.LoadFromSerializedProto(bytes); !status.ok())
  {
    const std::string why = status_message(status);
    throw Error(what + ": not a SentencePiece model" + (why.empty() ? std::string() : " (" + why + ")"));
  }
  for (int id = 0; id < 4; ++id)
    if (id >= p.GetPieceSize() || p.IdToPiece(id) != kSpecials[id])
      throw Error(what + ": SentencePiece id " + std::to_string(id) + " is '" +
                  (id < p.GetPieceSize() ? p.IdToPiece(id) : std::string()) + "', expected '" + kSpecials[id] +
                  "' (train it with --pad_id=0 --bos_id=1 --eos_id=2 --unk_id=3 --pad_piece=<pad> "
                  "--bos_piece=<bos> --eos_piece=<eos> --unk_piece=<unk>)");
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::shared_ptr<const SentencePieceTokenizer> SentencePieceTokenizer::train(const std::vector<std::string>& source,
                                                                            const std::vector<std::string>& target,
                                                                            const SentencePieceOptions& options) {
  if (options.separate_sides && target.empty())
    throw Error("--spm-sides separate: there is no target side to train a second model on");
  if (!options.separate_sides) return from_models(train_model({&source, &target}, options), "", "trained model");
  return from_models(train_model({&source}, options), train_model({&target}, options), "trained model");
}

std::shared_ptr<const SentencePieceTokenizer> SentencePieceTokenizer::from_models(const std::string& source,
                                                                                  const std::string& target,
                                                                                  const std::string& what) {
  auto impl = std::make_unique<Impl>();
  impl->source_bytes = source;
  impl->target_bytes = target;
  load_into(impl->source, source, what + (target.empty() ? "" : " (source)"));
  if (!target.empty()) load_into(impl->target, target, what + " (target)");
  return std::make_shared<const SentencePieceTokenizer>(std::move(impl));
}

std::shared_ptr<const SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  return from_models(read_whole_file(path, "a SentencePiece .model file"), "", path);
}

std::vector<std::string> SentencePieceTokenizer::tokenize(const std::string& text, Side side) const {
  const auto& processor = impl_->processor(side);
  const auto encode = [&](const std::string& line, std::vector<std::string>& pieces) {
    std::vector<std::string> line_pieces;
    if (const auto status = processor.Encode(line, &line_pieces); !status.ok())
      throw Error("SentencePiece cannot encode the text: " + status_message(status));
    pieces.insert(pieces.end(), line_pieces.begin(), line_pieces.end());
  };
  std::vector<std::string> pieces;
  if (!has_newline_piece(processor)) {
    encode(text, pieces);
    return pieces;
  }
  for (size_t begin = 0;;) {
    const size_t nl = text.find('\n', begin);
    encode(text.substr(begin, nl - begin), pieces);
    if (nl == std::string::npos) return pieces;
    pieces.push_back(kNewlinePiece);
    begin = nl + 1;
  }
}

std::string SentencePieceTokenizer::detokenize(const std::vector<std::string>& tokens, Side side) const {
  const auto& processor = impl_->processor(side);
  const auto decode = [&](auto begin, auto end, std::string& text) {
    std::string line;
    if (const auto status = processor.Decode(std::vector<std::string>(begin, end), &line); !status.ok())
      throw Error("SentencePiece cannot decode the pieces: " + status_message(status));
    text += line;
  };
  std::string text;
  if (!has_newline_piece(processor)) {
    decode(tokens.begin(), tokens.end(), text);
    return text;
  }
  for (auto begin = tokens.begin();;) {
    const auto nl = std::find(begin, tokens.end(), kNewlinePiece);
    decode(begin, nl, text);
    if (nl == tokens.end()) return text;
    text += '\n';
    begin = nl + 1;
  }
}

bool SentencePieceTokenizer::keeps_line_breaks() const { return has_newline_piece(impl_->source); }

bool SentencePieceTokenizer::joint() const { return impl_->target_bytes.empty(); }

const std::string& SentencePieceTokenizer::model(Side side) const {
  return side == Side::target && !joint() ? impl_->target_bytes : impl_->source_bytes;
}

std::vector<std::string> SentencePieceTokenizer::vocabulary() const {
  std::vector<std::string> tokens;
  std::unordered_set<std::string> seen;
  for (const auto* p : {&impl_->source, joint() ? nullptr : &impl_->target}) {
    if (!p) continue;
    for (int id = 0; id < p->GetPieceSize(); ++id)
      if (seen.insert(p->IdToPiece(id)).second) tokens.push_back(p->IdToPiece(id));
  }
  return tokens;
}

}  // namespace tapegrad::data
