// `tapegrad plot` and the curves.png that `train` writes, as real processes: a valid PNG of the
// requested size from a real metrics.csv, several runs overlaid, malformed rows named by FILE:LINE.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "process.hpp"

namespace fs = std::filesystem;
using tapegrad::test::Run;
using tapegrad::test::png_size;
using tapegrad::test::run;

namespace {


const std::string kTiny =
    "train --task copy --min-len 3 --max-len 5 --d-model 16 --layers 1 --heads 2 --d-ff 32 --batch-size 8 "
    "--threads 1 --valid-size 10 --steps 20 --eval-every 5 --log-every 2 ";

}  // namespace

TEST_CASE("train writes curves.png; plot overlays runs at the requested size", "[cli][plot]") {
  const std::string a = tapegrad::test::temp_dir("plot", "a"), b = tapegrad::test::temp_dir("plot", "b");
  REQUIRE(run(kTiny + "--seed 1 --out " + a).code == 0);
  REQUIRE(run(kTiny + "--seed 2 --out " + b).code == 0);
  CHECK(png_size(a + "/curves.png") == std::pair<uint32_t, uint32_t>{1200, 480});
  const std::string png = a + "/both.png";
  const Run p = run("plot " + a + " " + b + " --log --width 900 --height 400 --out " + png);
  INFO(p.out);
  CHECK(p.code == 0);
  CHECK_THAT(p.out, Catch::Contains("2 runs"));
  CHECK(png_size(png) == std::pair<uint32_t, uint32_t>{900, 400});
  // Drawn, not blank: the PNG of two runs with a legend is larger than an empty canvas would be.
  CHECK(fs::file_size(png) > 10000);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("plot still draws a metrics.csv as earlier versions wrote it, and one with other columns",
          "[cli][plot]") {
  const std::string d = tapegrad::test::temp_dir("plot", "old");
  fs::create_directories(d + "/old");
  fs::create_directories(d + "/other");
  // Rows as the trainer wrote them before the columns were named in one place (header written twice,
  // fields placed by counting commas).
  std::ofstream(d + "/old/metrics.csv")
      << "step,loss,lr,grad_norm,tokens_per_second,valid_loss,valid_token_accuracy,valid_exact_match\n"
      << "5,2.823890209197998,2.5e-05,0.7766919029723374,6925.619806839044,,,\n"
      << "10,2.8586020469665527,5e-05,0.7774369956018348,257768.31006123213,,,\n"
      << "10,,,,,2.80419921875,0.125,0\n";
  std::ofstream(d + "/other/metrics.csv") << "step,valid_loss,loss,note\n1,,3.5,a\n2,,3.25,b\n2,3.0,,c\n";
  const Run r = run("plot " + d + "/old " + d + "/other --out " + d + "/both.png");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(png_size(d + "/both.png") == std::pair<uint32_t, uint32_t>{1200, 480});
  fs::remove_all(d);
}

TEST_CASE("plot refuses a malformed metrics.csv naming FILE:LINE, and a directory without one",
          "[cli][plot]") {
  const std::string d = tapegrad::test::temp_dir("plot", "bad");
  fs::create_directories(d);
  std::ofstream(d + "/metrics.csv")
      << "step,loss,lr,grad_norm,tokens_per_second,valid_loss,valid_token_accuracy,valid_exact_match\n"
      << "1,2.5,0.001,1.0,100,,,\n2,two,0.001,1.0,100,,,\n";
  const Run r = run("plot " + d + " --out " + d + "/x.png");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains(d + "/metrics.csv:3") && Catch::Contains("'two'"));
  const Run none = run("plot " + d + "/nowhere --out " + d + "/y.png");
  CHECK(none.code == 2);
  CHECK_THAT(none.out, Catch::Contains("nowhere/metrics.csv"));
  fs::remove_all(d);
}
