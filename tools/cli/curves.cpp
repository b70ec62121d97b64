// Training curves: metrics.csv read by its column names (tapegrad/metrics.hpp), then drawn as two
// chart.hpp panels (loss; accuracy) with axes, "nice" 1-2-5 ticks (or decades on a log axis), labels and
// a legend. Not here: smoothing, interactive output, or any format other than PNG.
#include "curves.hpp"

#include <algorithm>
#include <cmath>

#include "chart.hpp"
#include "tapegrad/metrics.hpp"

namespace tapegrad::cli {

Curves read_curves(const std::string& run_dir) {
  Curves c;
  c.label = run_dir;
  while (c.label.size() > 1 && c.label.back() == '/') c.label.pop_back();
  for (const train::MetricsRow& row : train::read_metrics(run_dir + "/metrics.csv")) {
    if (!std::isnan(row.loss)) c.train_step.push_back(double(row.step)), c.train_loss.push_back(row.loss);
    if (!std::isnan(row.valid_loss)) {
      c.valid_step.push_back(double(row.step));
      c.valid_loss.push_back(row.valid_loss);
      c.valid_token_accuracy.push_back(row.valid_token_accuracy);
      c.valid_exact_match.push_back(row.valid_exact_match);
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
