// Examples for a loaded checkpoint (train.hpp's examples_for_checkpoint): from a TSV file or a built-in
// task, always as ids of the checkpoint's own vocabulary. What `tapegrad eval` scores and what
// `tapegrad tape --checkpoint` steps on.
#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

CheckpointExamples examples_for_checkpoint(const LoadedModel& m, const CheckpointExampleSource& source,
                                           const std::string& what) {
  CheckpointExamples out;
  if (!source.tsv.empty()) {
    out.tokenization = m.options.tokens;
    const std::vector<data::TextPair> pairs = data::read_tsv(source.tsv, out.tokenization);
    out.examples = data::encode_pairs(pairs, m.vocab);
    for (const auto& p : pairs) out.target_text.push_back(p.tgt_text);
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
  Generator gen(source.seed);
  out.examples = task->sample_many(gen, source.count);
  for (const auto& e : out.examples) out.target_text.push_back(data::detokenize(task->vocab().decode(e.tgt), out.tokenization));
  return out;
}

}  // namespace tapegrad::train
