// Tests for the io layer: safetensors round trips (bit-exact, every dtype, 0-dim, zero-size, views,
// metadata), the on-disk layout checked byte by byte without our reader, every validation rule of the
// reader with its message, truncation and seeded header mutations (never a crash), and atomic writes
// (failures leave nothing, a killed writer never leaves a partial file under the real name).
// Files go to a fresh directory under the system temp dir, removed at the end of each test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tapegrad/io.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using tapegrad::DType;
using tapegrad::Generator;
using tapegrad::IoError;
using tapegrad::Shape;
using tapegrad::Tensor;
namespace io = tapegrad::io;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("tapegrad_test_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Plain (non-atomic, no fsync) write: fast, for the thousands of corrupted files. The old file is
// unlinked first because ext4 flushes a file truncated to zero on close (auto_da_alloc), which made
// each rewrite cost milliseconds.
void write_bytes(const std::string& path, const std::string& bytes) {
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

uint64_t read_le64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  return v;
}

// A file with this JSON header (length field = its size) followed by `data`.
std::string raw_file(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) + "," +
         std::to_string(e) + "]}";
}

// The tensor's values as bytes in logical order.
std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.clone();
  const auto* p =
      static_cast<const char*>(c.impl()->storage->data) + c.impl()->offset * tapegrad::dtype_size(c.dtype());
  return std::string(p, size_t(c.numel() * tapegrad::dtype_size(c.dtype())));
}

// A tensor filled with random bit patterns (NaN payloads, denormals, -0 included): bit-exactness
// must not depend on values being "nice".
Tensor random_bits(const Shape& shape, DType dtype, Generator& gen) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.impl()->storage->data);
  for (int64_t i = 0, n = t.numel() * tapegrad::dtype_size(dtype); i < n; ++i) p[i] = uint8_t(gen.next_u64());
  return t;
}

void require_same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.is_contiguous());
  REQUIRE(tensor_bytes(got) == tensor_bytes(want));
}

// The IoError message of loading `path`, or a marker that makes the caller's Contains checks fail.
std::string load_error(const std::string& path) {
  try {
    io::load_safetensors(path);
  } catch (const IoError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not an IoError: ") + e.what() + ">";
  }
  return "<no error>";
}

std::vector<std::pair<std::string, Tensor>> small_set() {
  Generator gen(7);
  return {{"b", Tensor::randn({3, 2}, gen)},
          {"a", Tensor::from_ids({1, 2, 3}, {3})},
          {"c", Tensor::randn({}, gen, DType::f64)}};
}

}  // namespace

TEST_CASE("safetensors: round trip is bit-exact for every dtype, 0-dim, zero-size, views, metadata", "[io]") {
  TempDir dir;
  Generator gen(42);
  const Tensor base_t = random_bits({4, 6}, DType::f32, gen);
  const Tensor base_i = random_bits({3, 5}, DType::i32, gen);
  const Tensor base_n = random_bits({5, 3}, DType::f64, gen);
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w.f32", random_bits({3, 5}, DType::f32, gen)},
      {"b.f64", random_bits({7}, DType::f64, gen)},
      {"ids", random_bits({2, 3, 4}, DType::i32, gen)},
      {"scalar.f64", random_bits({}, DType::f64, gen)},
      {"scalar.i32", random_bits({}, DType::i32, gen)},
      {"empty", Tensor::empty({0}, DType::f32)},
      {"empty.3d", Tensor::empty({3, 0, 2}, DType::i32)},
      {"empty.f64", Tensor::empty({0, 4}, DType::f64)},
      {"view.transposed", base_t.transpose(0, 1)},
      {"view.transposed_i32", base_i.transpose(0, 1)},
      {"view.narrow", base_n.narrow(0, 2, 2)},  // contiguous, but starts mid-storage
      {"z.max_rank", random_bits({1, 2, 1, 2, 1, 2, 1, 2}, DType::f32, gen)},
  };
  REQUIRE_FALSE(tensors[8].second.is_contiguous());
  const std::map<std::string, std::string> metadata = {{"config", R"({"d_model": 32, "layers": [1, 2]})"},
                                                       {"step", "1200"},
                                                       {"empty", ""},
                                                       {"unicode", "h\u00e9llo \u2713"}};
  const std::string path = dir.file("model.safetensors");
  io::save_safetensors(path, tensors, metadata);
  // The in-memory writer produces exactly the file's bytes.
  CHECK(io::save_safetensors_bytes(tensors, metadata) == read_bytes(path));

  const io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.path == path);
  CHECK(f.metadata == metadata);
  REQUIRE(f.tensors.size() == tensors.size());
  // Sorted by name on write, returned in header order.
  for (size_t i = 1; i < f.tensors.size(); ++i) CHECK(f.tensors[i - 1].first < f.tensors[i].first);
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    require_same(f.get(name), t);
    CHECK(f.find(name) == &f.get(name));
  }
  CHECK(f.find("absent") == nullptr);
  CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});

  SECTION("an empty set of tensors, with and without metadata") {
    io::save_safetensors(path, {});
    const auto e = io::load_safetensors(path);
    CHECK(e.tensors.empty());
    CHECK(e.metadata.empty());
    io::save_safetensors(path, {}, {{"k", "v"}});
    CHECK(io::load_safetensors(path).metadata == std::map<std::string, std::string>{{"k", "v"}});
  }
}

