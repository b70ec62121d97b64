/// @file
/// Reading and writing .safetensors files, the format PyTorch, JAX and numpy users load directly:
/// an 8-byte little-endian header length N, N bytes of JSON header mapping each tensor name to
/// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) plus an
/// optional "__metadata__" object of string to string, then the raw little-endian data.
///
/// Writes are atomic: a temporary file in the same directory, flushed and fsync'ed, then renamed over
/// the destination, so a crash never leaves a half-written file under the real name.
/// Reads validate everything (header size against the file size, JSON syntax, dtype names, shapes,
/// offsets inside the data section, no overlaps, the data section exactly covered) and throw IoError
/// naming the path and what is wrong, never crash.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/tensor.hpp"

/// Files: .safetensors and atomic writes (see io.hpp).
namespace tapegrad::io {

/// A .safetensors file in memory: its named tensors and its string metadata.
struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< in header order (sorted by name on write)
  std::map<std::string, std::string> metadata;          ///< the "__metadata__" object
  /// The tensor called `name`; throws IoError naming the file (path stored on load) if absent.
  const Tensor& get(const std::string& name) const;
  /// The tensor called `name`, or nullptr: for optional entries, without try/catch.
  const Tensor* find(const std::string& name) const;
  std::string path;  ///< where it was loaded from (or the `name` given for bytes), for messages
};

/// Writes `tensors` and `metadata` to `path` atomically (see write_file_atomic). dtypes written: F32,
/// F64, I32 (from the tensor's dtype). Names must be unique and non-empty. Throws IoError.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
/// The same file's bytes in memory (what save_safetensors writes, without the file); `name` stands for
/// the path in errors.
std::string save_safetensors_bytes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                   const std::map<std::string, std::string>& metadata = {},
                                   const std::string& name = "<bytes>");
/// Reads and validates `path`; throws IoError naming the path and what is wrong.
SafetensorsFile load_safetensors(const std::string& path);
/// The same reader over bytes already in memory (such as a fuzzer's input); `name` stands for the path in
/// errors and in the result.
SafetensorsFile load_safetensors_bytes(std::string_view bytes, const std::string& name = "<bytes>");

/// Writes `content` to `path` atomically: a temporary `.NAME.tmp-PID` in the same directory, fsync,
/// rename over `path`, fsync of the directory. On failure the temporary is removed, `path` is untouched,
/// and IoError names the path, the step and the errno text.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace tapegrad::io
