// Shared cairo drawing for the command line's PNGs: the canvas, ticks, the line-chart panel and the
// weight colour scale (see chart.hpp). Degenerate data never reaches cairo as a NaN coordinate: a
// panel's ranges come from the drawable points only, and a range of one value is widened.
#include "chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tapegrad/error.hpp"

namespace tapegrad::cli::chart {

namespace {

constexpr Rgb kInk{0.1, 0.1, 0.1};
constexpr Rgb kPalette[] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                            {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};
constexpr double kLegendRow = 16, kLegendSwatch = 30;

}  // namespace

Rgb palette(size_t i) {
  return kPalette[i % std::size(kPalette)];
}

Range::Range() : lo(std::numeric_limits<double>::infinity()), hi(-std::numeric_limits<double>::infinity()) {}

void Range::add(double v) {
  if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
}

std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  if (!(step > 0) || !std::isfinite(step)) return ticks;
  const double first = std::ceil(lo / step);
  for (int i = 0; i < 100 && (first + i) * step <= hi + step * 1e-9; ++i) {
    const double t = (first + i) * step;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi)) return ticks;
  const bool fine = std::log10(hi / lo) < 2;
  for (double d = std::pow(10.0, std::floor(std::log10(lo))); d <= hi * 1.0001 && ticks.size() < 100; d *= 10)
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1})
      if (m * d >= lo * 0.9999 && m * d <= hi * 1.0001) ticks.push_back(m * d);
  return ticks;
}

std::string tick_label(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3))
    std::snprintf(buf, sizeof buf, "%.0e", v);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Canvas::Canvas(int width, int height, const char* font)
    : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height)), cr_(cairo_create(surface_)) {
  cairo_set_source_rgb(cr_, 1, 1, 1);
  cairo_paint(cr_);
  cairo_select_font_face(cr_, font, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
}

Canvas::~Canvas() {
  cairo_destroy(cr_);
  cairo_surface_destroy(surface_);
}

void Canvas::text(double x, double y, const std::string& s, double size) {
  set_colour(cr_, kInk);
  cairo_set_font_size(cr_, size);
  cairo_move_to(cr_, x, y);
  cairo_show_text(cr_, s.c_str());
}

void Canvas::vertical_text(double x, double y_centre, const std::string& s, double size) {
  cairo_save(cr_);
  set_colour(cr_, kInk);
  cairo_move_to(cr_, x, y_centre + text_width(s, size) / 2);
  cairo_rotate(cr_, -M_PI / 2);
  cairo_set_font_size(cr_, size);
  cairo_show_text(cr_, s.c_str());
  cairo_restore(cr_);
}

double Canvas::text_width(const std::string& s, double size) {
  cairo_set_font_size(cr_, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr_, s.c_str(), &e);
  return e.x_advance;
}

void Canvas::write_png(const std::string& path) {
  cairo_surface_flush(surface_);
  cairo_status_t st = cairo_status(cr_);
  if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png(surface_, path.c_str());
  if (st != CAIRO_STATUS_SUCCESS) throw IoError(path + ": cannot write PNG: " + cairo_status_to_string(st));
}

double text_width(const std::string& s, double size, const char* font) {
  Canvas scratch(1, 1, font);
  return scratch.text_width(s, size);
}

void set_colour(cairo_t* cr, Rgb c) {
  cairo_set_source_rgb(cr, c.r, c.g, c.b);
}

Rgb heat_colour(double w) {
  if (std::isnan(w)) return {0.75, 0.75, 0.75};
  w = std::clamp(w, 0.0, 1.0);
  return {1 - w, 1 - 0.55 * w, 1 - 0.2 * w};
}

void draw_colour_bar(Canvas& canvas, double x, double y, double bar_height, const std::string& caption) {
  cairo_t* cr = canvas.cr();
  canvas.text(x, y + 16, caption, 12);
  const double top = y + kColourBarCaption, bar = 18, steps = 100;
  for (int i = 0; i < int(steps); ++i) {
    set_colour(cr, heat_colour(1 - (i + 0.5) / steps));
    cairo_rectangle(cr, x, top + bar_height * i / steps, bar, bar_height / steps + 0.5);
    cairo_fill(cr);
  }
  set_colour(cr, kInk);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, x + 0.5, top + 0.5, bar, bar_height);
  cairo_stroke(cr);
  for (const double v : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double ty = top + bar_height * (1 - v);
    set_colour(cr, kInk);
    cairo_move_to(cr, x + bar, ty + 0.5);
    cairo_line_to(cr, x + bar + 5, ty + 0.5);
    cairo_stroke(cr);
    canvas.text(x + bar + 8, ty + 4, tick_label(v), 12);
  }
}