TEST_CASE("safetensors: the layout on disk, checked byte by byte without our reader", "[io]") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  io::save_safetensors(path,
                       {{"c", Tensor::empty({0}, DType::f64)},
                        {"b", Tensor::from_ids({7}, {})},
                        {"a", Tensor::from_vector({1.5, -2.0}, {2}, DType::f32)}},
                       {{"step", "3"}});
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  const uint64_t n = read_le64(bytes, 0);
  REQUIRE(n > 0);
  REQUIRE(8 + n <= bytes.size());
  CHECK((8 + n) % 8 == 0);  // data section aligned
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  const size_t close = header.find_last_of('}');
  REQUIRE(close != std::string::npos);
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // only space padding after '}'
  CHECK(close + 1 + 7 >= header.size());                                 // at most 7 of them

  const nlohmann::json h = nlohmann::json::parse(header);
  CHECK(h["__metadata__"].size() == 2);  // the metadata given and the checksum (test_checksum.cpp)
  CHECK(h["__metadata__"]["step"] == "3");
  CHECK(h["__metadata__"].contains("tapegrad.crc32"));
  CHECK(h["a"] == nlohmann::json::parse(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"));
  CHECK(h["b"] == nlohmann::json::parse(R"({"dtype":"I32","shape":[],"data_offsets":[8,12]})"));
  CHECK(h["c"] == nlohmann::json::parse(R"({"dtype":"F64","shape":[0],"data_offsets":[12,12]})"));
  CHECK(h.size() == 4);
  // Keys written in name order (metadata first).
  CHECK(header.find("\"__metadata__\"") < header.find("\"a\""));
  CHECK(header.find("\"a\"") < header.find("\"b\""));
  CHECK(header.find("\"b\"") < header.find("\"c\""));

  // Little-endian IEEE-754 / two's complement, written out by hand.
  const std::string data = bytes.substr(8 + n);
  const std::string want(
      "\x00\x00\xc0\x3f"   // 1.5f
      "\x00\x00\x00\xc0"   // -2.0f
      "\x07\x00\x00\x00",  // 7
      12);
  CHECK(data == want);

  // Optionally, an outside reader: Python's struct, json and zlib (skipped when python3 is absent). The
  // system interpreter is preferred: a pyenv shim costs a second per start.
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c pass >/dev/null 2>&1").c_str()) == 0) {
    const std::string script = dir.file("check.py");
    write_bytes(script, R"PY(
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__")
assert meta.pop("step") == "3"
# The checksum: zlib's CRC-32 of the file with the entry's eight digits as zeros.
import zlib
crc = meta.pop("tapegrad.crc32")
assert meta == {}
entry = b'"tapegrad.crc32":"'
at = b.index(entry) + len(entry)
assert b[at:at + 8] == crc.encode()
assert "%08x" % zlib.crc32(b[:at] + b"00000000" + b[at + 8:]) == crc
sizes = {"F32": 4, "F64": 8, "I32": 4}
cursor = 0
for name, t in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"]):
    s, e = t["data_offsets"]
    count = 1
    for d in t["shape"]:
        count *= d
    assert s == cursor and e - s == count * sizes[t["dtype"]], name
    cursor = e
assert 8 + n + cursor == len(b)
d = b[8 + n:]
assert struct.unpack("<ff", d[0:8]) == (1.5, -2.0)
assert struct.unpack("<i", d[8:12]) == (7,)
)PY");
    CHECK(std::system((python + " " + script + " " + path).c_str()) == 0);
  } else {
    WARN("python3 not found: skipping the outside-reader check");
  }
}

