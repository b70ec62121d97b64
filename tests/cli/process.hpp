// Running build/tools/tapegrad as a real process from a test: its exit code and output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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

// A fresh (removed, not created) path in the temporary directory, unique to this process.
inline std::string temp_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("tapegrad-" + prefix + "-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

}  // namespace tapegrad::test
