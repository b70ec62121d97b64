// Atomic file replacement: write a temporary file in the destination's directory, fsync it, rename it
// over the destination, then fsync the directory. rename(2) within one file system is atomic, so a
// reader (or a crash) sees either the old file or the complete new one, never a prefix. The temporary
// lives in the same directory because rename cannot cross file systems. What this leaves out: keeping
// the old file's permissions or owner (the new file gets 0666 & ~umask), and following a symlink at
// the destination (the link itself is replaced).
#include "src/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"

namespace tapegrad::io {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// Unique per process and per call, so two threads saving the same path do not share a temporary.
std::string temp_name_for(const std::filesystem::path& dest) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t n = counter.fetch_add(1);
  // Appended piecewise: GCC 12 gives a false -Wrestrict on "literal" + std::string temporaries.
  std::string name = ".";
  name += dest.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  if (n) {
    name += '-';
    name += std::to_string(n);
  }
  return (dest.parent_path() / name).string();
}

// write(2) may write less than asked (signals, pipes, quotas); loop until done or a real error.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

}  // namespace

void write_file_atomic_chunks(const std::string& path, std::span<const std::string_view> chunks) {
  const std::filesystem::path dest(path);
  if (dest.filename().empty() || dest.filename() == "." || dest.filename() == "..")
    throw IoError(path + ": cannot write: expected a file name, not a directory");
  const std::string tmp = temp_name_for(dest);

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  // The name carries our pid and a per-process counter, so an existing file of that name is not
  // another live writer's: it is left over from a crashed process that had the same pid (common in
  // containers, where the pid repeats from run to run). Replace it rather than fail forever.
  if (fd < 0 && errno == EEXIST) {
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  }
  if (fd < 0) {
    const int err = errno;
    throw IoError(path + ": cannot create temporary file " + tmp + ": " + errno_text(err));
  }
  // From here every failure closes and removes the temporary, so nothing is left behind and the
  // destination is untouched.
  auto fail = [&](const char* step) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError(path + ": cannot write (" + step + " " + tmp + "): " + errno_text(err));
  };
  for (std::string_view c : chunks)
    if (!write_all(fd, c.data(), c.size())) fail("write");
  if (::fsync(fd) != 0) fail("fsync");
  // close can report a deferred write error (NFS), so its result matters.
  const int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename onto the destination from");

  // The rename is only durable once the directory entry is on disk. Some file systems cannot fsync
  // a directory (EINVAL); the data is already in place there, so that is not an error.
  const std::string dir = dest.parent_path().empty() ? std::string(".") : dest.parent_path().string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw IoError(path + ": written, but cannot open directory " + dir + " to sync it: " + errno_text(err));
  }
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(dfd);
    throw IoError(path + ": written, but cannot sync directory " + dir + ": " + errno_text(err));
  }
  ::close(dfd);
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string_view chunk(content);
  write_file_atomic_chunks(path, std::span<const std::string_view>(&chunk, 1));
}

}  // namespace tapegrad::io