TEST_CASE("safetensors: each validation rule refuses with the path and what is wrong", "[io]") {
  TempDir dir;
  const std::string F4x4 = entry("F32", "[4]", 0, 16);
  struct Case {
    const char* label;
    std::string bytes;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"empty file", "", {"0 bytes", "shorter than the 8-byte header length"}},
      {"shorter than the length field", "abc", {"3 bytes", "shorter than the 8-byte header length"}},
      {"header length 0", le64(0) + "{}", {"header length (file bytes 0..8) is 0"}},
      {"absurd header length", le64(uint64_t(1) << 40) + "{}", {"1099511627776", "100 MiB"}},
      {"header length past the end", le64(100) + "{}", {"header length 100", "past the end", "10 bytes"}},
      {"header length 2^64-1", le64(~uint64_t(0)) + "{}", {"18446744073709551615", "100 MiB"}},
      {"invalid JSON", raw_file("{\"a\": x}"), {"not valid JSON", "file byte 14", "header byte 6"}},
      {"truncated JSON", raw_file("{\"a\": {"), {"not valid JSON"}},
      {"trailing garbage", raw_file("{} z"), {"not valid JSON", "header byte 3"}},
      {"invalid UTF-8", raw_file("{\"\xff\": 1}"), {"not valid JSON"}},
      {"header not an object", raw_file("[1,2]"), {"header: expected a JSON object", "array [1,2]"}},
      {"entry not an object", raw_file("{\"w\": 3}"), {"tensor \"w\": expected an object", "integer 3"}},
      {"missing dtype",
       raw_file(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", std::string(16, 'x')),
       {"tensor \"w\": missing \"dtype\""}},
      {"missing shape",
       raw_file(R"({"w":{"dtype":"F32","data_offsets":[0,16]}})", std::string(16, 'x')),
       {"tensor \"w\": missing \"shape\""}},
      {"missing data_offsets",
       raw_file(R"({"w":{"dtype":"F32","shape":[4]}})", std::string(16, 'x')),
       {"tensor \"w\": missing \"data_offsets\""}},
      {"unexpected key",
       raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})"),
       {"tensor \"w\": unexpected key \"extra\""}},
      {"dtype not a string",
       raw_file(R"({"w":{"dtype":4,"shape":[4],"data_offsets":[0,16]}})"),
       {"tensor \"w\": \"dtype\": expected a string", "integer 4"}},
      {"unknown dtype",
       raw_file("{\"w\":" + entry("F17", "[4]", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\"", "unknown dtype \"F17\"", "F32, F64, I32"}},
      {"unsupported dtype",
       raw_file("{\"w\":" + entry("BF16", "[4]", 0, 8) + "}", std::string(8, 'x')),
       {"tensor \"w\"", "\"BF16\"", "not supported"}},
      {"shape not an array",
       raw_file("{\"w\":" + entry("F32", "4", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\": \"shape\": expected an array", "integer 4"}},
      {"negative dimension",
       raw_file("{\"w\":" + entry("F32", "[2,-3]", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\": shape[1] is -3", "non-negative"}},
      {"fractional dimension",
       raw_file("{\"w\":" + entry("F32", "[2.5]", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\": shape[0]", "number 2.5"}},
      {"string dimension",
       raw_file("{\"w\":" + entry("F32", "[\"4\"]", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\": shape[0]", "string \"4\""}},
      {"too many dimensions",
       raw_file("{\"w\":" + entry("F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) + "}", "abcd"),
       {"tensor \"w\"", "9 dimensions", "at most 8"}},
      {"dimension beyond int64",
       raw_file("{\"w\":" + entry("F32", "[18446744073709551615]", 0, 4) + "}", "abcd"),
       {"tensor \"w\": shape[0]", "too large"}},
      {"shape product overflows",
       raw_file("{\"w\":" + entry("F32", "[4611686018427387904,4]", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\"", "overflows"}},
      {"offsets not a pair",
       raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})"),
       {"tensor \"w\": \"data_offsets\": expected [begin, end]", "array [0]"}},
      {"offsets not integers",
       raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":["0",16]}})"),
       {"tensor \"w\": data_offsets[0]", "string \"0\""}},
      {"negative offset",
       raw_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[0,-4]}})"),
       {"tensor \"w\": data_offsets[1] is -4"}},
      {"begin after end",
       raw_file("{\"w\":" + entry("F32", "[1]", 8, 4) + "}", std::string(8, 'x')),
       {"tensor \"w\"", "[8,4]", "begin > end"}},
      {"end beyond the data section",
       raw_file("{\"w\":" + F4x4 + "}", std::string(8, 'x')),
       {"tensor \"w\"", "[0,16)", "beyond the data section, which is 8 bytes", "file bytes"}},
      {"size does not match the shape",
       raw_file("{\"w\":" + entry("F32", "[3]", 0, 16) + "}", std::string(16, 'x')),
       {"tensor \"w\"", "hold 16 bytes", "needs 12"}},
      {"overlapping tensors",
       raw_file("{\"a\":" + F4x4 + ",\"b\":" + entry("F32", "[4]", 8, 24) + "}", std::string(24, 'x')),
       {"tensor \"b\"", "overlaps tensor \"a\"", "[8,24)", "[0,16)"}},
      {"zero-size tensor inside another",
       raw_file("{\"a\":" + F4x4 + ",\"z\":" + entry("F32", "[0]", 8, 8) + "}", std::string(16, 'x')),
       {"tensor \"z\"", "overlaps tensor \"a\""}},
      {"hole between tensors",
       raw_file("{\"a\":" + entry("F32", "[2]", 0, 8) + ",\"b\":" + entry("F32", "[2]", 16, 24) + "}",
                std::string(24, 'x')),
       {"belong to no tensor", "[8,16)", "tensor \"b\""}},
      {"bytes left over",
       raw_file("{\"a\":" + entry("F32", "[2]", 0, 8) + "}", std::string(12, 'x')),
       {"4 bytes left over", "[8,12)"}},
      {"data but no tensors", raw_file("{}", "abcd"), {"4 bytes left over"}},
      {"metadata not an object",
       raw_file(R"({"__metadata__":[1]})"),
       {"\"__metadata__\": expected an object", "array [1]"}},
      {"metadata value not a string",
       raw_file(R"({"__metadata__":{"step":3}})"),
       {"\"__metadata__\" value for key \"step\"", "expected a string", "integer 3"}},
      {"tensor listed twice",
       raw_file("{\"a\":" + F4x4 + ",\"a\":" + F4x4 + "}", std::string(16, 'x')),
       {"\"a\" twice", "tensor listed twice"}},
      {"deeply nested",
       raw_file("{\"a\":" + std::string(50, '[') + std::string(50, ']') + "}"),
       {"nested deeper"}},
      {"empty tensor name", raw_file("{\"\":" + F4x4 + "}", std::string(16, 'x')), {"empty name"}},
      {"byte order mark", raw_file("\xEF\xBB\xBF{}"), {"byte order mark", "file bytes 8..11"}},
      {"NUL padding",
       raw_file(std::string("{}") + std::string(6, '\0')),
       {"NUL byte at file byte 10", "header byte 2"}},
      {"NUL inside", raw_file(std::string("{}\0 ", 4)), {"NUL byte at file byte 10"}},
      {"offset beyond 63 bits",
       raw_file("{\"w\":" + entry("F32", "[0]", 9223372036854775808ull, 9223372036854775808ull) + "}"),
       {"data_offsets entry 9223372036854775808 does not fit in 63 bits"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.label);
    const std::string path = dir.file("bad.safetensors");
    write_bytes(path, c.bytes);
    const std::string msg = load_error(path);
    CAPTURE(msg);
    CHECK_THAT(msg, Contains(path + ": "));
    for (const std::string& e : c.expect) CHECK_THAT(msg, Contains(e));
  }

  SECTION("a missing file and a directory") {
    const std::string missing = dir.file("nope.safetensors");
    CHECK_THAT(load_error(missing), Contains(missing) && Contains("cannot open") && Contains("No such file"));
    CHECK_THAT(load_error(dir.path.string()), Contains(dir.path.string()) && Contains("not a regular file"));
  }
  SECTION("get names the file and the missing tensor") {
    const std::string path = dir.file("ok.safetensors");
    io::save_safetensors(path, small_set());
    const auto f = io::load_safetensors(path);
    CHECK_THROWS_AS(f.get("encoder.weight"), IoError);
    CHECK_THROWS_WITH(f.get("encoder.weight"),
                      Contains(path) && Contains("\"encoder.weight\"") && Contains("3 tensors: a, b, c"));
  }
  SECTION("a valid foreign file: unpadded header, leading whitespace, tensors out of name order") {
    const std::string path = dir.file("foreign.safetensors");
    std::string data;
    for (float v : {1.0f, 2.0f}) data.append(reinterpret_cast<const char*>(&v), 4);
    int32_t id = -5;
    data.append(reinterpret_cast<const char*>(&id), 4);
    write_bytes(path, raw_file(" {\"z\":" + entry("F32", "[2]", 0, 8) +
                                   ",\"__metadata__\":{},\"a\":" + entry("I32", "[1,1]", 8, 12) + "}",
                               data));
    const auto f = io::load_safetensors(path);
    REQUIRE(f.tensors.size() == 2);
    CHECK(f.tensors[0].first == "z");  // header order
    CHECK(f.get("z").to_vector() == std::vector<double>{1.0, 2.0});
    CHECK(f.get("a").shape() == Shape{1, 1});
    CHECK(f.get("a").to_vector() == std::vector<double>{-5.0});
  }
}

