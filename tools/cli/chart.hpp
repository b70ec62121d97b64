// The drawing pieces shared by the command line's PNGs (training curves, attention maps, experiment
// figures), on cairo: a white canvas that writes itself as PNG, a line-chart panel (axes, 1-2-5 or
// decade ticks, labels, a legend, markers and error bars), and the white-to-blue colour scale for
// weights in [0, 1] with its colour bar. Not here: layouts of whole pictures (the callers choose them),
// or any output other than PNG.
#pragma once

#include <cairo.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace tapegrad::cli::chart {

struct Rgb {
  double r, g, b;
};
Rgb palette(size_t i);  // a distinct colour per series, cycling after eight

// The finite values seen so far; empty until one is added.
struct Range {
  double lo, hi;
  Range();
  Range(double lo, double hi) : lo(lo), hi(hi) {}
  void add(double v);
  bool empty() const { return lo > hi; }
};

// About five ticks at multiples of 1, 2 or 5 times a power of ten (lo < hi, both finite).
std::vector<double> linear_ticks(double lo, double hi);
// Decades, and 2x and 5x between them when the axis spans less than two decades (0 < lo < hi).
std::vector<double> log_ticks(double lo, double hi);
std::string tick_label(double v);

// A white RGB image with a cairo context on it.
class Canvas {
 public:
  Canvas(int width, int height, const char* font = "sans-serif");
  ~Canvas();
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  cairo_t* cr() const { return cr_; }
  void text(double x, double y, const std::string& s, double size);  // dark grey, baseline at y
  void vertical_text(double x, double y_centre, const std::string& s, double size);  // reads upwards
  double text_width(const std::string& s, double size);
  // Throws IoError naming the path if the PNG cannot be written.
  void write_png(const std::string& path);

 private:
  cairo_surface_t* surface_;
  cairo_t* cr_;
};

// Text extents measured before a canvas exists (to size one).
double text_width(const std::string& s, double size, const char* font = "sans-serif");

// One line of a panel. x and y have the same length; y_lo and y_hi are empty or that long too.
// Points with a non-finite x or y (or y <= 0 on a log axis) are skipped and break the line.
struct Line {
  std::span<const double> x, y, y_lo, y_hi;
  Rgb colour;
  bool dashed = false;
  int marker = -1;  // -1: none; 0, 1, 2, 3: circle, square, triangle, diamond
  std::string label;
};

struct Axes {
  std::string title, x_label, y_label;
  bool log_y = false;
  bool fixed_y = false;  // use y_range instead of the data's
  Range y_range;
  bool legend_outside = false;  // the legend right of the frame (reserve legend_width()) or inside it
};

double legend_width(Canvas& canvas, const std::vector<Line>& lines);

// A frame at (x0, y0) of w x h pixels with the title above, the labels beside and the ticks from
// the data (padded a little so markers stay inside), the lines clipped to the frame, and a legend.
// No drawable point: the frame says "no data".
void draw_panel(Canvas& canvas, double x0, double y0, double w, double h, const Axes& axes,
                const std::vector<Line>& lines);

// Weight w in [0, 1] (clamped) as white -> dark blue; a NaN weight is grey.
Rgb heat_colour(double w);
void set_colour(cairo_t* cr, Rgb c);
// A vertical bar from 0 (bottom) to 1 (top) of bar_height pixels with its values beside it, under a
// caption, at (x, y); about 100 pixels wide.
constexpr double kColourBarWidth = 100, kColourBarCaption = 38;
void draw_colour_bar(Canvas& canvas, double x, double y, double bar_height, const std::string& caption);

}  // namespace tapegrad::cli::chart
