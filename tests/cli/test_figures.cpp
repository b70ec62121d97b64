// The command line's drawing code called directly (no process): chart ticks, a line panel on degenerate
// data (one point, all-equal y, NaN values, zero and negative values on a log axis, nothing drawable)
// read back pixel by pixel, and experiment figures written as PNG, with check_figure's errors for bad
// ones.
#include <cairo.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <vector>

#include "process.hpp"
#include "tapegrad/error.hpp"
#include "tools/cli/chart.hpp"
#include "tools/cli/figures.hpp"

namespace fs = std::filesystem;
using namespace tapegrad::cli;
using tapegrad::experiment::Figure;
using tapegrad::experiment::Series;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Pixels of one colour (within 2/255 per channel) inside a rectangle of an RGB24 surface, with their
// centroid and vertical extent.
struct Pixels {
  size_t count = 0;
  double cx = 0, cy = 0, top = 1e9, bottom = -1e9;
};

Pixels find_colour(cairo_surface_t* s, chart::Rgb c, int x0, int y0, int x1, int y1) {
  cairo_surface_flush(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  x1 = std::min(x1, cairo_image_surface_get_width(s)), y1 = std::min(y1, cairo_image_surface_get_height(s));
  auto near = [](uint32_t v, double want) { return std::abs(double(v) - want * 255) <= 2.5; };
  Pixels p;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      const uint32_t px = *reinterpret_cast<const uint32_t*>(data + y * stride + x * 4);
      if (near(px >> 16 & 0xff, c.r) && near(px >> 8 & 0xff, c.g) && near(px & 0xff, c.b)) {
        ++p.count, p.cx += x, p.cy += y;
        p.top = std::min(p.top, double(y)), p.bottom = std::max(p.bottom, double(y));
      }
    }
  if (p.count) p.cx /= double(p.count), p.cy /= double(p.count);
  return p;
}

// One panel with frame (50, 30, 300 x 200) on a 480 x 300 canvas; the legend sits outside the frame.
constexpr int kX0 = 50, kY0 = 30, kW = 300, kH = 200;

struct Drawn {
  Pixels series;         // the line's exact colour inside the frame
  size_t middle_tinted;  // pixels of the line's blue hue (anti-aliased too) in the frame's middle third
  cairo_status_t status;
};

size_t tinted(cairo_surface_t* s, int x0, int y0, int x1, int y1) {
  cairo_surface_flush(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  size_t n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      const uint32_t px = *reinterpret_cast<const uint32_t*>(data + y * stride + x * 4);
      n += int(px & 0xff) - int(px >> 16 & 0xff) > 40;  // blue well above red: palette(0), not grey
    }
  return n;
}

Drawn draw_one(const std::vector<double>& x, const std::vector<double>& y, bool log_y,
               const std::vector<double>& lo = {}, const std::vector<double>& hi = {}) {
  chart::Canvas canvas(480, 300);
  chart::Line l;
  l.x = x, l.y = y, l.y_lo = lo, l.y_hi = hi;
  l.colour = chart::palette(0), l.marker = 0, l.label = "series";
  chart::Axes axes;
  axes.title = "title", axes.x_label = "x", axes.y_label = "y";
  axes.log_y = log_y;
  axes.legend_outside = true;
  chart::draw_panel(canvas, kX0, kY0, kW, kH, axes, {l});
  cairo_surface_t* s = cairo_get_target(canvas.cr());
  return {find_colour(s, chart::palette(0), kX0 + 1, kY0 + 1, kX0 + kW - 1, kY0 + kH - 1),
          tinted(s, kX0 + kW / 3, kY0 + kH / 3, kX0 + 2 * kW / 3, kY0 + 2 * kH / 3),
          cairo_status(canvas.cr())};
}

// Reads a PNG back as an RGB24 surface (the caller destroys it).
cairo_surface_t* load_png(const std::string& path) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  REQUIRE(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS);
  return s;
}

Figure accuracy_figure() {
  Figure f;
  f.file = "accuracy.png";
  f.title = "exact match by source length";
  f.x_label = "source length";
  f.y_label = "exact match";
  f.series.push_back(
      {"rnn", {8, 16, 24, 32}, {0.9, 0.5, 0.2, 0.05}, {0.85, 0.4, 0.1, 0.0}, {0.95, 0.6, 0.3, 0.1}});
  f.series.push_back({"attention-rnn", {8, 16, 24, 32}, {1.0, 0.98, 0.97, 0.95}, {}, {}});
  return f;
}

}  // namespace