TEST_CASE("safetensors: every truncation of a file is refused", "[io]") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  io::save_safetensors(good, small_set(), {{"step", "9"}});
  const std::string bytes = read_bytes(good);
  REQUIRE(bytes.size() > 40);
  const std::string path = dir.file("cut.safetensors");
  for (size_t len = 0; len < bytes.size(); ++len) {
    CAPTURE(len);
    write_bytes(path, bytes.substr(0, len));
    const std::string msg = load_error(path);
    CAPTURE(msg);
    CHECK_THAT(msg, Contains(path + ": "));
  }
}

TEST_CASE("safetensors: seeded random header mutations give an IoError or a valid file, never a crash",
          "[io]") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  io::save_safetensors(good, small_set(), {{"step", "9"}});
  const std::string bytes = read_bytes(good);
  const uint64_t n = read_le64(bytes, 0);
  const std::string header = bytes.substr(8, n), data = bytes.substr(8 + n);
  const std::string interesting = "{}[]\",:0123456789-. eE\\\x00\xff";
  const std::string path = dir.file("fuzz.safetensors");
  Generator gen(2024);
  auto pick = [&](size_t k) { return size_t(gen.next_u64() % k); };
  int refused = 0, accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string out;
    if (iter % 3 == 2) {
      // Well-formed JSON with wrong numbers: small random shapes and offsets, so the semantic checks
      // (sizes, bounds, overlaps, holes) are reached rather than the JSON parser.
      nlohmann::ordered_json h = nlohmann::ordered_json::parse(header);
      for (size_t m = 1 + pick(2); m > 0; --m) {
        auto& t = h[std::string(1, "abc"[pick(3)])];
        if (pick(2)) {
          // Slide a tensor's range, keeping its size: overlaps, holes, bytes left over.
          const int64_t delta = int64_t(pick(17)) - 8;
          for (auto& o : t["data_offsets"]) o = o.get<int64_t>() + delta;
        } else {
          auto& field = t[pick(2) ? "shape" : "data_offsets"];
          if (field.empty()) field.push_back(0);
          field[pick(field.size())] = int64_t(pick(48)) - 2;
        }
      }
      std::string text = h.dump();
      out = le64(text.size()) + text + data;
    } else if (iter % 3 == 0) {
      // Raw mutations anywhere in the length field and header: bit flips and random bytes.
      out = bytes;
      for (size_t m = 1 + pick(3); m > 0; --m) {
        const size_t at = pick(8 + n);
        if (pick(2))
          out[at] = char(uint8_t(out[at]) ^ (1u << pick(8)));
        else
          out[at] = char(gen.next_u64());
      }
    } else {
      // Mutations of the JSON text with the length field kept consistent, so parsing goes deeper:
      // replace, insert or delete syntax characters and digits.
      std::string h = header;
      for (size_t m = 1 + pick(3); m > 0; --m) {
        const size_t at = pick(h.size());
        const char c = interesting[pick(interesting.size())];
        switch (pick(3)) {
          case 0:
            h[at] = c;
            break;
          case 1:
            h.insert(h.begin() + std::ptrdiff_t(at), c);
            break;
          default:
            h.erase(at, 1);
            break;
        }
      }
      out = le64(h.size()) + h + data;
    }
    write_bytes(path, out);
    try {
      const auto f = io::load_safetensors(path);
      // Accepted: then it must be self-consistent.
      int64_t total = 0;
      for (const auto& [name, t] : f.tensors) total += t.numel() * tapegrad::dtype_size(t.dtype());
      CHECK(uint64_t(total) == out.size() - 8 - read_le64(out, 0));
      ++accepted;
    } catch (const IoError& e) {
      CHECK_THAT(std::string(e.what()), Contains(path + ": "));
      ++refused;
    }
  }
  CHECK(refused > 1000);  // the mutations do reach the validators
  INFO("accepted " << accepted << ", refused " << refused);
  CHECK(accepted + refused == 3000);
}

