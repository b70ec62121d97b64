// Safetensors reading and writing (the format is described in io.hpp). The reader treats every file
// as hostile: each number in the header is checked against the file before it is used, so a corrupt
// or truncated file yields an IoError naming the path, the tensor and the byte offsets, never a read
// out of bounds or an allocation larger than the file. Only tapegrad's own dtypes (F32, F64, I32) are
// supported; files holding others (F16, BF16, I64, ...) are refused by name rather than converted.
// Data is read straight into tensor storage with stdio, one tensor at a time in offset order (no
// mmap, so a loaded tensor never aliases the file).
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "src/io/atomic_file.hpp"
#include "src/io/safetensors_header.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/io.hpp"

namespace tapegrad::io {

using namespace detail;

namespace {

char* bytes_of(const Tensor& t) {
  return static_cast<char*>(t.impl()->storage->data) + t.impl()->offset * dtype_size(t.dtype());
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads exactly n bytes at the current position, or says where the file ended.
void read_exact(const std::string& path, std::FILE* f, char* out, uint64_t n, uint64_t at,
                const std::string& what) {
  if (n == 0) return;
  const size_t got = std::fread(out, 1, size_t(n), f);
  if (got != n) {
    const std::string why = std::ferror(f) ? std::string(": ") + std::strerror(errno) : std::string();
    fail(path, "file ended at byte " + std::to_string(at + got) + " while reading " + what + " (file bytes " +
                   std::to_string(at) + ".." + std::to_string(at + n) + ")" + why);
  }
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string have;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) have += (i ? ", " : "") + tensors[i].first;
  if (tensors.size() > 8) have += ", ...";
  throw IoError((path.empty() ? std::string("<safetensors>") : path) + ": no tensor named " + quoted(name) +
                " (the file holds " + std::to_string(tensors.size()) + " tensors" +
                (have.empty() ? std::string() : ": " + have) + ")");
}

namespace {

// A file's bytes in pieces, as the writers hand them on: the length field and header text, then each
// tensor's data (borrowed from `bodies`, contiguous copies of views).
struct Encoded {
  std::string head;
  std::vector<Tensor> bodies;
  std::vector<std::string_view> chunks() const {
    std::vector<std::string_view> out{head};
    for (const Tensor& t : bodies)
      if (t.numel() > 0) out.emplace_back(bytes_of(t), size_t(t.numel() * dtype_size(t.dtype())));
    return out;
  }
};

// The encoder behind both writers; `path` names the destination in errors.
Encoded encode_safetensors(const std::string& path,
                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const std::string which = "tensor #" + std::to_string(i);
    if (name.empty()) fail(path, which + " has an empty name");
    if (name == "__metadata__") fail(path, which + ": the name \"__metadata__\" is reserved for metadata");
    if (!is_valid_utf8(name)) fail(path, which + ": name " + quoted(name) + " is not valid UTF-8");
    if (!t.defined()) fail(path, "tensor " + quoted(name) + " is undefined (a default-constructed Tensor)");
  }
  for (const auto& [k, v] : metadata) {
    if (!is_valid_utf8(k) || !is_valid_utf8(v))
      fail(path, "metadata entry " + quoted(k) + ": key and value must be valid UTF-8");
    if (k == kChecksumKey) fail(path, "metadata entry " + quoted(k) + " is reserved for the file's checksum");
  }

  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].first < tensors[b].first; });
  for (size_t i = 1; i < order.size(); ++i)
    if (tensors[order[i]].first == tensors[order[i - 1]].first)
      fail(path, "duplicate tensor name " + quoted(tensors[order[i]].first) + " (tensors #" +
                     std::to_string(std::min(order[i], order[i - 1])) + " and #" +
                     std::to_string(std::max(order[i], order[i - 1])) + ")");

  // The file holds values in logical row-major order, so views are copied out first.
  Encoded out;
  Json header = Json::object();
  Json& meta = header["__metadata__"] = metadata;
  meta[std::string(kChecksumKey)] = kChecksumPlaceholder;  // the last entry; filled in below
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    out.bodies.push_back(t.is_contiguous() ? t : t.clone());
    const uint64_t nbytes = uint64_t(t.numel() * dtype_size(t.dtype()));
    header[tensors[i].first] = {{"dtype", safetensors_dtype(t.dtype())},
                                {"shape", t.shape().vec()},
                                {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  // Spaces after the JSON make the data section start 8-byte aligned, so a reader that maps the file
  // can use F64 data in place; the format allows trailing whitespace in the header.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  out.head.resize(kLengthFieldBytes);
  for (size_t i = 0; i < kLengthFieldBytes; ++i)
    out.head[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  out.head += text;
  // The checksum (io.hpp): CRC-32 of every byte of the file with its own eight digits as zeros.
  const size_t digits = out.head.find(kChecksumEntryStart) + kChecksumEntryStart.size();
  uint32_t crc = crc32(0, out.head);
  for (size_t i = 1; const std::string_view chunk : out.chunks())
    if (i++ > 1) crc = crc32(crc, chunk);  // chunk 1 is the head
  out.head.replace(digits, kChecksumPlaceholder.size(), crc32_hex(crc));
  return out;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic_chunks(path, encode_safetensors(path, tensors, metadata).chunks());
}

std::string save_safetensors_bytes(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   const std::string& name) {
  const Encoded encoded = encode_safetensors(name, tensors, metadata);  // outlives the views below
  std::string bytes;
  for (std::string_view chunk : encoded.chunks()) bytes += chunk;
  return bytes;
}

namespace {

// Reads a whole safetensors file of `size` bytes from `file`, positioned at its first byte; `path`
// names it in errors.
SafetensorsFile read_safetensors(const std::string& path, std::FILE* file, uint64_t size) {
  if (size < kLengthFieldBytes)
    fail(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length field");
  unsigned char field[kLengthFieldBytes];
  read_exact(path, file, reinterpret_cast<char*>(field), kLengthFieldBytes, 0, "the header length");
  uint64_t n = 0;
  for (size_t i = 0; i < kLengthFieldBytes; ++i) n |= uint64_t(field[i]) << (8 * i);
  if (n == 0) fail(path, "header length (file bytes 0..8) is 0; expected the byte length of a JSON object");
  if (n > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(n) +
                   " (file bytes 0..8) exceeds the 100 MiB limit; the file is corrupt or not safetensors");
  if (n > size - kLengthFieldBytes)
    fail(path, "header length " + std::to_string(n) +
                   " (file bytes 0..8) runs past the end of the file, which is " + std::to_string(size) +
                   " bytes (at most " + std::to_string(size - kLengthFieldBytes) +
                   " available after the length field)");

  std::string text(size_t(n), '\0');
  read_exact(path, file, text.data(), n, kLengthFieldBytes, "the JSON header");
  // The format allows trailing spaces after the JSON, nothing else: a byte order mark or NUL padding
  // (which some JSON parsers skip or stop at) marks a file another tool must not read differently.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0)
    fail(path,
         "header starts with a UTF-8 byte order mark (file bytes 8..11); a safetensors header is plain JSON");
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    fail(path, "header has a NUL byte at file byte " + std::to_string(kLengthFieldBytes + nul) +
                   " (header byte " + std::to_string(nul) + "); only spaces may pad a header");
  const uint64_t data_start = kLengthFieldBytes + n;
  Header h = parse_header(path, text, data_start, size - data_start);

  SafetensorsFile out;
  out.path = path;
  // A checksum, when the file has one, covers the bytes read so far and the data read below.
  std::optional<std::string> stored_crc;
  if (auto it = h.metadata.find(std::string(kChecksumKey)); it != h.metadata.end()) {
    stored_crc = it->second;
    h.metadata.erase(it);
  }
  uint32_t crc = 0;
  if (stored_crc) {
    const size_t entry = text.find(kChecksumEntryStart);
    const size_t digits = entry + kChecksumEntryStart.size();
    const bool hex = stored_crc->size() == 8 &&
                     std::all_of(stored_crc->begin(), stored_crc->end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (!hex || entry == std::string::npos || text.compare(digits, 9, *stored_crc + "\"") != 0 ||
        text.find(kChecksumEntryStart, digits) != std::string::npos)
      fail(path, "metadata " + detail::quoted(std::string(kChecksumKey)) + " is " + detail::quoted(*stored_crc) +
                     "; expected one entry \"tapegrad.crc32\":\"<8 lowercase hex digits>\" as tapegrad writes it");
    crc = crc32(0, std::string_view(reinterpret_cast<const char*>(field), kLengthFieldBytes));
    crc = crc32(crc, std::string_view(text).substr(0, digits));
    crc = crc32(crc, kChecksumPlaceholder);
    crc = crc32(crc, std::string_view(text).substr(digits + kChecksumPlaceholder.size()));
  }
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const Entry& e : h.entries) out.tensors.emplace_back(e.name, Tensor::empty(e.shape, e.dtype));
  // The ranges tile the data section (checked above), so reading them in offset order is one pass.
  std::vector<size_t> order(h.entries.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(h.entries[a].begin, h.entries[a].end) < std::tie(h.entries[b].begin, h.entries[b].end);
  });
  for (size_t i : order) {
    const Entry& e = h.entries[i];
    read_exact(path, file, bytes_of(out.tensors[i].second), e.end - e.begin, data_start + e.begin,
               "tensor " + quoted(e.name));
    if (stored_crc) crc = crc32(crc, std::string_view(bytes_of(out.tensors[i].second), size_t(e.end - e.begin)));
  }
  if (stored_crc) {
    if (crc32_hex(crc) != *stored_crc)
      fail(path, "checksum mismatch: metadata \"tapegrad.crc32\" is " + *stored_crc + " but the file's bytes give " +
                     crc32_hex(crc) + "; the file changed after it was written (a flipped bit or an edited header)");
    out.checksummed = true;
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(::fileno(file.get()), &st) != 0)
    fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  return read_safetensors(path, file.get(), uint64_t(st.st_size));
}

SafetensorsFile load_safetensors_bytes(std::string_view bytes, const std::string& name) {
  if (bytes.empty()) return read_safetensors(name, nullptr, 0);  // fmemopen refuses an empty buffer
  // fmemopen only reads the buffer in "r" mode; the cast does not let it write.
  std::unique_ptr<std::FILE, FileCloser> file(fmemopen(const_cast<char*>(bytes.data()), bytes.size(), "r"));
  if (!file) fail(name, std::string("cannot open the bytes as a stream: ") + std::strerror(errno));
  return read_safetensors(name, file.get(), uint64_t(bytes.size()));
}

}  // namespace tapegrad::io
