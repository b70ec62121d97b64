// Replays every stored fuzz input (tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/<target>/)
// through the same target functions libFuzzer runs, so the default suite catches a regression of any
// crash the fuzzers once found. A target that crashes or aborts fails the run; one that throws
// anything but a tapegrad::Error fails the test case, naming the input file.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "targets.hpp"

namespace fs = std::filesystem;
using tapegrad::fuzz::Target;

namespace {

std::vector<fs::path> inputs_of(const std::string& kind, const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(TAPEGRAD_SOURCE_DIR) / "tests" / "fuzz" / kind / target;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void replay(const Target& target, const std::vector<fs::path>& files) {
  for (const fs::path& f : files) {
    INFO("input " << f.string());
    const std::string bytes = read_bytes(f);
    REQUIRE_NOTHROW(target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
}

}  // namespace

TEST_CASE("every fuzz target has a seed corpus, and each seed is handled", "[fuzz]") {
  for (const Target& t : tapegrad::fuzz::all_targets()) {
    INFO("target " << t.name);
    const auto corpus = inputs_of("corpus", t.name);
    CHECK(corpus.size() >= 2);
    replay(t, corpus);
  }
}

TEST_CASE("every input a fuzzer once crashed on is handled", "[fuzz]") {
  for (const Target& t : tapegrad::fuzz::all_targets()) {
    INFO("target " << t.name);
    replay(t, inputs_of("regressions", t.name));
  }
}

TEST_CASE("the checkpoint input format splits into the four parts it was joined from", "[fuzz]") {
  const tapegrad::fuzz::CheckpointParts p{"{\"a\":1}", std::string("\0\x01", 2), "{}", "xyz"};
  const auto q = tapegrad::fuzz::split_checkpoint_input(tapegrad::fuzz::join_checkpoint_input(p));
  CHECK(q.model_header == p.model_header);
  CHECK(q.model_data == p.model_data);
  CHECK(q.optimizer_header == p.optimizer_header);
  CHECK(q.optimizer_data == p.optimizer_data);
  const std::string file = tapegrad::fuzz::safetensors_from_parts("{}", "");
  CHECK(file == std::string("\x02\0\0\0\0\0\0\0{}", 10));
}
