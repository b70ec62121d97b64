// Training curves: metrics.csv parsed into columns, then drawn as two chart.hpp panels (loss;
// accuracy) with axes, "nice" 1-2-5 ticks (or decades on a log axis), labels and a legend. Not here:
// smoothing, interactive output, or any format other than PNG.
#include "curves.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "chart.hpp"
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
  // A run's name in the legend only when there are several.
  auto name = [&](const Curves& c, const char* what) {
    return runs.size() > 1 ? c.label + ": " + what : std::string(what);
  };
  std::vector<chart::Line> loss, accuracy;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Curves& c = runs[i];
    const chart::Rgb colour = chart::palette(i);
    auto line = [&](const std::vector<double>& x, const std::vector<double>& y, bool dashed,
                    const char* what) {
      chart::Line l;
      l.x = x, l.y = y, l.colour = colour, l.dashed = dashed, l.label = name(c, what);
      return l;
    };
    loss.push_back(line(c.train_step, c.train_loss, false, "train loss"));
    loss.push_back(line(c.valid_step, c.valid_loss, true, "valid loss"));
    accuracy.push_back(line(c.valid_step, c.valid_token_accuracy, false, "token accuracy"));
    accuracy.push_back(line(c.valid_step, c.valid_exact_match, true, "exact match"));
  }
  const double margin_l = 80, margin_r = 24, margin_t = 44, margin_b = 56, gap = 90;
  const double pw = (options.width - margin_l - margin_r - gap) / 2,
               ph = options.height - margin_t - margin_b;
  chart::Canvas canvas(options.width, options.height);
  chart::Axes loss_axes;
  loss_axes.title = options.log_loss ? "loss (log scale)" : "loss";
  loss_axes.x_label = "step";
  loss_axes.y_label = "cross-entropy (nats/token)";
  loss_axes.log_y = options.log_loss;
  chart::draw_panel(canvas, margin_l, margin_t, pw, ph, loss_axes, loss);
  chart::Axes accuracy_axes;
  accuracy_axes.title = "validation accuracy";
  accuracy_axes.x_label = "step";
  accuracy_axes.y_label = "fraction";
  accuracy_axes.fixed_y = true;
  accuracy_axes.y_range = {0, 1};
  chart::draw_panel(canvas, margin_l + pw + gap, margin_t, pw, ph, accuracy_axes, accuracy);
  canvas.write_png(png_path);
}

}  // namespace tapegrad::cli