TEST_CASE("safetensors: invalid tensor sets are refused before anything is written", "[io]") {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  const Tensor t = Tensor::zeros({2});
  struct Case {
    const char* label;
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> metadata;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"empty name", {{"a", t}, {"", t}}, {}, {"tensor #1 has an empty name"}},
      {"duplicate name", {{"x", t}, {"a", t}, {"x", t}}, {}, {"duplicate tensor name \"x\"", "#0 and #2"}},
      {"reserved name", {{"__metadata__", t}}, {}, {"\"__metadata__\" is reserved"}},
      {"undefined tensor", {{"w", Tensor()}}, {}, {"tensor \"w\" is undefined"}},
      {"name not UTF-8", {{"bad\xff", t}}, {}, {"tensor #0", "not valid UTF-8"}},
      {"metadata not UTF-8", {{"a", t}}, {{"k", "\xc3"}}, {"metadata entry \"k\"", "UTF-8"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.label);
    try {
      io::save_safetensors(path, c.tensors, c.metadata);
      FAIL("no error");
    } catch (const IoError& e) {
      CHECK_THAT(std::string(e.what()), Contains(path + ": "));
      for (const std::string& x : c.expect) CHECK_THAT(std::string(e.what()), Contains(x));
    }
    CHECK(dir.listing().empty());
    try {
      (void)io::save_safetensors_bytes(c.tensors, c.metadata, "mem");
      FAIL("no error from the in-memory writer");
    } catch (const IoError& e) {
      CHECK_THAT(std::string(e.what()), Contains("mem: "));
      for (const std::string& x : c.expect) CHECK_THAT(std::string(e.what()), Contains(x));
    }
  }
}