TEST_CASE("chart ticks: 1-2-5 steps, decades, and no ticks (not a hang) for a range of one value",
          "[cli][figures]") {
  using Catch::Matchers::Approx;
  CHECK_THAT(chart::linear_ticks(0, 1), Approx(std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  CHECK_THAT(chart::linear_ticks(3, 47), Approx(std::vector<double>{10, 20, 30, 40}));
  CHECK_THAT(chart::log_ticks(0.1, 5), Approx(std::vector<double>{0.1, 0.2, 0.5, 1, 2, 5}));
  CHECK_THAT(chart::log_ticks(0.1, 10),
             Approx(std::vector<double>{0.1, 1, 10}));  // two decades: decades only
  CHECK(chart::log_ticks(1e-3, 1e3).size() == 7);
  CHECK(chart::linear_ticks(5, 5).empty());
  CHECK(chart::log_ticks(0, 1).empty());
  CHECK(chart::log_ticks(-1, 1).empty());
}

TEST_CASE("chart panel: degenerate data is drawn where it belongs, never as NaN", "[cli][figures]") {
  const double cx = kX0 + kW / 2.0, cy = kY0 + kH / 2.0;
  SECTION("one point: a marker in the middle of the frame") {
    const Drawn d = draw_one({5}, {0.7}, false);
    CHECK(d.status == CAIRO_STATUS_SUCCESS);
    REQUIRE(d.series.count > 10);
    CHECK(d.series.cx == Approx(cx).margin(2));
    CHECK(d.series.cy == Approx(cy).margin(2));
  }
  SECTION("all-equal y: a horizontal line across the middle") {
    const Drawn d = draw_one({1, 2, 3}, {0.5, 0.5, 0.5}, false);
    CHECK(d.status == CAIRO_STATUS_SUCCESS);
    REQUIRE(d.series.count > 30);  // the markers (an anti-aliased line has few pixels of the exact colour)
    CHECK(d.series.cy == Approx(cy).margin(2));
    CHECK(d.series.bottom - d.series.top < 12);
  }
  SECTION("NaN values are skipped: the finite points span the frame, the line breaks at the gap") {
    const Drawn d = draw_one({1, 2, 3, 4}, {0.0, kNaN, kNaN, 1.0}, false);
    CHECK(d.status == CAIRO_STATUS_SUCCESS);
    CHECK(d.middle_tinted == 0);
    CHECK(draw_one({1, 4}, {0.0, 1.0}, false).middle_tinted > 50);  // without the gap: a line through it
    REQUIRE(d.series.count > 10);
    CHECK(d.series.top < kY0 + 0.1 * kH);
    CHECK(d.series.bottom > kY0 + 0.9 * kH);
  }
  SECTION("log y: zero and negative values skipped, the positive ones span the axis") {
    const Drawn d = draw_one({1, 2, 3, 4}, {-1, 0, 0.1, 10}, true);
    CHECK(d.status == CAIRO_STATUS_SUCCESS);
    REQUIRE(d.series.count > 10);
    CHECK(d.series.top < kY0 + 0.2 * kH);
    CHECK(d.series.bottom > kY0 + 0.8 * kH);
  }
  SECTION("log y: one positive value, error bars reaching below zero") {
    const Drawn d = draw_one({1, 2}, {-3, 0.5}, true, {-4, -0.5}, {-2, 0.9});
    CHECK(d.status == CAIRO_STATUS_SUCCESS);
    REQUIRE(d.series.count > 10);
    CHECK(d.series.bottom >= kY0 + kH - 2);  // the bar from 0.5 down to -0.5 ends at the frame
  }
  SECTION("nothing drawable: the frame says no data") {
    const Drawn d = draw_one({1, 2}, {kNaN, kNaN}, false);
    CHECK(d.status == CAIRO_STATUS_SUCCESS);
    CHECK(d.series.count == 0);
  }
}

TEST_CASE("draw_figure: a line chart with error bars, one colour per series, as a PNG", "[cli][figures]") {
  const std::string dir = tapegrad::test::temp_dir("figures", "lines");
  fs::create_directories(dir);
  Figure f = accuracy_figure();
  draw_figure(f, dir + "/a.png");
  const auto [w, h] = tapegrad::test::png_size(dir + "/a.png");
  CHECK(w > 900);  // the frame plus the legend beside it
  CHECK(h == 520);
  cairo_surface_t* s = load_png(dir + "/a.png");
  const Pixels rnn = find_colour(s, chart::palette(0), 0, 0, 900, 520);
  const Pixels attention = find_colour(s, chart::palette(1), 0, 0, 900, 520);
  cairo_surface_destroy(s);
  CHECK(rnn.count > 100);
  CHECK(attention.count > 100);
  // The rnn decays from 0.9 to 0.05 with bars down to 0: it spans far more height than the flat line.
  CHECK(rnn.bottom - rnn.top > 3 * (attention.bottom - attention.top));
  // log_y with a zero in the data still draws.
  f.log_y = true;
  f.series[0].y[3] = 0;
  REQUIRE_NOTHROW(draw_figure(f, dir + "/log.png"));
  CHECK(tapegrad::test::png_size(dir + "/log.png").second == 520);
  fs::remove_all(dir);
}

TEST_CASE("draw_figure: a heatmap grows with its cells and colours a 1 dark blue", "[cli][figures]") {
  const std::string dir = tapegrad::test::temp_dir("figures", "heatmap");
  fs::create_directories(dir);
  Figure f;
  f.kind = Figure::Kind::heatmap;
  f.file = "map.png";
  f.title = "cross-attention";
  f.x_label = "source position";
  f.y_label = "output position";
  f.cells = {{1, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0.5, kNaN, 0}};
  f.row_labels = {"a", "b", "c"};
  f.col_labels = {"0", "1", "2", "3", "4"};
  draw_figure(f, dir + "/one.png");
  f.cells[1][1] = 1;
  draw_figure(f, dir + "/two.png");
  for (auto& row : f.cells) row.insert(row.end(), {0, 0, 0, 0, 0});
  f.col_labels.clear();  // numbered 0..9
  draw_figure(f, dir + "/wide.png");
  const auto one = tapegrad::test::png_size(dir + "/one.png"),
             wide = tapegrad::test::png_size(dir + "/wide.png");
  CHECK(one.first > 100);
  CHECK(wide.first > one.first);
  CHECK(wide.second == one.second);
  cairo_surface_t* a = load_png(dir + "/one.png");
  cairo_surface_t* b = load_png(dir + "/two.png");
  const chart::Rgb dark = chart::heat_colour(1);
  const size_t ones_a = find_colour(a, dark, 0, 0, 10000, 10000).count;
  const size_t ones_b = find_colour(b, dark, 0, 0, 10000, 10000).count;
  cairo_surface_destroy(a);
  cairo_surface_destroy(b);
  CHECK(ones_b >= ones_a + 100);  // one more cell of at least 10 x 10 pixels
  fs::remove_all(dir);
}

TEST_CASE("check_figure: a bad figure is an Error naming its file and the fault", "[cli][figures][errors]") {
  using Catch::Contains;
  const std::string png = (fs::temp_directory_path() / "tapegrad-figures-unused.png").string();
  fs::remove(png);
  Figure f = accuracy_figure();
  REQUIRE_NOTHROW(check_figure(f));
  f.series[1].x.clear(), f.series[1].y.clear();
  CHECK_THROWS_WITH(draw_figure(f, png),
                    Contains("accuracy.png") && Contains("'attention-rnn' has no points"));
  CHECK_FALSE(fs::exists(png));
  f = accuracy_figure();
  f.series[0].y.pop_back();
  CHECK_THROWS_WITH(check_figure(f), Contains("accuracy.png") && Contains("4 x values and 3 y values"));
  f = accuracy_figure();
  f.series[0].y_hi.pop_back();
  CHECK_THROWS_WITH(check_figure(f), Contains("y_lo and y_hi"));
  f = accuracy_figure();
  f.series.clear();
  CHECK_THROWS_WITH(check_figure(f), Contains("no series"));
  f = accuracy_figure();
  f.file = "../up.png";
  CHECK_THROWS_WITH(check_figure(f), Contains("'../up.png'"));
  f.file = "";
  CHECK_THROWS_WITH(check_figure(f), Contains("exact match by source length"));
  Figure h;
  h.kind = Figure::Kind::heatmap;
  h.file = "map.png";
  CHECK_THROWS_WITH(check_figure(h), Contains("map.png") && Contains("no cells"));
  h.cells = {{0.1, 0.2}, {0.3}};
  CHECK_THROWS_WITH(check_figure(h), Contains("row 1 has 1 cells"));
  h.cells = {{0.1, 0.2}, {0.3, 1.5}};
  CHECK_THROWS_WITH(check_figure(h), Contains("[1][1]") && Contains("outside [0, 1]"));
  h.cells = {{0.1, 0.2}, {0.3, 0.4}};
  h.row_labels = {"a"};
  CHECK_THROWS_WITH(check_figure(h), Contains("1 row labels for 2 rows"));
  h.row_labels.clear();
  h.col_labels = {"a", "b", "c"};
  CHECK_THROWS_WITH(check_figure(h), Contains("3 column labels for 2 columns"));
  CHECK_THROWS_AS(check_figure(h), tapegrad::Error);
}
