// Experiment figures (experiment::Figure, described by the library) drawn as PNG: what
// `tapegrad experiment --out DIR` writes as DIR/<figure.file> beside report.md.
#pragma once

#include <string>

#include "experiments/experiment.hpp"

namespace tapegrad::cli {

// Throws Error naming the figure's file and what is wrong: no file name or not a plain *.png name,
// no series or an empty one, x/y/y_lo/y_hi of different lengths, an empty or ragged heatmap, labels
// that do not match its rows or columns, a cell outside [0, 1]. NaN values are allowed (skipped).
void check_figure(const experiment::Figure& figure);

// Checks, then draws. Lines: axes with ticks and labels, one colour and marker per series, a legend
// right of the frame, bars from y_lo to y_hi, a log y axis on log_y (values <= 0 skipped). Heatmap:
// one cell per value (white 0 to dark blue 1, NaN grey), row and column labels, a colour bar.
// Throws IoError if the PNG cannot be written.
void draw_figure(const experiment::Figure& figure, const std::string& png_path);

}  // namespace tapegrad::cli
