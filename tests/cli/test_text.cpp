// Real-text options on the command line, run as real processes on corpora built here: SentencePiece
// tokens end to end (a checkpoint translates with nothing else; the model file for outside tools; clear
// refusals with exit code 2), and --batch-tokens (its padding in the log and metrics.csv, and a resume
// that takes the same batches bit for bit).
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "process.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/metrics.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

using tapegrad::test::Run;
using tapegrad::test::run;

std::string temp_dir(const std::string& name) { return tapegrad::test::temp_dir("text", name); }

// A Spanish-English TSV of `n` short pairs with accents, of lengths 3 to 8 words.
void write_corpus(const std::string& path, int n) {
  const std::vector<std::pair<std::string, std::string>> words = {
      {"niño", "child"}, {"comió", "ate"},  {"manzana", "apple"}, {"árbol", "tree"},   {"canción", "song"},
      {"corazón", "heart"}, {"mañana", "morning"}, {"pequeño", "small"}, {"casa", "house"}, {"agua", "water"}};
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    std::string es, en;
    for (int k = 0; k < 3 + i % 6; ++k) {
      const auto& w = words[size_t((i * 7 + k * 3 + i / 13) % int(words.size()))];
      es += (k ? " " : "") + w.first;
      en += (k ? " " : "") + w.second;
    }
    out << es << ".\t" << en << ".\n";
  }
}

const std::string kTiny =
    "--model transformer --d-model 16 --layers 1 --heads 2 --d-ff 32 --threads 1 --log-every 1 --eval-every 0 ";

}  // namespace

TEST_CASE("a checkpoint trained with --tokens sentencepiece translates with nothing but the checkpoint",
          "[cli][spm]") {
  const std::string dir = temp_dir("spm");
  fs::create_directories(dir);
  write_corpus(dir + "/train.tsv", 200);
  const Run t = run("train --train " + dir + "/train.tsv --tokens sentencepiece --vocab-size 50 --spm-type bpe "
                    "--steps 3 --batch-size 8 --out " + dir + "/run " + kTiny);
  INFO(t.out);
  REQUIRE(t.code == 0);
  CHECK_THAT(t.out, Catch::Contains("vocab 50") && Catch::Contains("0 of ") &&
                        Catch::Contains("training tokens unknown"));
  // The model file for outside tools is the checkpoint's tokenizer: the same pieces, in id order.
  REQUIRE(fs::exists(dir + "/run/sentencepiece.model"));
  const auto file_model = data::SentencePieceTokenizer::load(dir + "/run/sentencepiece.model");
  const train::LoadedModel m = train::load_checkpoint(dir + "/run");
  REQUIRE(m.tokenizer->kind() == data::Tokenization::sentencepiece);
  CHECK(file_model->vocabulary() == m.vocab.tokens());
  // The run's config.json (which records the vocabulary size it trained) with its own piece model:
  // --spm-model replaces the file's piece-training settings, and the repeat has the same pieces.
  const Run again = run("train --config " + dir + "/run/config.json --spm-model " + dir +
                        "/run/sentencepiece.model --steps 1 --out " + dir + "/again");
  INFO(again.out);
  REQUIRE(again.code == 0);
  CHECK(train::load_checkpoint(dir + "/again").vocab.tokens() == m.vocab.tokens());
  // ... but a piece-training flag beside it is still refused.
  const Run both = run("train --config " + dir + "/run/config.json --spm-model " + dir +
                       "/run/sentencepiece.model --vocab-size 40 --steps 1 --out " + dir + "/both");
  CHECK(both.code == 2);
  CHECK_THAT(both.out, Catch::Contains("--vocab-size 40: does not apply with --spm-model"));
  // Nothing but the checkpoint: the data and the model file are gone.
  fs::remove(dir + "/train.tsv");
  fs::remove(dir + "/run/sentencepiece.model");
  const tapegrad::test::SplitRun tr = tapegrad::test::run_split("translate --checkpoint " + dir + "/run",
                                                                "el niño comió.\nárbol 日\n");
  INFO(tr.out << tr.err);
  CHECK(tr.code == 0);
  CHECK(std::count(tr.out.begin(), tr.out.end(), '\n') == 2);
  CHECK_THAT(tr.err, Catch::Contains("1 of ") && Catch::Contains("unknown"));  // 日 is no piece
  fs::remove_all(dir);
}

TEST_CASE("bad SentencePiece and --batch-tokens options: one line naming the option, exit code 2",
          "[cli][spm][errors]") {
  const std::string dir = temp_dir("spm-errors");
  fs::create_directories(dir);
  write_corpus(dir + "/train.tsv", 60);
  std::ofstream(dir + "/fake.model") << "not a model\n";
  const std::string train = "train --train " + dir + "/train.tsv --steps 1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--vocab-size 100", "--vocab-size 100: only with --tokens sentencepiece"},
      {"--tokens sentencepiece --vocab-size 100000", "--vocab-size 100000: SentencePiece cannot reach it"},
      {"--tokens sentencepiece --spm-model " + dir + "/none.model", "--spm-model"},
      {"--tokens sentencepiece --spm-model " + dir + "/fake.model", "not a SentencePiece model"},
      {"--tokens sentencepiece --spm-type trigram", "--spm-type"},
      {"--tokens sentencepiece --spm-sides both", "--spm-sides"},
      {"--batch-tokens 4", "--batch-tokens 4: below the longest training example"},
      {"--batch-tokens 100 --batch-size 8", "--batch-tokens 100: replaces --batch-size"},
  };
  for (const auto& [args, expect] : cases) {
    CAPTURE(args);
    const Run r = run(train + args);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains(expect));
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  }
  const Run task = run("train --task copy --tokens sentencepiece --steps 1");
  CHECK(task.code == 2);
  CHECK_THAT(task.out, Catch::Contains("--tokens sentencepiece: only with --train"));
  fs::remove_all(dir);
}

TEST_CASE("--batch-tokens: padding in the log and metrics.csv; k steps + resume + N-k equals N bit for bit",
          "[cli][batch-tokens]") {
  const std::string dir = temp_dir("tokens");
  fs::create_directories(dir);
  write_corpus(dir + "/train.tsv", 300);
  const std::string common = "train --train " + dir + "/train.tsv --tokens whitespace --batch-tokens 60 "
                             "--dropout 0.1 --seed 4 --warmup 3 " + kTiny;  // steps 1-3: warm-up in both runs
  const Run straight = run(common + "--steps 7 --out " + dir + "/straight");
  INFO(straight.out);
  REQUIRE(straight.code == 0);
  CHECK_THAT(straight.out, Catch::Contains("up to 60 padded tokens") && Catch::Contains("pad "));
  REQUIRE(run(common + "--steps 3 --out " + dir + "/split").code == 0);
  const Run resumed = run("train --resume " + dir + "/split --steps 7 --threads 1 --log-every 1 --eval-every 0");
  INFO(resumed.out);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.out, Catch::Contains("resuming at step 3"));
  tapegrad::test::require_same_parameters(dir + "/straight", dir + "/split");
  const auto rows = train::read_metrics(dir + "/straight/metrics.csv");
  int with_padding = 0;
  for (const auto& row : rows)
    if (!std::isnan(row.loss)) {
      CHECK(row.padding_fraction >= 0);
      CHECK(row.padding_fraction < 0.5);
      ++with_padding;
    }
  CHECK(with_padding == 7);
  fs::remove_all(dir);
}
