// Experiment figures as PNG (see figures.hpp): a line chart on chart::draw_panel, or a heatmap with the
// weight colours and colour bar of chart.hpp. Sizes are fixed for line charts (900 x 520 plus the
// legend) and follow the cell count for heatmaps (cells of 4-28 pixels, the whole map at most ~640).
#include "figures.hpp"

#include <algorithm>
#include <cmath>

#include "chart.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::cli {

namespace {

constexpr int kLinesWidth = 900, kLinesHeight = 520;
constexpr double kMarginLeft = 84, kMarginTop = 48, kMarginBottom = 60, kMarginRight = 24;

Error bad(const experiment::Figure& f, const std::string& what) {
  return Error("figure " + (f.file.empty() ? "'" + f.title + "'" : f.file) + ": " + what);
}

void draw_lines(const experiment::Figure& f, const std::string& path) {
  std::vector<chart::Line> lines;
  for (size_t i = 0; i < f.series.size(); ++i) {
    const experiment::Series& s = f.series[i];
    chart::Line l;
    l.x = s.x, l.y = s.y, l.y_lo = s.y_lo, l.y_hi = s.y_hi;
    l.colour = chart::palette(i);
    l.marker = int(i % 4);
    l.label = s.label;
    lines.push_back(std::move(l));
  }
  chart::Canvas measure(1, 1);
  const double legend = chart::legend_width(measure, lines) + 16;
  const int width = kLinesWidth + int(legend);
  chart::Canvas canvas(width, kLinesHeight);
  chart::Axes axes;
  axes.title = f.title, axes.x_label = f.x_label, axes.y_label = f.y_label;
  axes.log_y = f.log_y;
  axes.legend_outside = true;
  chart::draw_panel(canvas, kMarginLeft, kMarginTop, kLinesWidth - kMarginLeft - kMarginRight,
                    kLinesHeight - kMarginTop - kMarginBottom, axes, lines);
  canvas.write_png(path);
}

void draw_heatmap(const experiment::Figure& f, const std::string& path) {
  const size_t rows = f.cells.size(), cols = f.cells[0].size();
  auto label = [](const std::vector<std::string>& labels, size_t i) {
    return labels.empty() ? std::to_string(i) : labels[i];
  };
  const double cell = std::clamp(std::floor(640.0 / double(std::max(rows, cols))), 4.0, 28.0);
  const double font = std::min(11.0, cell * 0.8 + 3);
  // Label every k-th row and column so labels do not overlap when cells are small.
  const size_t every = size_t(std::ceil((font + 3) / cell));
  double row_label_w = 0, col_label_h = 0;
  for (size_t r = 0; r < rows; ++r)
    row_label_w = std::max(row_label_w, chart::text_width(label(f.row_labels, r), font));
  for (size_t c = 0; c < cols; ++c)
    col_label_h = std::max(col_label_h, chart::text_width(label(f.col_labels, c), font));
  const double title_h = 40, axis_label = 22, gap = 24;
  const double gx = gap + axis_label + row_label_w + 6, gy = title_h + axis_label + col_label_h + 6;
  const double map_w = cell * double(cols), map_h = cell * double(rows);
  const double bar_h = std::max(100.0, std::min(200.0, map_h - chart::kColourBarCaption));
  const double title_w = chart::text_width(f.title, 15);
  const int width = int(std::max(gx + map_w + gap, gap + title_w + gap) + chart::kColourBarWidth + gap);
  const int height = int(std::max(gy + map_h, gy + chart::kColourBarCaption + bar_h) + gap);

  chart::Canvas canvas(width, height);
  cairo_t* cr = canvas.cr();
  canvas.text(gap, 26, f.title, 15);
  canvas.text(gx + map_w / 2 - canvas.text_width(f.x_label, 12) / 2, title_h + 12, f.x_label, 12);
  canvas.vertical_text(gap + 12, gy + map_h / 2, f.y_label, 12);
  for (size_t c = 0; c < cols; c += every) {  // column labels above, reading upwards
    cairo_save(cr);
    const std::string l = label(f.col_labels, c);
    cairo_move_to(cr, gx + cell * (double(c) + 0.5) + font / 3, gy - 4);
    cairo_rotate(cr, -M_PI / 2);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr, font);
    cairo_show_text(cr, l.c_str());
    cairo_restore(cr);
  }
  for (size_t r = 0; r < rows; ++r) {
    if (r % every == 0) {
      const std::string l = label(f.row_labels, r);
      canvas.text(gx - 6 - canvas.text_width(l, font), gy + cell * (double(r) + 0.5) + font / 3, l, font);
    }
    for (size_t c = 0; c < cols; ++c) {
      chart::set_colour(cr, chart::heat_colour(f.cells[r][c]));
      cairo_rectangle(cr, gx + cell * double(c), gy + cell * double(r), cell - (cell > 8 ? 1 : 0),
                      cell - (cell > 8 ? 1 : 0));
      cairo_fill(cr);
    }
  }
  chart::draw_colour_bar(canvas, width - chart::kColourBarWidth - gap / 2, gy, bar_h, "value");
  canvas.write_png(path);
}

}  // namespace

