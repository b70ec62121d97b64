// What `tapegrad score` and `tapegrad eval --bleu` share: reading a text file's lines for scoring, and
// the scores as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tapegrad/score.hpp"

namespace tapegrad::cli {

// Every line of `path` (line endings removed, empty lines kept); IoError naming the file, or the file
// and line for invalid UTF-8.
std::vector<std::string> read_score_lines(const std::string& path);
// {"bleu": {score, precisions, bp, ratio, hyp_len, ref_len, counts, totals}, "chrf": {name, score}}.
nlohmann::json score_json(const data::BleuScore& bleu, const data::ChrfScore& chrf);

}  // namespace tapegrad::cli
