// Helpers shared by the fuzz targets: the checkpoint input format, scratch files, invariant checks.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "targets.hpp"

namespace tapegrad::fuzz {

CheckpointParts split_checkpoint_input(std::string_view input) {
  std::string_view part[4];
  int n = 0;
  while (n < 3) {
    const size_t at = input.find(kCheckpointSeparator);
    if (at == std::string_view::npos) break;
    part[n++] = input.substr(0, at);
    input.remove_prefix(at + kCheckpointSeparator.size());
  }
  part[n] = input;  // the rest; missing parts stay empty
  return {std::string(part[0]), std::string(part[1]), std::string(part[2]), std::string(part[3])};
}

std::string join_checkpoint_input(const CheckpointParts& p) {
  std::string out = p.model_header;
  for (const std::string* s : {&p.model_data, &p.optimizer_header, &p.optimizer_data})
    out.append(kCheckpointSeparator).append(*s);
  return out;
}

std::string safetensors_from_parts(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  out.append(header).append(data);
  return out;
}

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string d = std::string(tmp && *tmp ? tmp : "/tmp") + "/tapegrad-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  // Registered after `dir` is constructed, so it runs before `dir` is destroyed.
  static const bool cleanup_registered = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return true;
  }();
  (void)cleanup_registered;
  return dir;
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  require(bool(out), "cannot write a scratch file");
}

const std::vector<Target>& all_targets() {
  static const std::vector<Target> targets{
      {"safetensors", safetensors}, {"checkpoint", checkpoint}, {"tsv", tsv}, {"vocab", vocab}};
  return targets;
}

}  // namespace tapegrad::fuzz
