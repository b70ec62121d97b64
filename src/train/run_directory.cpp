// The run directory: checkpoint layout with an atomically replaced pointer, the trainer's lock, and
// metrics.csv written row by row (see run_directory.hpp for the layout and its guarantee).
#include "src/train/run_directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "src/train/train_internal.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/metrics.hpp"
#include "tapegrad/io.hpp"

namespace fs = std::filesystem;

namespace tapegrad::train {

namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", (long long)step);
  return buf;
}

// A name written by a save that was killed before its rename: ".<name>.tmp-<pid>[-<n>]".
bool is_temporary(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos;
}

bool is_step_dir(const std::string& name) {
  return name.size() > 5 && name.rfind("step-", 0) == 0 &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(dir + ": cannot open to sync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) throw IoError(dir + ": cannot sync: " + std::strerror(err));
}

// Points `link` at `target` atomically: a temporary symlink renamed over it.
void replace_symlink(const std::string& dir, const std::string& link, const std::string& target) {
  const std::string tmp = dir + "/." + link + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0)
    throw IoError(dir + "/" + link + ": cannot create link to " + target + ": " + std::strerror(errno));
  if (::rename(tmp.c_str(), (dir + "/" + link).c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(dir + "/" + link + ": cannot replace: " + std::strerror(err));
  }
}

std::string read_link(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::read_symlink(path, ec);
  return ec ? std::string() : p.string();
}

// The pid in a lock file, for the message naming the process that holds it.
std::string lock_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

// Rows of a metrics file at or below `step`, in order, rewritten in today's columns; torn lines and a
// file without a metrics header (or none at all) give nothing.
std::vector<std::string> rows_through(const std::string& path, int64_t step) {
  std::vector<std::string> rows;
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return rows;
  std::optional<MetricsColumns> columns;
  try {
    columns.emplace(line, path + ":1");
  } catch (const IoError&) {
    return rows;
  }
  while (std::getline(in, line))
    if (const std::optional<MetricsRow> row = columns->try_parse(line); row && row->step <= step)
      rows.push_back(metrics_line(*row));
  return rows;
}

}  // namespace

void crash_point(const char* point, int64_t step) {
  static const char* spec = std::getenv("TAPEGRAD_TEST_CRASH_AT");
  if (!spec) return;
  if (std::string(spec) == std::string(point) + ":" + std::to_string(step)) ::raise(SIGKILL);
}

CheckpointFiles resolve_checkpoint(const std::string& dir) {
  const std::string latest = read_link(dir + "/" + kLatest);
  std::string at = dir;
  if (!latest.empty()) {
    at = dir + "/" + latest;
    if (!fs::is_directory(at))
      throw IoError(dir + "/" + kLatest + ": points to " + latest + ", which is not a checkpoint directory");
  }
  return {at, at + "/" + kModelFile, at + "/" + kOptimizerFile};
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

bool holds_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_symlink(dir + "/" + kLatest, ec) || fs::exists(dir + "/" + kModelFile, ec);
}

