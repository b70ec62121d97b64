// `tapegrad score`: corpus BLEU and chrF2 of a hypothesis file against one or more line-aligned
// reference files, printed as sacreBLEU's command line prints them (score.hpp computes both).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "score_output.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/score.hpp"

namespace tapegrad::cli {

std::vector<std::string> read_score_lines(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IoError(path + ": is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open: " + std::strerror(errno));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (const int64_t bad = data::first_invalid_utf8(line); bad >= 0)
      throw IoError(path + ":" + std::to_string(lines.size() + 1) + ": invalid UTF-8 at byte " +
                    std::to_string(bad + 1) + " of the line");
    lines.push_back(std::move(line));
  }
  if (in.bad()) throw IoError(path + ": read error: " + std::strerror(errno));
  return lines;
}

nlohmann::json score_json(const data::BleuScore& bleu, const data::ChrfScore& chrf) {
  const auto& s = bleu.statistics;
  return {{"bleu",
           {{"score", bleu.score},
            {"precisions", bleu.precisions},
            {"bp", bleu.bp},
            {"ratio", bleu.ratio},
            {"hyp_len", bleu.hyp_len},
            {"ref_len", bleu.ref_len},
            {"counts", s.matches},
            {"totals", s.totals}}},
          {"chrf", {{"name", "chrF" + std::to_string(chrf.beta)}, {"score", chrf.score}}}};
}

Runner add_score(CLI::App& app) {
  struct Args {
    std::vector<std::string> refs;
    std::string hyp;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "score",
      "Corpus BLEU (13a tokenisation, as sacreBLEU) and chrF2 of a hypothesis file against line-aligned "
      "reference files.\nExample: tapegrad score --ref newstest.en --hyp output.en");
  sub->add_option("--ref", a->refs,
                  "Reference file, one line per hypothesis line; repeat for several references (an empty "
                  "line means no reference for that line from this file)")
      ->required();
  sub->add_option("--hyp", a->hyp, "Hypothesis file, detokenised text, one line per segment")->required();
  sub->add_flag("--json", a->json,
                "Print one JSON object instead: bleu {score, precisions, bp, ratio, hyp_len, ref_len, counts, "
                "totals} and chrf {name, score}, at full precision");
  return [a] {
    const std::vector<std::string> hyps = read_score_lines(a->hyp);
    std::vector<std::vector<std::string>> refs;
    for (const std::string& path : a->refs) {
      refs.push_back(read_score_lines(path));
      if (refs.back().size() != hyps.size())
        throw Error("score: " + path + " has " + std::to_string(refs.back().size()) + " lines, " + a->hyp + " has " +
                    std::to_string(hyps.size()));
    }
    for (size_t i = 0; i < hyps.size(); ++i) {
      bool any = false;
      for (const auto& r : refs) any |= !r[i].empty();
      if (!any) throw Error("score: line " + std::to_string(i + 1) + " is empty in every reference file");
    }
    const data::BleuScore bleu = data::corpus_bleu(hyps, refs);
    const data::ChrfScore chrf = data::corpus_chrf(hyps, refs);
    if (a->json)
      std::printf("%s\n", score_json(bleu, chrf).dump().c_str());
    else
      std::printf("%s\n%s\n", bleu.text().c_str(), chrf.text().c_str());
    return 0;
  };
}

}  // namespace tapegrad::cli
