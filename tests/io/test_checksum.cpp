// The checksum every saved .safetensors file carries (io.hpp) and nn::save / nn::load. Every byte of a
// saved file is covered: one flipped bit anywhere but in the checksum's own digits, or an edited
// header (another model's config with the same tensor shapes), is refused naming the file; the
// stored CRC is zlib's over the file with its digits as zeros. Checkpoints written before the
// checksum (format 1, a real one committed under tests/io/checkpoint-format-1) still load. nn::load
// is strict and all-or-nothing: a missing name, an extra name, a wrong shape or dtype is named and
// leaves the module untouched.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tapegrad/io.hpp"
#include "tapegrad/nn/layers.hpp"
#include "tapegrad/train.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace tapegrad;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("tapegrad_test_checksum_" + std::to_string(::getpid()) + "_" + name)).string();
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  return n;
}

// zlib's CRC-32, bit by bit: an independent reference for the table-driven one in src/io.
uint32_t reference_crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

const std::string kSourceDir = TAPEGRAD_SOURCE_DIR;
const std::string kOldCheckpoint = kSourceDir + "/tests/io/checkpoint-format-1";

}  // namespace

TEST_CASE("a saved file's checksum is zlib's CRC-32 of the file with its eight digits as zeros", "[io][checksum]") {
  Generator gen(3);
  const std::string bytes = io::save_safetensors_bytes(
      {{"w", Tensor::randn({3, 5}, gen)}, {"ids", Tensor::from_ids({1, 2, 3}, {3})}}, {{"note", "hi"}});
  const uint64_t n = header_length(bytes);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const std::string stored = header.at("__metadata__").at("tapegrad.crc32");
  CHECK(header.at("__metadata__").at("note") == "hi");  // plain safetensors metadata for any reader
  const std::string entry = "\"tapegrad.crc32\":\"" + stored + "\"";
  const size_t at = bytes.find(entry);
  REQUIRE(at != std::string::npos);
  std::string zeroed = bytes;
  zeroed.replace(at + entry.size() - 9, 8, "00000000");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", reference_crc32(zeroed));
  CHECK(stored == hex);
  const io::SafetensorsFile f = io::load_safetensors_bytes(bytes);
  CHECK(f.checksummed);
  CHECK(f.metadata == std::map<std::string, std::string>{{"note", "hi"}});  // the checksum is not user metadata
}

TEST_CASE("one flipped bit anywhere in a saved file is refused with an IoError naming the file", "[io][checksum]") {
  Generator gen(4);
  const std::string bytes =
      io::save_safetensors_bytes({{"a", Tensor::randn({4, 4}, gen)}, {"b", Tensor::randn({7}, gen, DType::f64)}},
                                 {{"format", "x"}});
  const uint64_t n = header_length(bytes);
  int refused = 0, positions = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit : {0, 5}) {
      std::string changed = bytes;
      changed[i] = char(changed[i] ^ (1 << bit));
      ++positions;
      try {
        (void)io::load_safetensors_bytes(changed, "flipped.safetensors");
      } catch (const IoError& e) {
        CHECK_THAT(e.what(), Contains("flipped.safetensors"));
        ++refused;
        continue;
      }
      // Accepted only if the flip turned the entry into something other than the checksum (then the
      // file reads as one without it) - never silently with the data changed under a valid checksum.
      const io::SafetensorsFile f = io::load_safetensors_bytes(changed);
      CAPTURE(i, bit);
      CHECK(i >= 8);
      CHECK(i < 8 + n);
      CHECK_FALSE(f.checksummed);
    }
  }
  CHECK(refused >= positions - 40);  // only flips inside the key's text can hide the entry
  // Every flip in the data section is refused.
  for (size_t i = 8 + n; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] = char(changed[i] ^ 1);
    CHECK_THROWS_WITH(io::load_safetensors_bytes(changed, "m.safetensors"), Contains("m.safetensors: checksum mismatch"));
  }
}

TEST_CASE("the checksum key is reserved: saving metadata that names it is refused", "[io][checksum]") {
  CHECK_THROWS_WITH(io::save_safetensors_bytes({}, {{"tapegrad.crc32", "00000000"}}, "x.safetensors"),
                    Contains("x.safetensors: metadata entry \"tapegrad.crc32\" is reserved"));
}

TEST_CASE("a checkpoint written before the checksum (format 1) still loads and evaluates as before",
          "[io][checksum][checkpoint]") {
  const io::SafetensorsFile f = io::load_safetensors(kOldCheckpoint + "/model.safetensors");
  CHECK_FALSE(f.checksummed);
  CHECK(f.metadata.at("format") == "tapegrad-checkpoint-1");
  const train::LoadedModel m = train::load_checkpoint(kOldCheckpoint);
  CHECK(m.step == 3);
  CHECK(m.options.optimizer == "sgd");
  train::check_training_state(io::load_safetensors(kOldCheckpoint + "/optimizer.safetensors"));
}

