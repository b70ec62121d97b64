// Examples for a loaded checkpoint (train.hpp's examples_for_checkpoint): from a TSV file or a built-in
// task, always as ids of the checkpoint's own vocabulary. What `tapegrad eval` scores and what
// `tapegrad tape --checkpoint` steps on. And text blocks for a language-model checkpoint
// (text_for_checkpoint), what `tapegrad eval --text` scores.
#include <algorithm>

#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

CheckpointExamples examples_for_checkpoint(const LoadedModel& m, const CheckpointExampleSource& source,
                                           const std::string& what) {
  CheckpointExamples out;
  if (!source.tsv.empty()) {
    out.tokenization = m.options.tokens;
    // A LoadedModel assembled by hand (not by load_checkpoint) may lack one; chars/whitespace need no model.
    out.tokenizer = m.tokenizer ? m.tokenizer : data::make_tokenizer(out.tokenization);
    const data::TsvText text = data::read_tsv_text(source.tsv);
    out.examples = data::encode_pairs(data::tokenize_tsv(text, *out.tokenizer, source.tsv), m.vocab);
    out.target_text = text.tgt;
    for (const auto& e : out.examples)
      for (const auto* side : {&e.src, &e.tgt}) {
        out.tokens += int64_t(side->size());
        out.unknown_tokens += std::count(side->begin(), side->end(), data::kUnk);
      }
    return out;
  }
  if (source.task.empty() && !m.options.train.empty())
    throw Error(what + ": this checkpoint was trained on " + m.options.train +
                "; pass --valid FILE.tsv");
  const std::string name = source.task.empty() ? m.options.task : source.task;
  const auto task =
      data::make_task(name, source.task_options ? *source.task_options : m.options.task_options);
  // The same ids must mean the same tokens as in training.
  if (task->vocab().tokens() != m.vocab.tokens())
    throw Error(what + ": task '" + name +
                "' with these options has a different vocabulary than the checkpoint");
  out.tokenization = task->tokenization();
  out.tokenizer = data::make_tokenizer(out.tokenization);
  Generator gen(source.seed);
  out.examples = task->sample_many(gen, source.count);
  for (const auto& e : out.examples)
    out.target_text.push_back(out.tokenizer->detokenize(task->vocab().decode(e.tgt), data::Side::target));
  return out;
}

CheckpointText text_for_checkpoint(const LoadedModel& m, const std::string& path, int64_t count) {
  const std::string text = data::read_text(path);
  const auto tokenizer = m.tokenizer ? m.tokenizer : data::make_tokenizer(m.options.tokens);
  const std::vector<int32_t> ids = data::encode_text(text, m.vocab, *tokenizer);
  const int64_t block = m.options.block_size;  // as it trained (the gpt's positions cover one block)
  if (int64_t(ids.size()) < block + 1)
    throw IoError(path + ": holds " + std::to_string(ids.size()) + " tokens, fewer than the checkpoint's block size " +
                  std::to_string(block) + " + 1");
  CheckpointText out;
  out.blocks = data::text_blocks(ids, data::evenly_spaced_offsets(int64_t(ids.size()), block, count), block);
  out.tokens = int64_t(ids.size());
  out.unknown_tokens = std::count(ids.begin(), ids.end(), data::kUnk);
  if (m.options.tokens == data::Tokenization::sentencepiece)  // as the training run's validation
    out.characters_per_token = double(data::count_characters(text)) / double(ids.size());
  return out;
}

}  // namespace tapegrad::train
