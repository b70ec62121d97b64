// A training run's directory (--out): the checkpoint layout, its lock and its metrics file.
//
//   DIR/.lock                   flock'ed by the one trainer writing DIR; holds its pid
//   DIR/step-00000400/          a complete checkpoint: model.safetensors + optimizer.safetensors
//   DIR/step-00000200/          the one before it (older ones are removed)
//   DIR/latest -> step-00000400 the pointer, replaced by rename(2), so always a complete pair
//   DIR/model.safetensors     -> latest/model.safetensors      (for outside tools: always loadable)
//   DIR/optimizer.safetensors -> latest/optimizer.safetensors
//   DIR/metrics.csv, DIR/samples.txt
//
// A save writes both files into a temporary directory, syncs, renames it to step-N, then swaps the
// pointer: a kill -9 at any instant leaves `latest` at the previous complete pair or the new one.
// Directories written before this layout (plain model.safetensors + optimizer.safetensors) still
// load. Internal to src/train.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "tapegrad/metrics.hpp"

namespace tapegrad::train {

struct Session;

// Where a checkpoint's two files are: through DIR/latest when it exists, else DIR itself.
struct CheckpointFiles {
  std::string dir, model, optimizer;
};
CheckpointFiles resolve_checkpoint(const std::string& dir);
// True when both name the same directory (after resolving links, `.`, `..`).
bool same_directory(const std::string& a, const std::string& b);
// True when `dir` holds a checkpoint in either layout.
bool holds_checkpoint(const std::string& dir);

// Writes session's checkpoint into dir in the layout above (no lock taken: RunDirectory holds it).
void write_checkpoint(const Session& session, const std::string& dir);

// When `latest` is the checkpoint of `bad_step` (whose parameters just gave a non-finite loss or
// gradient), points it back at the checkpoint kept before it and removes the bad one. Returns the
// step `latest` now holds, or -1 when there was none to go back to (latest is then removed too).
// Returns bad_step's predecessor untouched when latest is already older than bad_step.
int64_t roll_back_checkpoint(const std::string& dir, int64_t bad_step);

// Test-only crash points (TAPEGRAD_TEST_CRASH_AT=POINT:STEP raises SIGKILL there), so a test can
// kill a save at an exact instant: "model-written", "step-renamed", "pointer-swapped".
void crash_point(const char* point, int64_t step);

class RunDirectory {
 public:
  // Creates dir, takes its lock (IoError naming the holder's pid if another process has it),
  // removes temporaries left by killed writes, and refuses a directory that holds a checkpoint
  // unless `may_hold_checkpoint` (resuming from it, or --overwrite).
  RunDirectory(const std::string& dir, bool may_hold_checkpoint);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return dir_; }
  // Opens metrics.csv for appending at `step`: rows past it (from a run that went further before it
  // was killed) and torn lines are dropped, the header kept or written; `history`, when set and the
  // file is new, is another run's metrics.csv whose rows up to `step` are carried over.
  void open_metrics(int64_t step, const std::string& history = "");
  // Appends one row and flushes it, so a kill loses at most the row being written.
  void append_metrics(const MetricsRow& row);

 private:
  std::string dir_;
  int lock_fd_ = -1;
  std::ofstream metrics_;
};

}  // namespace tapegrad::train