TEST_CASE("a checkpoint's header edited to another model with the same shapes (heads 2 -> 1) is refused",
          "[io][checksum][checkpoint]") {
  // Saved by this build (format 2), from the old checkpoint's model.
  train::LoadedModel m = train::load_checkpoint(kOldCheckpoint);
  REQUIRE(m.options.model.heads == 2);
  const io::SafetensorsFile old = io::load_safetensors(kOldCheckpoint + "/model.safetensors");
  std::map<std::string, std::string> meta = old.metadata;
  meta["format"] = "tapegrad-checkpoint-2";
  const std::string path = temp_file("heads.safetensors");
  nn::save(*m.model, path, meta);
  REQUIRE_NOTHROW(train::load_model_file(io::load_safetensors(path)));

  std::string bytes = read_bytes(path);
  const std::string from = "\\\"heads\\\":2", to = "\\\"heads\\\":1";  // inside the escaped config string
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, from.size(), to);
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(io::load_safetensors(path), Contains(path + ": checksum mismatch"));

  // With the checksum entry removed as well, the file claims format 2 without one: refused too.
  const size_t entry = bytes.find(",\"tapegrad.crc32\":\"");
  REQUIRE(entry != std::string::npos);
  bytes.replace(entry, 1 + 16 + 1 + 10, std::string(1 + 16 + 1 + 10, ' '));  // blanked: same length
  // The blanked entry leaves the JSON valid only if the spaces sit where whitespace may; they do
  // (between the previous value and the closing brace).
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(train::load_model_file(io::load_safetensors(path)),
                    Contains(path + ": a tapegrad-checkpoint-2 file carries its checksum"));
  fs::remove(path);
}

namespace {

// Two linear layers: parameters "first.weight", "first.bias", "second.weight", "second.bias".
struct TwoLayers : nn::Module {
  std::shared_ptr<nn::Linear> first, second;
  TwoLayers(int64_t in, int64_t hidden, Generator& gen) {
    first = register_module("first", std::make_shared<nn::Linear>(in, hidden, gen));
    second = register_module("second", std::make_shared<nn::Linear>(hidden, 2, gen));
  }
  Tensor forward(const Tensor& x) { return second->forward(relu(first->forward(x))); }
};

}  // namespace

TEST_CASE("nn::save then nn::load into a fresh module gives identical outputs", "[io][module]") {
  Generator gen(5), other(6);
  TwoLayers a(3, 4, gen), b(3, 4, other);
  const Tensor x = Tensor::randn({5, 3}, gen);
  const std::string path = temp_file("module.safetensors");
  nn::save(a, path);
  CHECK(a.forward(x).to_vector() != b.forward(x).to_vector());
  nn::load(b, path);
  CHECK(a.forward(x).to_vector() == b.forward(x).to_vector());
  fs::remove(path);
}

TEST_CASE("nn::load names the file and the first mismatch, and leaves the module untouched", "[io][module]") {
  Generator gen(7);
  TwoLayers saved(3, 4, gen);
  const std::string path = temp_file("strict.safetensors");
  auto refuses = [&](nn::Module& into, const std::string& message) {
    const auto before = into.named_parameters();
    std::vector<std::vector<double>> values;
    for (const auto& [name, p] : before) values.push_back(p.to_vector());
    CHECK_THROWS_WITH(nn::load(into, path), Contains(path + ": " + message));
    for (size_t i = 0; i < before.size(); ++i) CHECK(before[i].second.to_vector() == values[i]);
  };
  SECTION("a parameter missing from the file") {
    io::save_safetensors(path, {{"first.weight", saved.first->weight}, {"first.bias", saved.first->bias}});
    TwoLayers into(3, 4, gen);
    refuses(into, "no tensor second.weight, a parameter of the module");
  }
  SECTION("a tensor that is no parameter of the module") {
    auto params = saved.named_parameters();
    params.emplace_back("third.weight", Tensor::zeros({2, 2}));
    io::save_safetensors(path, params);
    TwoLayers into(3, 4, gen);
    refuses(into, "tensor third.weight is not a parameter of the module");
  }
  SECTION("a shape") {
    nn::save(saved, path);
    TwoLayers into(3, 5, gen);  // hidden 5, not 4
    refuses(into, "tensor first.weight is f32[4,3], the module's parameter is f32[5,3]");
  }
  SECTION("a dtype") {
    nn::save(saved, path);
    TwoLayers into(3, 4, gen);
    into.to(DType::f64);
    refuses(into, "tensor first.weight is f32[4,3], the module's parameter is f64[4,3]");
  }
  fs::remove(path);
}
