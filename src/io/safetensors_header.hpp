// Internal to the io layer: the safetensors header, its parser and the helpers the reader and the
// writer share (src/io/safetensors.cpp reads and writes files; safetensors_header.cpp parses and
// validates the JSON header against the file).
#pragma once

#include <bit>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/tensor.hpp"

namespace tapegrad::io::detail {

// Tensor storage is written and read as host memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "tapegrad's safetensors io assumes a little-endian host");

// Ordered so that tensors come back in header order and the writer controls key order.
using Json = nlohmann::ordered_json;

// Real headers are at most a few MB; the reference implementation uses the same limit. Anything larger
// is a corrupt length field, and must not become a 2^63-byte allocation.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
constexpr uint64_t kLengthFieldBytes = 8;

// The checksum every file tapegrad writes carries in "__metadata__" (the rule is in io.hpp): the
// key, and the exact text of its entry, which the reader finds in the raw header.
constexpr std::string_view kChecksumKey = "tapegrad.crc32";
constexpr std::string_view kChecksumEntryStart = "\"tapegrad.crc32\":\"";
constexpr std::string_view kChecksumPlaceholder = "00000000";

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320: zlib's crc32 and Python's zlib.crc32) of
// `bytes`, continuing from `crc` (0 to start).
uint32_t crc32(uint32_t crc, std::string_view bytes);
// Eight lowercase hex digits.
std::string crc32_hex(uint32_t crc);

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

struct Header {
  std::vector<Entry> entries;  // header order
  std::map<std::string, std::string> metadata;
};

[[noreturn]] void fail(const std::string& path, const std::string& what);
// A string as JSON would print it (quotes, escapes); never throws, even on invalid UTF-8.
std::string quoted(const std::string& s);
bool is_valid_utf8(const std::string& s);
// "F32", "F64", "I32".
const char* safetensors_dtype(DType d);
// Parses and validates the header text of a file whose data section starts at data_start and holds
// data_size bytes: dtypes, shapes, offsets inside the data, no overlaps, the data exactly covered.
Header parse_header(const std::string& path, std::string_view text, uint64_t data_start, uint64_t data_size);

}  // namespace tapegrad::io::detail
