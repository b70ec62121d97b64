// Training curves from metrics.csv, drawn with cairo: what `tapegrad plot` and the end of
// `tapegrad train` write.
#pragma once

#include <string>
#include <vector>

namespace tapegrad::cli {

// One run's metrics.csv as curves: a training point per row with a loss, a validation point per row
// with a valid_loss (NaN where such a row leaves another field empty).
struct Curves {
  std::string label;  // the run directory, as given
  std::vector<double> train_step, train_loss;
  std::vector<double> valid_step, valid_loss, valid_token_accuracy, valid_exact_match;
};

// Reads DIR/metrics.csv with train::read_metrics: columns found by name, so files of other versions
// plot too; throws tapegrad::IoError naming FILE:LINE for a malformed header or row.
Curves read_curves(const std::string& run_dir);

struct PlotOptions {
  bool log_loss = false;  // loss axis in log scale
  int width = 1200, height = 480;
};

// Two panels side by side: train and validation loss against step, and validation token accuracy
// and exact match against step; each run one colour, overlaid, with axes, ticks, labels and a
// legend. Throws IoError if the PNG cannot be written.
void plot_curves(const std::vector<Curves>& runs, const std::string& png_path, const PlotOptions& options);

}  // namespace tapegrad::cli
