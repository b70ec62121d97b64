/// @file
/// A training run's metrics.csv, as named columns: the one description of the file that the trainer
/// writes and `tapegrad plot` reads.
///
/// A row is a training step's figures (loss, lr, grad_norm, tokens_per_second), an evaluation's
/// (valid_*), or both; the columns a row does not have are empty fields. Every column is found by its
/// name in the header line, so a reader keeps reading files whose columns were reordered, added or
/// removed by another version.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace tapegrad::train {

/// One row of metrics.csv; NaN marks a column the row leaves empty.
struct MetricsRow {
  int64_t step = 0;  ///< The optimizer step the figures belong to (1 after the first step).
  double loss = std::numeric_limits<double>::quiet_NaN();               ///< Training loss of the step.
  double lr = std::numeric_limits<double>::quiet_NaN();                 ///< Learning rate of the step.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();          ///< Gradient norm before clipping.
  double tokens_per_second = std::numeric_limits<double>::quiet_NaN();  ///< Target tokens per second.
  double valid_loss = std::numeric_limits<double>::quiet_NaN();         ///< Held-out loss (teacher-forced).
  double valid_token_accuracy = std::numeric_limits<double>::quiet_NaN();  ///< Held-out token accuracy.
  double valid_exact_match = std::numeric_limits<double>::quiet_NaN();     ///< Held-out exact match.
  /// Held-out loss in bits per character (language models on --text).
  double valid_bits_per_char = std::numeric_limits<double>::quiet_NaN();
  /// `<pad>` share of the step's batch positions (data::Batch::padding_fraction); --batch-tokens runs.
  double padding_fraction = std::numeric_limits<double>::quiet_NaN();
};

/// The header line of metrics.csv (no newline): the column names in the order metrics_line writes them,
/// "step,loss,lr,grad_norm,tokens_per_second,valid_loss,valid_token_accuracy,valid_exact_match,
/// valid_bits_per_char,padding_fraction".
std::string metrics_header();

/// `row` as a metrics.csv line in metrics_header()'s order (no newline): an empty field for NaN, otherwise
/// the shortest decimal that reads back as the same double, so the file keeps every bit of a figure.
std::string metrics_line(const MetricsRow& row);

/// The columns of a metrics.csv header line, by name: which field of a row holds which MetricsRow member.
class MetricsColumns {
 public:
  /// Reads a header line; throws IoError naming `where` (FILE:LINE) if it has no "step" column or names
  /// one column twice. Columns it does not know are skipped; those it lacks stay NaN in every row.
  MetricsColumns(const std::string& header, const std::string& where);
  /// A data line as a row; throws IoError naming `where` when its field count differs from the header's,
  /// the step is not a whole number, or a field is not a number.
  MetricsRow parse(const std::string& line, const std::string& where) const;
  /// parse, or nothing for a line that is not a complete row (a write torn by a kill, a stray line).
  std::optional<MetricsRow> try_parse(const std::string& line) const;

 private:
  std::vector<int> member_;  // per field: an index into the column table, or -1 for an unknown column
};

/// Every row of the metrics.csv at `path`, in file order; throws IoError naming the file (and FILE:LINE
/// for a bad header or row), including when it cannot be opened.
std::vector<MetricsRow> read_metrics(const std::string& path);

}  // namespace tapegrad::train
