// The safetensors header parser (src/io/safetensors_header.hpp): every number in the JSON header is
// checked against the file before the reader uses it, so a corrupt or hostile header yields an
// IoError naming the path, the tensor and the byte offsets.
#include "src/io/safetensors_header.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>

#include "tapegrad/checked.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::io::detail {

// The format needs depth 3 (header object, entry object, shape array); the limit keeps a hostile
// header of nested brackets cheap.
constexpr int kMaxJsonDepth = 8;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError(path + ": " + what);
}

// A string as JSON would print it (quotes, escapes); never throws, even on invalid UTF-8.
std::string quoted(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool is_valid_utf8(const std::string& s) {
  try {
    (void)Json(s).dump();
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

namespace {
// The byte-at-a-time table of the reflected polynomial; a checkpoint of a few MB takes milliseconds.
constexpr std::array<uint32_t, 256> kCrcTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}();
}  // namespace

uint32_t crc32(uint32_t crc, std::string_view bytes) {
  crc = ~crc;
  for (const char ch : bytes) crc = kCrcTable[(crc ^ uint8_t(ch)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string crc32_hex(uint32_t crc) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, crc >>= 4) out[size_t(i)] = kDigits[crc & 0xf];
  return out;
}

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::i32:
      return "I32";
  }
  return "?";
}

// Every dtype the format defines that tapegrad has no Tensor type for; named in the error so that a
// user knows the file is fine but needs converting.
constexpr const char* kForeignDtypes[] = {"BOOL",    "U8",  "I8",      "I16",     "U16",     "F16",
                                          "BF16",    "U32", "I64",     "U64",     "F8_E5M2", "F8_E4M3",
                                          "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

// Where things are, for messages: data offsets relative to the data section and absolute in the file.
struct Positions {
  uint64_t data_start;  // file offset of the data section
  std::string data_range(uint64_t b, uint64_t e) const {
    // Appended piecewise: GCC 12 gives a false -Wrestrict on "literal" + std::string temporaries.
    std::string out = "[";
    out += std::to_string(b) + "," + std::to_string(e) + ") (file bytes ";
    out += std::to_string(data_start + b) + ".." + std::to_string(data_start + e) + ")";
    return out;
  }
};

// "integer 3", "string \"F32\"", "array [1,2]": what a JSON value is, for "expected X, got Y".
std::string got(const Json& j) {
  const char* type = j.is_number_integer() ? "integer" : j.is_number_float() ? "number" : j.type_name();
  std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(type) + " " + text;
}

// A JSON value that must be a non-negative integer (shape entries, offsets), as uint64.
uint64_t expect_uint(const std::string& path, const std::string& where, const Json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) fail(path, where + " is " + j.dump() + "; expected a non-negative integer");
  fail(path, where + ": expected a non-negative integer, got " + got(j));
}

DType parse_dtype(const std::string& path, const std::string& tensor, const Json& j) {
  if (!j.is_string()) fail(path, tensor + ": \"dtype\": expected a string such as \"F32\", got " + got(j));
  const std::string& s = j.get_ref<const std::string&>();
  for (DType d : {DType::f32, DType::f64, DType::i32})
    if (s == safetensors_dtype(d)) return d;
  for (const char* f : kForeignDtypes)
    if (s == f)
      fail(path,
           tensor + ": dtype " + quoted(s) +
               " is valid safetensors but not supported by tapegrad (supported: F32, F64, I32); convert the "
               "tensor before loading");
  fail(path, tensor + ": unknown dtype " + quoted(s) + "; expected one of F32, F64, I32");
}

Json parse_json(const std::string& path, std::string_view text) {
  // nlohmann keeps the last of duplicate keys silently; a header naming a tensor twice is ambiguous,
  // so duplicates are refused. One key set per currently open object.
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int depth, Json::parse_event_t event, Json& value) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          fail(path, "header JSON is nested deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels; a safetensors header needs 3");
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.back().insert(value.get<std::string>()).second)
          fail(path, "header JSON has the key " + value.dump() + " twice in one object" +
                         (open_objects.size() == 1 ? " (a tensor listed twice)" : ""));
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.data(), text.data() + text.size(), callback);
  } catch (const Json::parse_error& e) {
    // e.byte counts from 1 at the first header byte; drop nlohmann's "[json.exception...] " tag.
    const uint64_t at = e.byte > 0 ? uint64_t(e.byte) - 1 : 0;
    std::string what = e.what();
    if (const auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    fail(path, "header is not valid JSON at file byte " + std::to_string(kLengthFieldBytes + at) +
                   " (header byte " + std::to_string(at) + "): " + what);
  } catch (const Json::exception& e) {  // e.g. out_of_range: a number too large for a double
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
}

// Parses and checks the header against a data section of `data_size` bytes starting at file byte
// `data_start`. Every entry is checked alone (types, dtype, shape, offsets against its size and the
// section), then all together (sorted by offset they must tile the section exactly).
Header parse_header(const std::string& path, std::string_view text, uint64_t data_start, uint64_t data_size) {
  const Positions pos{data_start};
  const Json root = parse_json(path, text);
  if (!root.is_object())
    fail(path, "header: expected a JSON object mapping tensor names to entries, got " + got(root));

  Header h;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        fail(path, "\"__metadata__\": expected an object of string to string, got " + got(value));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail(path, "\"__metadata__\" value for key " + quoted(mk) + ": expected a string, got " + got(mv));
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string tensor = "tensor " + quoted(key);
    if (key.empty()) fail(path, "header has a tensor with an empty name");
    if (!value.is_object())
      fail(path, tensor + ": expected an object with dtype, shape, data_offsets, got " + got(value));
    for (const auto& [k, v] : value.items()) {
      (void)v;
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        fail(path, tensor + ": unexpected key " + quoted(k) + "; expected only dtype, shape, data_offsets");
    }
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!value.contains(k)) fail(path, tensor + ": missing \"" + k + "\"");

    Entry e;
    e.name = key;
    e.dtype = parse_dtype(path, tensor, value["dtype"]);

    const Json& shape = value["shape"];
    if (!shape.is_array()) fail(path, tensor + ": \"shape\": expected an array, got " + got(shape));
    if (shape.size() > size_t(kMaxDims))
      fail(path, tensor + ": shape " + shape.dump() + " has " + std::to_string(shape.size()) +
                     " dimensions; tapegrad supports at most " + std::to_string(kMaxDims));
    std::vector<int64_t> dims;
    bool has_zero = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const uint64_t d = expect_uint(path, tensor + ": shape[" + std::to_string(i) + "]", shape[i]);
      if (d > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(path, tensor + ": shape[" + std::to_string(i) + "] = " + std::to_string(d) + " is too large");
      has_zero |= d == 0;
      dims.push_back(int64_t(d));
    }
    // Bytes the shape needs, with overflow checks: a product past 2^63 cannot match any real offsets.
    // A zero dimension makes the product 0 whatever the others are.
    uint64_t nbytes = 0;
    if (!has_zero) {
      try {
        int64_t n = dtype_size(e.dtype);
        for (int64_t d : dims) n = checked_mul(n, d, "tensor bytes");
        nbytes = uint64_t(n);
      } catch (const Error&) {
        fail(path, tensor + ": shape " + shape.dump() + " of " + safetensors_dtype(e.dtype) +
                       " overflows: its byte size does not fit in 63 bits");
      }
    }
    e.shape = Shape(dims);

    const Json& off = value["data_offsets"];
    if (!off.is_array() || off.size() != 2)
      fail(path, tensor + ": \"data_offsets\": expected [begin, end], got " + got(off));
    e.begin = expect_uint(path, tensor + ": data_offsets[0]", off[0]);
    e.end = expect_uint(path, tensor + ": data_offsets[1]", off[1]);
    // Offsets are sizes: within int64 like every other (so file positions computed from them cannot wrap).
    for (const uint64_t o : {e.begin, e.end})
      if (o > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(path, tensor + ": data_offsets entry " + std::to_string(o) + " does not fit in 63 bits");
    if (e.begin > e.end)
      fail(path, tensor + ": data_offsets [" + std::to_string(e.begin) + "," + std::to_string(e.end) +
                     "] has begin > end");
    if (e.end > data_size)
      fail(path, tensor + ": data_offsets " + pos.data_range(e.begin, e.end) +
                     " run beyond the data section, which is " + std::to_string(data_size) +
                     " bytes (file bytes " + std::to_string(data_start) + ".." +
                     std::to_string(data_start + data_size) + ")");
    if (e.end - e.begin != nbytes)
      fail(path, tensor + ": data_offsets " + pos.data_range(e.begin, e.end) + " hold " +
                     std::to_string(e.end - e.begin) + " bytes; shape " + shape.dump() + " of " +
                     safetensors_dtype(e.dtype) + " needs " + std::to_string(nbytes));
    h.entries.push_back(std::move(e));
  }

  // Sorted by (begin, end) the ranges must follow each other with no gap and no overlap; a zero-size
  // tensor may sit at a boundary but not inside another tensor's bytes (as the reference reader).
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < cursor)
      fail(path, "tensor " + quoted(e->name) + " at " + pos.data_range(e->begin, e->end) +
                     " overlaps tensor " + quoted(prev->name) + " at " +
                     pos.data_range(prev->begin, prev->end));
    if (e->begin > cursor)
      fail(path, "data section bytes " + pos.data_range(cursor, e->begin) +
                     " belong to no tensor (a hole before tensor " + quoted(e->name) + ")");
    cursor = e->end;
    prev = e;
  }
  if (cursor != data_size)
    fail(path, std::to_string(data_size - cursor) + " bytes left over at the end of the data section " +
                   pos.data_range(cursor, data_size) + ", not covered by any tensor");
  return h;
}

}  // namespace tapegrad::io::detail