void write_checkpoint(const Session& s, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir + ": cannot create checkpoint directory: " + ec.message());
  // A checkpoint is only worth keeping if it is finite: stop before replacing the last good one.
  if (const std::string bad = first_nonfinite(s.model->named_parameters(), /*of_grads=*/false); !bad.empty())
    throw NonFiniteError("step " + std::to_string(s.step) + ": parameter " + bad +
                         " is not finite after the update; training stopped, the last checkpoint is kept");
  const std::string name = step_dir_name(s.step);
  const std::string previous = read_link(dir + "/" + kLatest);
  if (previous == name && fs::is_directory(dir + "/" + name)) return;  // this state is already saved
  // 1. Both files into a temporary directory; a kill here leaves only a temporary.
  const std::string tmp = dir + "/." + name + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec)) throw IoError(tmp + ": cannot create: " + ec.message());
  write_checkpoint_files(s, tmp, [&] { crash_point("model-written", s.step); });
  sync_directory(tmp);
  // 2. Under its real name. An existing step-N here is not `latest` (checked above): a leftover of a
  // run killed between its rename and its pointer swap, or of an overwritten run. Replace it.
  const std::string final_dir = dir + "/" + name;
  fs::remove_all(final_dir, ec);
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0)
    throw IoError(final_dir + ": cannot rename the new checkpoint into place: " + std::strerror(errno));
  sync_directory(dir);
  crash_point("step-renamed", s.step);
  // 3. The pointer: from this rename on, readers see the new pair.
  replace_symlink(dir, kLatest, name);
  sync_directory(dir);
  crash_point("pointer-swapped", s.step);
  // 4. The files outside tools open, as links through the pointer (once; older layouts had files).
  for (const char* file : {kModelFile, kOptimizerFile})
    if (read_link(dir + "/" + file) != std::string(kLatest) + "/" + file)
      replace_symlink(dir, file, std::string(kLatest) + "/" + file);
  // 5. Keep this checkpoint and the one before it.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (is_step_dir(n) && n != name && n != previous) fs::remove_all(entry.path(), ec);
  }
}

int64_t roll_back_checkpoint(const std::string& dir, int64_t bad_step) {
  const std::string latest = read_link(dir + "/" + kLatest);
  auto step_of = [](const std::string& name) { return is_step_dir(name) ? std::stoll(name.substr(5)) : -1; };
  if (latest != step_dir_name(bad_step)) return latest.empty() ? -1 : step_of(latest);
  std::error_code ec;
  std::string before;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (is_step_dir(n) && step_of(n) < bad_step && (before.empty() || step_of(n) > step_of(before)))
      before = n;
  }
  if (before.empty()) {
    ::unlink((dir + "/" + kLatest).c_str());
  } else {
    replace_symlink(dir, kLatest, before);
  }
  sync_directory(dir);
  fs::remove_all(dir + "/" + latest, ec);
  return before.empty() ? -1 : step_of(before);
}

RunDirectory::RunDirectory(const std::string& dir, bool may_hold_checkpoint) : dir_(dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("--out " + dir + ": cannot create the directory: " + ec.message());
  const std::string lock_path = dir + "/.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd_ < 0) throw IoError(lock_path + ": cannot open the lock file: " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = lock_holder(lock_fd_);
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err == EWOULDBLOCK)
      throw IoError("--out " + dir + ": another trainer (pid " + holder + ") is writing to this directory");
    throw IoError(lock_path + ": cannot lock: " + std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The lock is held; only the pid shown to a second trainer is missing.
  }
  if (!may_hold_checkpoint && holds_checkpoint(dir)) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw IoError("--out " + dir + ": holds a checkpoint; pass --resume " + dir +
                  " to continue it, or --overwrite to replace it");
  }
  // We hold the lock, so every temporary here belongs to a process that died mid-write.
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_temporary(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
}

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing releases the flock
}

void RunDirectory::open_metrics(int64_t step, const std::string& history) {
  const std::string path = dir_ + "/metrics.csv";
  std::string source = path;
  std::error_code ec;
  if (!fs::exists(path, ec) && !history.empty()) source = history;
  std::string content = metrics_header() + "\n";
  if (step > 0)
    for (const std::string& row : rows_through(source, step)) content += row + "\n";
  // Rewritten atomically: a kill here leaves the old file, not a truncated one.
  io::write_file_atomic(path, content);
  metrics_.open(path, std::ios::app);
  if (!metrics_) throw IoError(path + ": cannot open for appending");
}

void RunDirectory::append_metrics(const MetricsRow& row) {
  metrics_ << metrics_line(row) << '\n' << std::flush;
  if (!metrics_) throw IoError(dir_ + "/metrics.csv: write failed");
}

}  // namespace tapegrad::train
