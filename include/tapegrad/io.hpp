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
///
/// Checksum. Every file written carries a CRC-32 (IEEE, zlib's crc32) in its metadata, as the last
/// entry of "__metadata__", written exactly as `"tapegrad.crc32":"xxxxxxxx"` (eight lowercase hex
/// digits). It is the CRC-32 of the whole file (the length field, the header with its padding,
/// the data) computed with those eight digits set to `00000000`; so every other byte is covered,
/// and the file stays plain safetensors for any other reader. A file that has the entry is verified
/// on every load: any changed byte (a flipped data bit, an edited header) is refused with an IoError
/// naming the file. A file without the entry (written by another tool or by tapegrad before the
/// checksum) loads unverified; SafetensorsFile::checksummed tells which, so a format that requires
/// the checksum (checkpoints) can refuse it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/tensor.hpp"

/// Files: .safetensors and atomic writes (see io.hpp); nn::save and nn::load at the end.
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
  /// The file carried the checksum and it matched (the "tapegrad.crc32" entry, which `metadata`
  /// leaves out); false for a file without one.
  bool checksummed = false;
};

/// Writes `tensors` and `metadata` to `path` atomically (see write_file_atomic), with the checksum
/// (above). dtypes written: F32, F64, I32 (from the tensor's dtype). Names must be unique and
/// non-empty; the metadata key "tapegrad.crc32" is reserved. Throws IoError.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
/// The same file's bytes in memory (what save_safetensors writes, without the file); `name` stands for
/// the path in errors.
std::string save_safetensors_bytes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                   const std::map<std::string, std::string>& metadata = {},
                                   const std::string& name = "<bytes>");
/// Reads and validates `path` (and its checksum, when it has one); throws IoError naming the path and
/// what is wrong.
SafetensorsFile load_safetensors(const std::string& path);
/// The same reader over bytes already in memory (such as a fuzzer's input); `name` stands for the path in
/// errors and in the result.
SafetensorsFile load_safetensors_bytes(std::string_view bytes, const std::string& name = "<bytes>");

/// Writes `content` to `path` atomically: a temporary `.NAME.tmp-PID` in the same directory, fsync,
/// rename over `path`, fsync of the directory. On failure the temporary is removed, `path` is untouched,
/// and IoError names the path, the step and the errno text.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace tapegrad::io

namespace tapegrad::nn {

class Module;

/// Saves every parameter of `module` to the .safetensors file `path` under its dotted name
/// (Module::named_parameters), atomically and with the checksum (see io.hpp), plus `metadata`.
/// Throws IoError naming the file.
void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});
/// Loads `path` (saved by save, or any safetensors file with the same names) into `module`'s
/// parameters, strictly: every parameter must be in the file with its dtype and shape, and the file
/// must hold nothing else. The first mismatch (a missing name, a wrong dtype or shape, an extra
/// name) throws IoError naming the file and the tensor, before anything is copied: a refused file
/// leaves the module as it was. A corrupt file is refused as load_safetensors refuses it.
void load(Module& module, const std::string& path);
/// The same on a file already read (checkpoints check its metadata first); its path names it in errors.
void load(Module& module, const io::SafetensorsFile& file);

}  // namespace tapegrad::nn
