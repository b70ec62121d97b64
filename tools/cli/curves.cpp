// Training curves: metrics.csv parsed into columns, then drawn with cairo as two panels (loss;
// accuracy) with axes, "nice" 1-2-5 ticks (or decades on a log axis), labels and a legend. Not here:
// smoothing, interactive output, or any format other than PNG.
#include "curves.hpp"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "tapegrad/error.hpp"

namespace tapegrad::cli {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kHeader =
    "step,loss,lr,grad_norm,tokens_per_second,valid_loss,valid_token_accuracy,valid_exact_match";

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) out.push_back(field);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// An empty field is NaN; anything else must be a whole number.
double field(const std::string& text, const std::string& where) {
  if (text.empty()) return kNaN;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0') throw IoError(where + ": '" + text + "' is not a number");
  return v;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// About five ticks at multiples of 1, 2 or 5 times a power of ten.
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
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

// Decades, and 2x and 5x between them when the axis spans less than two decades.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> ticks;
  const bool fine = std::log10(hi / lo) < 2;
  for (double d = std::pow(10.0, std::floor(std::log10(lo))); d <= hi * 1.0001; d *= 10)
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

struct Rgb {
  double r, g, b;
};
const Rgb kPalette[] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                        {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};

struct Series {
  const std::vector<double>* x;
  const std::vector<double>* y;
  Rgb colour;
  bool dashed;
  std::string label;
};

// One panel: a frame at (x0, y0, w, h) in pixels, axes from the data, the series, a legend.
class Panel {
 public:
  Panel(cairo_t* cr, double x0, double y0, double w, double h) : cr_(cr), x0_(x0), y0_(y0), w_(w), h_(h) {}

  void draw(const std::string& title, const std::string& y_label, const std::vector<Series>& series,
            bool log_y, const Range* fixed_y) {
    Range xr, yr;
    for (const Series& s : series) {
      for (double v : *s.x) xr.add(v);
      for (double v : *s.y)
        if (!log_y || v > 0) yr.add(v);
    }
    if (fixed_y) yr = *fixed_y;
    frame(title, y_label);
    if (xr.empty() || yr.empty()) {
      text(x0_ + w_ / 2 - 30, y0_ + h_ / 2, "no data", 13);
      return;
    }
    if (xr.hi == xr.lo) xr.hi = xr.lo + 1;
    if (yr.hi == yr.lo) yr.hi = log_y ? yr.lo * 10 : yr.lo + 1;
    log_y_ = log_y;
    x_ = xr;
    y_ = yr;
    if (log_y_)
      y_.lo = std::pow(10.0, std::floor(std::log10(y_.lo) * 4) / 4),
      y_.hi = std::pow(10.0, std::ceil(std::log10(y_.hi) * 4) / 4);
    axes();
    for (const Series& s : series) line(s);
    legend(series);
  }

 private:
  double px(double x) const { return x0_ + (x - x_.lo) / (x_.hi - x_.lo) * w_; }
  double py(double y) const {
    const double f = log_y_ ? (std::log10(y) - std::log10(y_.lo)) / (std::log10(y_.hi) - std::log10(y_.lo))
                            : (y - y_.lo) / (y_.hi - y_.lo);
    return y0_ + h_ - f * h_;
  }

  void text(double x, double y, const std::string& s, double size) {
    cairo_set_source_rgb(cr_, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr_, size);
    cairo_move_to(cr_, x, y);
    cairo_show_text(cr_, s.c_str());
  }
  double text_width(const std::string& s, double size) {
    cairo_set_font_size(cr_, size);
    cairo_text_extents_t e;
    cairo_text_extents(cr_, s.c_str(), &e);
    return e.x_advance;
  }

  void frame(const std::string& title, const std::string& y_label) {
    text(x0_, y0_ - 12, title, 15);
    cairo_save(cr_);
    cairo_move_to(cr_, x0_ - 58, y0_ + h_ / 2 + text_width(y_label, 12) / 2);
    cairo_rotate(cr_, -M_PI / 2);
    cairo_set_font_size(cr_, 12);
    cairo_show_text(cr_, y_label.c_str());
    cairo_restore(cr_);
    text(x0_ + w_ / 2 - text_width("step", 12) / 2, y0_ + h_ + 38, "step", 12);
    cairo_set_source_rgb(cr_, 0.2, 0.2, 0.2);
    cairo_set_line_width(cr_, 1);
    cairo_rectangle(cr_, x0_, y0_, w_, h_);
    cairo_stroke(cr_);
  }

  void axes() {
    cairo_set_line_width(cr_, 1);
    for (double t : linear_ticks(x_.lo, x_.hi)) {
      const double x = px(t);
      grid(x, y0_, x, y0_ + h_);
      const std::string l = tick_label(t);
      text(x - text_width(l, 11) / 2, y0_ + h_ + 16, l, 11);
    }
    for (double t : log_y_ ? log_ticks(y_.lo, y_.hi) : linear_ticks(y_.lo, y_.hi)) {
      const double y = py(t);
      grid(x0_, y, x0_ + w_, y);
      const std::string l = tick_label(t);
      text(x0_ - 6 - text_width(l, 11), y + 4, l, 11);
    }
  }

  void grid(double xa, double ya, double xb, double yb) {
    cairo_set_source_rgb(cr_, 0.88, 0.88, 0.88);
    cairo_move_to(cr_, xa, ya);
    cairo_line_to(cr_, xb, yb);
    cairo_stroke(cr_);
  }

  void line(const Series& s) {
    cairo_save(cr_);
    cairo_rectangle(cr_, x0_, y0_, w_, h_);
    cairo_clip(cr_);
    cairo_set_source_rgb(cr_, s.colour.r, s.colour.g, s.colour.b);
    cairo_set_line_width(cr_, 1.8);
    const double dash[] = {6, 4};
    cairo_set_dash(cr_, dash, s.dashed ? 2 : 0, 0);
    bool pen_down = false;
    for (size_t i = 0; i < s.x->size(); ++i) {
      const double x = (*s.x)[i], y = (*s.y)[i];
      if (!std::isfinite(y) || (log_y_ && y <= 0)) {
        pen_down = false;
        continue;
      }
      if (pen_down)
        cairo_line_to(cr_, px(x), py(y));
      else
        cairo_move_to(cr_, px(x), py(y));
      pen_down = true;
    }
    cairo_stroke(cr_);
    if (s.x->size() == 1 && std::isfinite((*s.y)[0])) {  // a single point: a dot
      cairo_arc(cr_, px((*s.x)[0]), py((*s.y)[0]), 3, 0, 2 * M_PI);
      cairo_fill(cr_);
    }
    cairo_restore(cr_);
  }

  void legend(const std::vector<Series>& series) {
    double widest = 0;
    for (const Series& s : series) widest = std::max(widest, text_width(s.label, 11));
    const double row = 16, lx = x0_ + w_ - widest - 48, ly = y0_ + 10;
    cairo_set_source_rgba(cr_, 1, 1, 1, 0.85);
    cairo_rectangle(cr_, lx - 6, ly - 4, widest + 50, row * double(series.size()) + 6);
    cairo_fill(cr_);
    for (size_t i = 0; i < series.size(); ++i) {
      const Series& s = series[i];
      const double y = ly + row * double(i) + 8;
      cairo_set_source_rgb(cr_, s.colour.r, s.colour.g, s.colour.b);
      cairo_set_line_width(cr_, 1.8);
      const double dash[] = {6, 4};
      cairo_set_dash(cr_, dash, s.dashed ? 2 : 0, 0);
      cairo_move_to(cr_, lx, y);
      cairo_line_to(cr_, lx + 30, y);
      cairo_stroke(cr_);
      cairo_set_dash(cr_, dash, 0, 0);
      text(lx + 36, y + 4, s.label, 11);
    }
  }

  cairo_t* cr_;
  double x0_, y0_, w_, h_;
  Range x_, y_;
  bool log_y_ = false;
};

}  // namespace

