// Running build/tools/tapegrad (or another built program) as a real process from a test: its exit code
// and output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tapegrad/io.hpp"

namespace tapegrad::test {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

// A shell command line `cmd` with `stdin_text` (if any) on its standard input; its stderr goes where
// `stderr_to` says, as the shell's 2> reads it (by default joined to its stdout, into `out`).
inline Run run_command(std::string cmd, const std::string& stdin_text = "",
                       const std::string& stderr_to = "&1") {
  namespace fs = std::filesystem;
  cmd += " 2>" + stderr_to;
  if (!stdin_text.empty()) {
    const std::string in = fs::temp_directory_path() / ("tapegrad-cli-stdin-" + std::to_string(::getpid()));
    std::ofstream(in) << stdin_text;
    cmd += " < " + in;
  }
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// `tapegrad ARGS`, with `stdin_text` (if any) on its standard input.
inline Run run(const std::string& args, const std::string& stdin_text = "") {
  return run_command(std::string(TAPEGRAD_BUILD_DIR) + "/tools/tapegrad " + args, stdin_text);
}

// What a process wrote, stream by stream.
struct SplitRun {
  int code;
  std::string out, err;  // stdout; stderr
};

// `tapegrad ARGS` like run(), with stdout and stderr kept apart.
inline SplitRun run_split(const std::string& args, const std::string& stdin_text = "") {
  namespace fs = std::filesystem;
  const std::string err_path =
      fs::temp_directory_path() / ("tapegrad-cli-stderr-" + std::to_string(::getpid()));
  const Run r =
      run_command(std::string(TAPEGRAD_BUILD_DIR) + "/tools/tapegrad " + args, stdin_text, err_path);
  std::ifstream in(err_path);
  std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(err_path);
  return {r.code, r.out, err};
}

// `tapegrad ARGS` with one extra environment variable set (NAME=VALUE) for the child only.
inline Run run_with_env(const std::string& name, const std::string& value, const std::string& args) {
  ::setenv(name.c_str(), value.c_str(), 1);
  Run r = run(args);
  ::unsetenv(name.c_str());
  return r;
}

// Starts `tapegrad ARGS...` in the background with its output discarded; returns its pid.
inline pid_t spawn(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    const std::string exe = std::string(TAPEGRAD_BUILD_DIR) + "/tools/tapegrad";
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Width and height from a PNG's IHDR chunk, or {0, 0} when the file is not a PNG.
inline std::pair<uint32_t, uint32_t> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> b(24);
  in.read(reinterpret_cast<char*>(b.data()), 24);
  const unsigned char sig[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (!in || !std::equal(sig, sig + 8, b.begin()) || std::string(b.begin() + 12, b.begin() + 16) != "IHDR")
    return {0, 0};
  auto be32 = [&](size_t at) {
    return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 | b[at + 3];
  };
  return {be32(16), be32(20)};
}

// Every parameter of two checkpoint directories' model.safetensors, bit for bit (float32).
inline void require_same_parameters(const std::string& a_dir, const std::string& b_dir) {
  const auto a = io::load_safetensors(a_dir + "/model.safetensors");
  const auto b = io::load_safetensors(b_dir + "/model.safetensors");
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    CAPTURE(a.tensors[i].first);
    const Tensor &x = a.tensors[i].second, &y = b.tensors[i].second;
    REQUIRE(x.numel() == y.numel());
    CHECK(std::memcmp(x.data<float>(), y.data<float>(), size_t(x.numel()) * sizeof(float)) == 0);
  }
}

// A fresh (removed, not created) path in the temporary directory, unique to this process.
inline std::string temp_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p =
      fs::temp_directory_path() / ("tapegrad-" + prefix + "-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

}  // namespace tapegrad::test