namespace {

bool drawable(double x, double y, bool log_y) {
  return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0);
}

// A range of one value (or none) made into a span the ticks can divide.
void widen(Range& r, bool log) {
  if (r.hi > r.lo) return;
  if (log)
    r.lo /= std::sqrt(10.0), r.hi *= std::sqrt(10.0);
  else {
    const double half = r.lo == 0 ? 1 : std::abs(r.lo) * 0.1;
    r.lo -= half, r.hi += half;
  }
}

void marker(cairo_t* cr, int shape, double x, double y) {
  const double s = 3.5;
  switch (shape % 4) {
    case 0:
      cairo_arc(cr, x, y, s, 0, 2 * M_PI);
      break;
    case 1:
      cairo_rectangle(cr, x - s, y - s, 2 * s, 2 * s);
      break;
    case 2:
      cairo_move_to(cr, x, y - s - 1);
      cairo_line_to(cr, x + s + 0.5, y + s);
      cairo_line_to(cr, x - s - 0.5, y + s);
      cairo_close_path(cr);
      break;
    default:
      cairo_move_to(cr, x, y - s - 1);
      cairo_line_to(cr, x + s + 1, y);
      cairo_line_to(cr, x, y + s + 1);
      cairo_line_to(cr, x - s - 1, y);
      cairo_close_path(cr);
  }
  cairo_fill(cr);
}

void set_stroke(cairo_t* cr, const Line& l) {
  set_colour(cr, l.colour);
  cairo_set_line_width(cr, 1.8);
  const double dash[] = {6, 4};
  cairo_set_dash(cr, dash, l.dashed ? 2 : 0, 0);
}

// Data coordinates to pixels inside one frame.
struct Mapping {
  double x0, y0, w, h;
  Range x, y;
  bool log_y;
  double px(double v) const { return x0 + (v - x.lo) / (x.hi - x.lo) * w; }
  double py(double v) const {
    const double f = log_y ? (std::log10(v) - std::log10(y.lo)) / (std::log10(y.hi) - std::log10(y.lo))
                           : (v - y.lo) / (y.hi - y.lo);
    return y0 + h - f * h;
  }
};

void grid_line(cairo_t* cr, double xa, double ya, double xb, double yb) {
  cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
  cairo_move_to(cr, xa, ya);
  cairo_line_to(cr, xb, yb);
  cairo_stroke(cr);
}

void draw_line(cairo_t* cr, const Mapping& m, const Line& l) {
  set_stroke(cr, l);
  bool pen_down = false;
  size_t points = 0;
  for (size_t i = 0; i < l.x.size(); ++i) {
    if (!drawable(l.x[i], l.y[i], m.log_y)) {
      pen_down = false;
      continue;
    }
    ++points;
    if (pen_down)
      cairo_line_to(cr, m.px(l.x[i]), m.py(l.y[i]));
    else
      cairo_move_to(cr, m.px(l.x[i]), m.py(l.y[i]));
    pen_down = true;
  }
  cairo_stroke(cr);
  cairo_set_dash(cr, nullptr, 0, 0);
  // Error bars: y_lo to y_hi with small caps; on a log axis a bound at or below 0 ends at the frame.
  if (!l.y_lo.empty())
    for (size_t i = 0; i < l.x.size(); ++i) {
      double lo = l.y_lo[i], hi = l.y_hi[i];
      if (!std::isfinite(l.x[i]) || !std::isfinite(lo) || !std::isfinite(hi)) continue;
      if (m.log_y && hi <= 0) continue;
      // Two pixels wide on whole pixels, so a bar is crisp rather than a blur between two columns.
      const double x = std::round(m.px(l.x[i])), ya = m.log_y && lo <= 0 ? m.y0 + m.h : m.py(lo),
                   yb = m.py(hi);
      cairo_set_line_width(cr, 2);
      cairo_move_to(cr, x, ya), cairo_line_to(cr, x, yb);
      cairo_move_to(cr, x - 4, ya), cairo_line_to(cr, x + 4, ya);
      cairo_move_to(cr, x - 4, yb), cairo_line_to(cr, x + 4, yb);
      cairo_stroke(cr);
    }
  // Markers; a single point gets a dot even without them, so it is visible.
  if (l.marker >= 0 || points == 1)
    for (size_t i = 0; i < l.x.size(); ++i)
      if (drawable(l.x[i], l.y[i], m.log_y)) marker(cr, std::max(l.marker, 0), m.px(l.x[i]), m.py(l.y[i]));
}

