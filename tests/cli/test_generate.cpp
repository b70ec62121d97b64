// `train --model gpt --text` and `tapegrad generate` as a user runs them: the wrong data source for a
// model is refused in one line, a text file with invalid UTF-8 is named with its line, the eval line
// reports bits per character, generate prints the prompt first, one seed gives one text, --no-cache gives
// the cached tokens, and a prompt character outside the vocabulary is reported, not dropped; with
// SentencePiece pieces, a checkpoint generates through its stored piece model alone, line breaks kept.
#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "process.hpp"

namespace {

using tapegrad::test::run;
using tapegrad::test::run_split;

std::string temp_dir(const std::string& name) {
  const std::string dir = tapegrad::test::temp_dir("generate", name);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string write_text(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 120; ++i) text += i % 3 ? "In the beginning God created the heaven.\n" : "And the earth was void.\n";
  std::ofstream(dir + "/text.txt", std::ios::binary) << text;
  return dir + "/text.txt";
}

const std::string kTiny = "--block-size 16 --d-model 16 --heads 2 --layers 1 --batch-size 4 --threads 1 --seed 1 --valid-size 4 ";

}  // namespace

TEST_CASE("gpt needs --text and --text needs gpt: each refused in one line, exit 2", "[cli][gpt]") {
  const std::string dir = temp_dir("refused");
  const std::string text = write_text(dir);
  for (const auto& [args, says] :
       std::vector<std::pair<std::string, std::string>>{
           {"train --model gpt --task copy --steps 1", "--model gpt: a language model trains on text"},
        {"train --model transformer --text " + text + " --steps 1", "only for --model gpt"},
        {"train --model gpt --text " + text + " --train " + text + " --steps 1", "cannot be combined with --train"},
        {"train --model gpt --text " + text + " --d-ff 32 --steps 1", "--d-ff: fixed by --model gpt"},
        {"train --model gpt --text " + text + " --tokens whitespace --steps 1",
         "--tokens whitespace: --text is tokenised by characters (chars) or SentencePiece pieces (sentencepiece)"},
        {"train --model gpt --text " + text + " --tokens sentencepiece --spm-sides separate --steps 1",
         "--spm-sides separate: only with --train (--text has no source and target sides)"},
        {"train --model gpt --text " + text + " --tokens sentencepiece --spm-sides joint --steps 1",
         "--spm-sides joint: only with --train"},
        {"train --model gpt --text " + text + " --vocab-size 30 --steps 1",
         "--vocab-size 30: only with --tokens sentencepiece (the tokens are chars)"}}) {
    CAPTURE(args);
    const auto r = run_split(args);
    CHECK(r.code == 2);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  std::ofstream(dir + "/bad.txt", std::ios::binary) << "fine\nnot \xff fine\n";
  const auto bad = run_split("train --model gpt --text " + dir + "/bad.txt --steps 1");
  CHECK(bad.code == 2);
  CHECK(bad.err.find(dir + "/bad.txt:2: invalid UTF-8") != std::string::npos);
}

TEST_CASE("train --model gpt --text, then generate: the prompt first, one seed one text, --no-cache the same tokens",
          "[cli][gpt]") {
  const std::string dir = temp_dir("run");
  const std::string text = write_text(dir);
  const auto trained = run("train --model gpt --text " + text + " " + kTiny + "--steps 20 --eval-every 10 --out " + dir + "/gpt");
  REQUIRE(trained.code == 0);
  CHECK(trained.out.find("bits/char") != std::string::npos);
  const std::string gen = "generate --checkpoint " + dir + "/gpt --prompt 'In the beginning' --max-new-tokens 40 "
                          "--temperature 0.8 --top-k 5 --seed 7";
  const auto a = run_split(gen), b = run_split(gen), uncached = run_split(gen + " --no-cache");
  REQUIRE(a.code == 0);
  CHECK(a.out.rfind("In the beginning", 0) == 0);
  CHECK(a.out == b.out);
  CHECK(a.out == uncached.out);
  CHECK(run_split(gen + " --seed 8").out != a.out);
  const auto unknown = run_split("generate --checkpoint " + dir + "/gpt --prompt 'In the Zoo'");
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("character 8 ('Z') is not in the checkpoint's vocabulary") != std::string::npos);
}

TEST_CASE("a gpt trained on SentencePiece pieces generates through the piece model in its checkpoint alone, "
          "line breaks kept",
          "[cli][gpt][spm]") {
  const std::string dir = temp_dir("pieces");
  const std::string text = write_text(dir);
  const auto trained = run("train --model gpt --text " + text + " --tokens sentencepiece --vocab-size 28 " + kTiny +
                           "--steps 6 --eval-every 3 --out " + dir + "/gpt");
  INFO(trained.out);
  REQUIRE(trained.code == 0);
  CHECK(trained.out.find("vocab 28") != std::string::npos);
  CHECK(trained.out.find("SentencePiece unigram, 0 of ") != std::string::npos);
  CHECK(trained.out.find("training tokens unknown") != std::string::npos);
  CHECK(trained.out.find("nats/token") != std::string::npos);
  CHECK(trained.out.find("bits/char") != std::string::npos);
  // Nothing but the checkpoint: the text and the model file for outside tools are gone.
  REQUIRE(std::filesystem::exists(dir + "/gpt/sentencepiece.model"));
  std::filesystem::remove(text);
  std::filesystem::remove(dir + "/gpt/sentencepiece.model");
  const std::string prompt = "In the beginning God created the heaven.\nAnd the";
  const std::string gen = "generate --checkpoint " + dir + "/gpt --prompt '" + prompt +
                          "' --max-new-tokens 30 --temperature 0.8 --top-k 5 --seed 7";
  const auto a = run_split(gen), uncached = run_split(gen + " --no-cache");
  INFO(a.err);
  REQUIRE(a.code == 0);
  CHECK(a.out.rfind(prompt, 0) == 0);  // the prompt's line break came back through the pieces
  CHECK(a.out.size() > prompt.size() + 1);
  CHECK(a.out == uncached.out);
  const auto unknown = run_split("generate --checkpoint " + dir + "/gpt --prompt 'In the Zoo'");
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("generate: --prompt: piece ") != std::string::npos);
  // eval scores another text through the same stored piece model, its unknown pieces counted.
  std::ofstream(dir + "/other.txt", std::ios::binary) << "And the earth was void.\nIn the Zoo God created the heaven.\n"
                                                         "And the earth was void.\nIn the beginning God created.\n";
  const auto scored = run_split("eval --checkpoint " + dir + "/gpt --text " + dir + "/other.txt --size 3");
  INFO(scored.err);
  REQUIRE(scored.code == 0);
  CHECK(scored.out.find("nats/token") != std::string::npos);
  CHECK(scored.out.find("bits/char  (3 blocks)") != std::string::npos);
  CHECK(scored.err.find("eval: 1 of ") != std::string::npos);  // the Z
  const auto no_text = run_split("eval --checkpoint " + dir + "/gpt");
  CHECK(no_text.code == 2);
  CHECK(no_text.err.find("holds a gpt language model: pass --text FILE") != std::string::npos);
  CHECK(unknown.err.find("is not in the checkpoint's vocabulary") != std::string::npos);
}
