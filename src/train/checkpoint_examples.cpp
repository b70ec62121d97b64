// Examples for a loaded checkpoint (train.hpp's examples_for_checkpoint): from a TSV file or a built-in
// task, always as ids of the checkpoint's own vocabulary. What `tapegrad eval` scores and what
// `tapegrad tape --checkpoint` steps on.
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

}  // namespace tapegrad::train
