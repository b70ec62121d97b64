// metrics.csv's columns (include/tapegrad/metrics.hpp): one table of names and MetricsRow members,
// from which the header is written, rows are written, and a file's columns are found by name when it is
// read back (by a resumed run carrying rows over, and by `tapegrad plot`).
#include "tapegrad/metrics.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "src/train/train_internal.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::train {

namespace {

// The figures after the step, in file order.
struct Column {
  const char* name;
  double MetricsRow::*member;
};
constexpr Column kColumns[] = {
    {"loss", &MetricsRow::loss},
    {"lr", &MetricsRow::lr},
    {"grad_norm", &MetricsRow::grad_norm},
    {"tokens_per_second", &MetricsRow::tokens_per_second},
    {"valid_loss", &MetricsRow::valid_loss},
    {"valid_token_accuracy", &MetricsRow::valid_token_accuracy},
    {"valid_exact_match", &MetricsRow::valid_exact_match},
    {"valid_bits_per_char", &MetricsRow::valid_bits_per_char},
    {"padding_fraction", &MetricsRow::padding_fraction},
};
constexpr int kStep = -2;  // member_ entry of the step column

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line)
    if (c == ',')
      out.emplace_back();
    else
      out.back().push_back(c);
  return out;
}

}  // namespace

std::string exact_decimal(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string metrics_header() {
  std::string h = "step";
  for (const Column& c : kColumns) h += std::string(",") + c.name;
  return h;
}

std::string metrics_line(const MetricsRow& row) {
  std::string line = std::to_string(row.step);
  for (const Column& c : kColumns) {
    line += ',';
    if (!std::isnan(row.*c.member)) line += exact_decimal(row.*c.member);
  }
  return line;
}

MetricsColumns::MetricsColumns(const std::string& header, const std::string& where) {
  bool step = false;
  std::vector<bool> seen(std::size(kColumns));
  for (const std::string& name : fields(header)) {
    int m = -1;
    if (name == "step") {
      if (step) throw IoError(where + ": the header names column 'step' twice");
      step = true, m = kStep;
    }
    for (size_t i = 0; i < std::size(kColumns); ++i)
      if (name == kColumns[i].name) {
        if (seen[i]) throw IoError(where + ": the header names column '" + name + "' twice");
        seen[i] = true, m = int(i);
      }
    member_.push_back(m);
  }
  if (!step) throw IoError(where + ": the header '" + header + "' has no 'step' column (not a metrics.csv?)");
}

MetricsRow MetricsColumns::parse(const std::string& line, const std::string& where) const {
  const std::vector<std::string> f = fields(line);
  if (f.size() != member_.size())
    throw IoError(where + ": expected " + std::to_string(member_.size()) +
                  " comma-separated fields (as in the header), found " + std::to_string(f.size()));
  MetricsRow row;
  for (size_t i = 0; i < f.size(); ++i) {
    const std::string& text = f[i];
    if (member_[i] == kStep) {
      int64_t step = -1;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size() || step < 0)
        throw IoError(where + ": step '" + text + "' is not a whole number");
      row.step = step;
    } else if (member_[i] >= 0 && !text.empty()) {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (*end != '\0') throw IoError(where + ": '" + text + "' is not a number");
      row.*kColumns[size_t(member_[i])].member = v;
    }
  }
  return row;
}

std::optional<MetricsRow> MetricsColumns::try_parse(const std::string& line) const {
  try {
    return parse(line, "");
  } catch (const IoError&) {
    return std::nullopt;
  }
}

std::vector<MetricsRow> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path + ": cannot open (not a run directory?)");
  std::string line;
  if (!std::getline(in, line))
    throw IoError(path + ":1: empty file, expected the header '" + metrics_header() + "'");
  const MetricsColumns columns(line, path + ":1");
  std::vector<MetricsRow> rows;
  for (int64_t lineno = 2; std::getline(in, line); ++lineno)
    rows.push_back(columns.parse(line, path + ":" + std::to_string(lineno)));
  return rows;
}

}  // namespace tapegrad::train