TEST_CASE("write_file_atomic: failures leave nothing; success replaces the whole file", "[io]") {
  TempDir dir;
  SECTION("a directory that does not exist") {
    const std::string path = dir.file("missing/sub/x.safetensors");
    CHECK_THROWS_WITH(io::save_safetensors(path, small_set()),
                      Contains(path) && Contains("No such file or directory"));
    CHECK_FALSE(fs::exists(dir.path / "missing"));
    CHECK(dir.listing().empty());
  }
  SECTION("overwriting a longer file replaces it fully, with no temporary left behind") {
    const std::string path = dir.file("ckpt.safetensors");
    io::write_file_atomic(path, std::string(1 << 20, 'A'));
    CHECK(fs::file_size(path) == (1u << 20));
    io::save_safetensors(path, small_set());
    const std::string bytes = read_bytes(path);
    CHECK(bytes.size() < 1000);
    CHECK(bytes.find('A') == std::string::npos);
    CHECK(io::load_safetensors(path).tensors.size() == 3);
    io::write_file_atomic(path, "");
    CHECK(fs::file_size(path) == 0);
    CHECK(dir.listing() == std::vector<std::string>{"ckpt.safetensors"});
  }
  SECTION("the destination is a directory: refused, the directory and its contents untouched") {
    fs::create_directory(dir.path / "d");
    write_bytes(dir.file("d/keep"), "keep");
    const std::string path = dir.file("d");
    CHECK_THROWS_WITH(io::write_file_atomic(path, "data"), Contains(path) && Contains("rename"));
    CHECK(fs::is_directory(path));
    CHECK(read_bytes(dir.file("d/keep")) == "keep");
    CHECK(dir.listing() == std::vector<std::string>{"d"});
  }
  SECTION("a path naming no file") {
    const std::string path = dir.path.string() + "/";
    CHECK_THROWS_WITH(io::write_file_atomic(path, "x"), Contains(path) && Contains("expected a file name"));
    CHECK(dir.listing().empty());
  }
}

TEST_CASE("write_file_atomic: a writer killed at any moment leaves the old or the new file, whole", "[io]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.bin");
  const std::string old_content(1 << 20, 'o');
  const std::string new_content(8 << 20, 'n');
  io::write_file_atomic(path, old_content);
  for (int delay_us : {0, 200, 1000, 3000, 10000}) {
    CAPTURE(delay_us);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Rewrite the file over and over until killed; _exit skips the test harness's atexit work.
      for (int i = 0; i < 1000; ++i) {
        try {
          io::write_file_atomic(path, (i % 2) ? old_content : new_content);
        } catch (...) {
          ::_exit(3);
        }
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
    const std::string now = read_bytes(path);
    CHECK((now == old_content || now == new_content));
  }
}