void check_figure(const experiment::Figure& f) {
  if (f.file.empty() || f.file.find('/') != std::string::npos || f.file.size() < 5 ||
      f.file.compare(f.file.size() - 4, 4, ".png") != 0)
    throw bad(f, "expected a file name like 'name.png' (no directory), got '" + f.file + "'");
  if (f.kind == experiment::Figure::Kind::lines) {
    if (f.series.empty()) throw bad(f, "a line chart with no series");
    for (const experiment::Series& s : f.series) {
      const std::string name = "series '" + s.label + "'";
      if (s.x.empty()) throw bad(f, name + " has no points");
      if (s.y.size() != s.x.size())
        throw bad(f, name + " has " + std::to_string(s.x.size()) + " x values and " +
                         std::to_string(s.y.size()) + " y values");
      if (s.y_lo.size() != s.y_hi.size() || (!s.y_lo.empty() && s.y_lo.size() != s.x.size()))
        throw bad(f, name + ": y_lo and y_hi must be empty or as long as x (" + std::to_string(s.x.size()) +
                         "), got " + std::to_string(s.y_lo.size()) + " and " + std::to_string(s.y_hi.size()));
    }
    return;
  }
  if (f.cells.empty() || f.cells[0].empty()) throw bad(f, "a heatmap with no cells");
  for (size_t r = 0; r < f.cells.size(); ++r) {
    if (f.cells[r].size() != f.cells[0].size())
      throw bad(f, "heatmap row " + std::to_string(r) + " has " + std::to_string(f.cells[r].size()) +
                       " cells, row 0 has " + std::to_string(f.cells[0].size()));
    for (size_t c = 0; c < f.cells[r].size(); ++c) {
      const double v = f.cells[r][c];
      if (!std::isnan(v) && !(v >= -1e-6 && v <= 1 + 1e-6))
        throw bad(f, "heatmap cell [" + std::to_string(r) + "][" + std::to_string(c) +
                         "] = " + std::to_string(v) + " is outside [0, 1]");
    }
  }
  if (!f.row_labels.empty() && f.row_labels.size() != f.cells.size())
    throw bad(f, std::to_string(f.row_labels.size()) + " row labels for " + std::to_string(f.cells.size()) +
                     " rows");
  if (!f.col_labels.empty() && f.col_labels.size() != f.cells[0].size())
    throw bad(f, std::to_string(f.col_labels.size()) + " column labels for " +
                     std::to_string(f.cells[0].size()) + " columns");
}

void draw_figure(const experiment::Figure& f, const std::string& png_path) {
  check_figure(f);
  if (f.kind == experiment::Figure::Kind::lines)
    draw_lines(f, png_path);
  else
    draw_heatmap(f, png_path);
}

}  // namespace tapegrad::cli
