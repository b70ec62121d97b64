// `tapegrad generate`: continue a prompt with a language-model checkpoint (--model gpt), sampling as
// nanoGPT's sample.py does (temperature, top-k, a seed), with the blocks' KV caches or without them.
#include <cstdio>
#include <memory>

#include "cli.hpp"
#include "tapegrad/models/gpt.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::cli {

Runner add_generate(CLI::App& app) {
  struct Args {
    std::string checkpoint, prompt = "\n";
    models::GenerateOptions o{.max_new_tokens = 200, .temperature = 0.8, .top_k = 200, .seed = 1337};
    bool no_cache = false;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("generate",
                                 "Continue a prompt with a language-model checkpoint (train --model gpt --text); "
                                 "prints the prompt and its continuation.\n"
                                 "Example: tapegrad generate --checkpoint runs/gpt --prompt 'In the beginning'");
  sub->add_option("--checkpoint", a->checkpoint, "Checkpoint directory of a gpt")->required();
  sub->add_option("--prompt", a->prompt,
                  "Text to continue; only its last block-size tokens are the model's context (default: a newline)");
  sub->add_option("--max-new-tokens", a->o.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(int_range(0, 1 << 24));
  sub->add_option("--temperature", a->o.temperature, "Divides the logits before sampling (0: greedy)")
      ->capture_default_str()
      ->check(finite_range(0, 1e6));
  sub->add_option("--top-k", a->o.top_k, "Sample among the k most likely tokens (0: all; 1: greedy)")
      ->capture_default_str()
      ->check(int_range(0, 1 << 24));
  add_seed_option(sub, &a->o.seed, "Seed of the sampling (one seed, one text)")->capture_default_str();
  sub->add_flag("--no-cache", a->no_cache,
                "Recompute the whole context for every token instead of keeping each block's keys and values");
  sub->add_option("--threads", a->threads, "Kernel threads")->check(int_range(1, 1024));
  return [a] {
    if (a->threads > 0) runtime::set_num_threads(a->threads);
    train::LoadedModel m = train::load_checkpoint(a->checkpoint);
    auto* gpt = dynamic_cast<models::Gpt*>(m.model.get());
    if (!gpt)
      throw Error("generate: " + a->checkpoint + " holds a " + models::model_name(m.model->config().kind) +
                  " model; generate needs a language model (train --model gpt --text FILE)");
    // Characters, or SentencePiece pieces through the checkpoint's own piece model (line breaks as its
    // line-break piece, and printed back as line breaks by detokenize).
    const std::vector<std::string> tokens = m.tokenizer->tokenize(a->prompt);
    const char* unit = m.tokenizer->kind() == data::Tokenization::sentencepiece ? "piece" : "character";
    std::vector<int32_t> prompt;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t id = m.vocab.id(tokens[i]);
      if (id == data::kUnk)
        throw Error("generate: --prompt: " + std::string(unit) + " " + std::to_string(i + 1) + " ('" + tokens[i] +
                    "') is not in the checkpoint's vocabulary");
      prompt.push_back(id);
    }
    if (prompt.empty())
      throw Error("generate: --prompt is empty (it needs at least one " + std::string(unit) + ")");
    a->o.use_cache = !a->no_cache;
    const std::vector<int32_t> ids = models::generate(*gpt, prompt, a->o);
    std::vector<std::string> pieces;
    for (int32_t id : ids) pieces.push_back(m.vocab.token(id));
    std::printf("%s\n", m.tokenizer->detokenize(pieces).c_str());
    return 0;
  };
}

}  // namespace tapegrad::cli