void draw_legend(Canvas& canvas, double lx, double ly, const std::vector<Line>& lines, double box_width) {
  cairo_t* cr = canvas.cr();
  cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
  cairo_rectangle(cr, lx - 6, ly - 4, box_width, kLegendRow * double(lines.size()) + 6);
  cairo_fill(cr);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    const double y = ly + kLegendRow * double(i) + 8;
    set_stroke(cr, l);
    cairo_move_to(cr, lx, y);
    cairo_line_to(cr, lx + kLegendSwatch, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
    if (l.marker >= 0) marker(cr, l.marker, lx + kLegendSwatch / 2, y);
    canvas.text(lx + kLegendSwatch + 6, y + 4, l.label, 11);
  }
}

}  // namespace

double legend_width(Canvas& canvas, const std::vector<Line>& lines) {
  double widest = 0;
  for (const Line& l : lines) widest = std::max(widest, canvas.text_width(l.label, 11));
  return widest + kLegendSwatch + 20;
}

void draw_panel(Canvas& canvas, double x0, double y0, double w, double h, const Axes& axes,
                const std::vector<Line>& lines) {
  cairo_t* cr = canvas.cr();
  Range xr, yr;
  for (const Line& l : lines)
    for (size_t i = 0; i < l.x.size(); ++i) {
      if (!drawable(l.x[i], l.y[i], axes.log_y)) continue;
      xr.add(l.x[i]);
      yr.add(l.y[i]);
      if (!l.y_lo.empty())
        for (double b : {l.y_lo[i], l.y_hi[i]})
          if (!axes.log_y || b > 0) yr.add(b);
    }
  if (axes.fixed_y) yr = axes.y_range;

  canvas.text(x0, y0 - 12, axes.title, 15);
  canvas.vertical_text(x0 - 58, y0 + h / 2, axes.y_label, 12);
  canvas.text(x0 + w / 2 - canvas.text_width(axes.x_label, 12) / 2, y0 + h + 38, axes.x_label, 12);
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, x0, y0, w, h);
  cairo_stroke(cr);
  if (xr.empty() || yr.empty()) {
    canvas.text(x0 + w / 2 - canvas.text_width("no data", 13) / 2, y0 + h / 2, "no data", 13);
    return;
  }

  widen(xr, false);
  widen(yr, axes.log_y);
  const double pad = (xr.hi - xr.lo) * 0.03;  // markers at the ends stay inside the frame
  xr.lo -= pad, xr.hi += pad;
  if (axes.log_y) {
    yr.lo = std::pow(10.0, std::floor(std::log10(yr.lo) * 4) / 4);
    yr.hi = std::pow(10.0, std::ceil(std::log10(yr.hi) * 4) / 4);
  } else if (!axes.fixed_y) {
    const double ypad = (yr.hi - yr.lo) * 0.04;
    yr.lo -= ypad, yr.hi += ypad;
  }
  const Mapping m{x0, y0, w, h, xr, yr, axes.log_y};

  cairo_set_line_width(cr, 1);
  for (double t : linear_ticks(xr.lo, xr.hi)) {
    grid_line(cr, m.px(t), y0, m.px(t), y0 + h);
    const std::string l = tick_label(t);
    canvas.text(m.px(t) - canvas.text_width(l, 11) / 2, y0 + h + 16, l, 11);
  }
  for (double t : axes.log_y ? log_ticks(yr.lo, yr.hi) : linear_ticks(yr.lo, yr.hi)) {
    grid_line(cr, x0, m.py(t), x0 + w, m.py(t));
    const std::string l = tick_label(t);
    canvas.text(x0 - 6 - canvas.text_width(l, 11), m.py(t) + 4, l, 11);
  }

  cairo_save(cr);
  cairo_rectangle(cr, x0, y0, w, h);
  cairo_clip(cr);
  for (const Line& l : lines) draw_line(cr, m, l);
  cairo_restore(cr);

  const double lw = legend_width(canvas, lines);
  if (axes.legend_outside)
    draw_legend(canvas, x0 + w + 16, y0 + 4, lines, lw);
  else
    draw_legend(canvas, x0 + w - lw + 2, y0 + 10, lines, lw);
}

}  // namespace tapegrad::cli::chart