Curves read_curves(const std::string& run_dir) {
  const std::string path = run_dir + "/metrics.csv";
  std::ifstream in(path);
  if (!in) throw IoError(path + ": cannot open (not a run directory?)");
  Curves c;
  c.label = run_dir;
  while (c.label.size() > 1 && c.label.back() == '/') c.label.pop_back();
  std::string line;
  if (!std::getline(in, line) || line != kHeader)
    throw IoError(path + ":1: expected the header '" + std::string(kHeader) + "'");
  for (int64_t lineno = 2; std::getline(in, line); ++lineno) {
    const std::string where = path + ":" + std::to_string(lineno);
    const auto f = split(line);
    if (f.size() != 8)
      throw IoError(where + ": expected 8 comma-separated fields, found " + std::to_string(f.size()));
    const double step = field(f[0], where);
    if (!std::isfinite(step)) throw IoError(where + ": the row has no step");
    if (!f[1].empty()) c.train_step.push_back(step), c.train_loss.push_back(field(f[1], where));
    if (!f[5].empty()) {
      c.valid_step.push_back(step);
      c.valid_loss.push_back(field(f[5], where));
      c.valid_token_accuracy.push_back(field(f[6], where));
      c.valid_exact_match.push_back(field(f[7], where));
    }
  }
  return c;
}

void plot_curves(const std::vector<Curves>& runs, const std::string& png_path, const PlotOptions& options) {
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, options.width, options.height);
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  // A run's name in the legend only when there are several.
  auto name = [&](const Curves& c, const char* what) {
    return runs.size() > 1 ? c.label + ": " + what : std::string(what);
  };
  std::vector<Series> loss, accuracy;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Curves& c = runs[i];
    const Rgb colour = kPalette[i % std::size(kPalette)];
    loss.push_back({&c.train_step, &c.train_loss, colour, false, name(c, "train loss")});
    loss.push_back({&c.valid_step, &c.valid_loss, colour, true, name(c, "valid loss")});
    accuracy.push_back({&c.valid_step, &c.valid_token_accuracy, colour, false, name(c, "token accuracy")});
    accuracy.push_back({&c.valid_step, &c.valid_exact_match, colour, true, name(c, "exact match")});
  }
  const double margin_l = 80, margin_r = 24, margin_t = 44, margin_b = 56, gap = 90;
  const double pw = (options.width - margin_l - margin_r - gap) / 2,
               ph = options.height - margin_t - margin_b;
  Range unit;
  unit.lo = 0;
  unit.hi = 1;
  Panel(cr, margin_l, margin_t, pw, ph)
      .draw(options.log_loss ? "loss (log scale)" : "loss", "cross-entropy (nats/token)", loss,
            options.log_loss, nullptr);
  Panel(cr, margin_l + pw + gap, margin_t, pw, ph)
      .draw("validation accuracy", "fraction", accuracy, false, &unit);
  cairo_destroy(cr);
  const cairo_status_t st = cairo_surface_write_to_png(surface, png_path.c_str());
  cairo_surface_destroy(surface);
  if (st != CAIRO_STATUS_SUCCESS)
    throw IoError(png_path + ": cannot write PNG: " + cairo_status_to_string(st));
}

}  // namespace tapegrad::cli
