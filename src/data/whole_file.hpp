// Reading a file whole, for the data layer's readers of whole files (plain text for language models,
// SentencePiece .model files). The io layer sits above data, so this small helper lives here.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tapegrad/error.hpp"

namespace tapegrad::data {

// The bytes of `path`; a directory or a file that cannot be opened throws IoError naming the path and
// `expected` ("a text file").
inline std::string read_whole_file(const std::string& path, const std::string& expected) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IoError(path + ": is a directory, expected " + expected);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace tapegrad::data
