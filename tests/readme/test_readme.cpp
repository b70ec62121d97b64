// The README's usage example compiles (it is included here verbatim from readme_example.cpp), runs,
// and is the same text as the README shows.
#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "readme_example.cpp"

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("the README example compiles, runs and matches the README", "[readme]") {
  const double loss = readme_example();
  CHECK(std::isfinite(loss));
  CHECK(loss > 0);
  const std::string example = slurp(std::string(TAPEGRAD_SOURCE_DIR) + "/tests/readme/readme_example.cpp");
  const std::string readme = slurp(std::string(TAPEGRAD_SOURCE_DIR) + "/README.md");
  REQUIRE_FALSE(example.empty());
  CHECK(readme.find(example) != std::string::npos);
}
