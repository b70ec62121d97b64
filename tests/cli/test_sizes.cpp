// Sizes through real processes: options whose size products overflow, or that describe a model the
// machine cannot hold, and checkpoints whose config claims such sizes, all end in exit code 2 and one
// line naming the option or the file field, quickly and never by a signal.
#include <sys/resource.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "process.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;
using tapegrad::test::Run;
using tapegrad::test::run;

namespace {

// Lowers this process's address-space limit (`ulimit -v`) for its lifetime; children inherit it.
class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_AS, &saved_) == 0);
    rlimit lower = saved_;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_AS, &lower) == 0);
  }
  ~AddressSpaceLimit() { ::setrlimit(RLIMIT_AS, &saved_); }

 private:
  rlimit saved_{};
};

// AddressSanitizer reserves terabytes of shadow address space, so no process of a sanitizer build can
// run under `ulimit -v`: the checks that need a limit run in the normal build only.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
constexpr bool kAddressSanitizer = __has_feature(address_sanitizer);
#else
constexpr bool kAddressSanitizer = false;
#endif

// Exit code 2 and exactly one line, which starts with `start`.
void require_one_line_error(const Run& r, const std::string& start) {
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::StartsWith("tapegrad: " + start));
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
}

const std::string kRun = "train --task copy --steps 1 --valid-size 4 --eval-every 0 --threads 1 ";

}  // namespace

TEST_CASE("size options that overflow or exceed the machine exit 2 with one line", "[cli][sizes]") {
  require_one_line_error(run(kRun + "--d-ff 4611686018427387904"), "--d-ff 4611686018427387904: ");
  require_one_line_error(run(kRun + "--d-model 2305843009213693952 --heads 1"),
                         "--d-model 2305843009213693952: ");
  require_one_line_error(run(kRun + "--d-model 1000000 --heads 1"),
                         "--d-model 1000000: the model would need ");
  if (kAddressSanitizer) return;
  const AddressSpaceLimit limit(rlim_t(4) << 30);  // ulimit -v 4194304
  const auto start = std::chrono::steady_clock::now();
  const Run layers = run(kRun + "--layers 1000000000");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  require_one_line_error(layers, "--layers 1000000000: the model would need ");
  CHECK_THAT(layers.out, Catch::Contains("more than the 4.0 GB this machine can hold"));
  CHECK(seconds < 10);  // refused from the config, not after allocating until the limit
}

TEST_CASE("running out of memory outside tensor storage is one line and exit 2", "[cli][sizes]") {
  // 300 million examples per batch under ulimit -v 1 GB: a std::vector of examples runs out first.
  if (kAddressSanitizer) return;
  const AddressSpaceLimit limit(rlim_t(1) << 30);
  const Run r = run(kRun + "--batch-size 300000000");
  INFO(r.out);
  CHECK(r.code == 2);
  // The error is the last line (progress lines on stdout may precede it).
  const size_t last = r.out.rfind('\n', r.out.size() - 2);
  const std::string error = r.out.substr(last == std::string::npos ? 0 : last + 1);
  CHECK_THAT(error,
             Catch::StartsWith("tapegrad train: out of memory") ||
                 (Catch::Contains("--batch-size") && Catch::Contains("300000000")));
  CHECK_THAT(r.out, !Catch::Contains("std::bad_alloc"));
}

TEST_CASE("a small checkpoint claiming huge sizes is refused by eval, translate and resume", "[cli][sizes]") {
  const std::string dir = tapegrad::test::temp_dir("sizes", "ckpt");
  const Run t =
      run("train --task copy --min-len 3 --max-len 5 --symbols 4 --steps 2 --batch-size 4 --valid-size 4 "
          "--eval-every 0 --threads 1 --d-model 16 --layers 1 --heads 2 --d-ff 32 --out " +
          dir);
  INFO(t.out);
  REQUIRE(t.code == 0);
  // The file behind DIR/latest: what the loader reads (and names in its messages).
  const std::string model_file = dir + "/step-00000002/model.safetensors";
  const io::SafetensorsFile original = io::load_safetensors(model_file);
  for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{{"max_len", int64_t(1) << 62},
                                                                               {"d_ff", int64_t(1) << 62},
                                                                               {"d_model", int64_t(1) << 62},
                                                                               {"layers", 1000000000}}) {
    CAPTURE(key);
    io::SafetensorsFile f = original;
    nlohmann::json config = nlohmann::json::parse(f.metadata.at("config"));
    config[key] = value;
    f.metadata["config"] = config.dump();
    io::save_safetensors(model_file, f.tensors, f.metadata);
    const std::string field = key + " " + std::to_string(value);
    const std::string where = model_file + ": metadata 'config': " + field;
    require_one_line_error(run("eval --checkpoint " + dir + " --size 4"), where);
    require_one_line_error(run("translate --checkpoint " + dir, "abc\n"), where);
    require_one_line_error(run("train --resume " + dir + " --steps 3 --threads 1"), where);
  }
  fs::remove_all(dir);
}
