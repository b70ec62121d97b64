// Running build/tools/tapegrad as a real process from a test: its exit code and output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tapegrad::test {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

// `tapegrad ARGS`, with `stdin_text` (if any) on its standard input.
inline Run run(const std::string& args, const std::string& stdin_text = "") {
  namespace fs = std::filesystem;
  std::string cmd = std::string(TAPEGRAD_BUILD_DIR) + "/tools/tapegrad " + args + " 2>&1";
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

// A fresh (removed, not created) path in the temporary directory, unique to this process.
inline std::string temp_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("tapegrad-" + prefix + "-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

}  // namespace tapegrad::test
