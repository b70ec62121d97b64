// Reports: a Table of formatted cells (aligned text for the terminal, CSV for results.csv), the Report
// that pairs it with its summary lines, and the number formatting every experiment uses.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "experiments/harness.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::experiment {

namespace detail {

std::string fmt(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string range_name(int lo, int hi) {
  return std::to_string(lo) + "-" + std::to_string(hi);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw IoError(path + ": cannot open for writing");
  f << text;
  if (!f.flush()) throw IoError(path + ": write failed");
}

Spread spread(const std::vector<double>& values) {
  if (values.empty()) throw Error("experiment: spread of no values");
  Spread s{0, values[0], values[0]};
  for (double v : values) {
    s.mean += v / double(values.size());
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  return s;
}

std::string fmt_spread(const Spread& s, int digits) {
  if (s.min == s.max) return fmt(s.mean, digits);
  return fmt(s.mean, digits) + " (" + fmt(s.min, digits) + "-" + fmt(s.max, digits) + ")";
}

}  // namespace detail

void Table::add(std::vector<std::string> row) {
  if (row.size() != columns.size())
    throw Error("experiment table: row has " + std::to_string(row.size()) + " cells, expected " +
                std::to_string(columns.size()));
  rows.push_back(std::move(row));
}

namespace {
// The indices of the `shown` columns (all of them when empty); throws Error naming an unknown one.
std::vector<size_t> column_indices(const std::vector<std::string>& columns, const std::vector<std::string>& shown) {
  std::vector<size_t> idx;
  for (const auto& name : shown.empty() ? columns : shown) {
    const auto it = std::find(columns.begin(), columns.end(), name);
    if (it == columns.end()) throw Error("experiment table: no column '" + name + "'");
    idx.push_back(size_t(it - columns.begin()));
  }
  return idx;
}
}  // namespace

const std::string& Table::cell(size_t row, const std::string& column) const {
  for (size_t c = 0; c < columns.size(); ++c)
    if (columns[c] == column) return rows.at(row)[c];
  throw Error("experiment table: no column '" + column + "'");
}

std::string Table::to_text(const std::vector<std::string>& shown) const {
  const std::vector<size_t> idx = column_indices(columns, shown);
  std::vector<size_t> width(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    width[i] = columns[idx[i]].size();
    for (const auto& row : rows) width[i] = std::max(width[i], row[idx[i]].size());
  }
  std::ostringstream os;
  auto line = [&](auto cell_of) {
    std::string s;
    for (size_t i = 0; i < idx.size(); ++i) {
      const std::string c = cell_of(idx[i]);
      s += (i ? "  " : "") + c + std::string(width[i] - c.size(), ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    os << s << "\n";
  };
  line([&](size_t c) { return columns[c]; });
  for (const auto& row : rows) line([&](size_t c) { return row[c]; });
  return os.str();
}

std::string Table::to_csv() const {
  // Cells are numbers and plain names; none holds a comma or a quote.
  std::ostringstream os;
  for (size_t c = 0; c < columns.size(); ++c) os << (c ? "," : "") << columns[c];
  os << "\n";
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) os << (c ? "," : "") << row[c];
    os << "\n";
  }
  return os.str();
}

std::string Table::to_markdown(const std::vector<std::string>& shown) const {
  const std::vector<size_t> idx = column_indices(columns, shown);
  std::ostringstream os;
  auto line = [&](auto cell_of) {
    os << "|";
    for (size_t c : idx) os << " " << cell_of(c) << " |";
    os << "\n";
  };
  line([&](size_t c) { return columns[c]; });
  line([&](size_t) { return std::string("---"); });
  for (const auto& row : rows) line([&](size_t c) { return row[c]; });
  return os.str();
}

std::string Report::to_text() const {
  std::string s = (aggregate.columns.empty() ? table.to_text(shown) : aggregate.to_text({})) + "\n";
  for (const auto& line : summary) s += line + "\n";
  for (const auto& section : sections) s += "\n" + section + "\n";
  return s;
}

std::string Report::to_markdown() const {
  std::string s = "# Experiment " + name + "\n\n" +
                  (aggregate.columns.empty() ? table.to_markdown(shown) : aggregate.to_markdown({})) + "\n";
  for (const auto& line : summary) s += "- " + line + "\n";
  for (const auto& section : sections) s += "\n" + section + "\n";
  for (const auto& f : figures) s += "\n![" + f.title + "](" + f.file + ")\n";
  return s;
}

}  // namespace tapegrad::experiment
