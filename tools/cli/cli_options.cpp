// Parse-time checks of option values shared by the subcommands: integer and real ranges and exact
// 64-bit seeds. CLI11 reports a failed check as "OPTION: MESSAGE" and the program exits 2.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "cli.hpp"

namespace tapegrad::cli {

namespace {

std::string show(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

CLI::Validator int_range(int64_t lo, int64_t hi) {
  const std::string range = hi == std::numeric_limits<int64_t>::max()
                                ? "an integer of at least " + std::to_string(lo)
                                : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return text + ": expected " + range;
        return "";
      },
      range);
}

CLI::Validator finite_range(double lo, double hi, bool hi_open) {
  const std::string range = "a finite number in [" + show(lo) + ", " + show(hi) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [lo, hi, hi_open, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok =
            !text.empty() && *end == '\0' && std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
        return ok ? "" : text + ": expected " + range;
      },
      range);
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && *end == '\0' && std::isfinite(v) && v > 0;
        return ok ? "" : text + ": expected a finite number above 0";
      },
      "a finite number above 0");
}

uint64_t parse_u64(const std::string& option, const std::string& text) {
  const std::string expected = option + " " + text + ": expected an integer in [0, 18446744073709551615]";
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos)
    throw CLI::ValidationError(expected);
  uint64_t v = 0;
  for (char c : text) {
    const uint64_t d = uint64_t(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) throw CLI::ValidationError(expected);
    v = v * 10 + d;
  }
  return v;
}

CLI::Option* add_seed_option(CLI::App* sub, uint64_t* seed, const std::string& help) {
  return sub
      ->add_option_function<std::string>(
          "--seed", [seed](const std::string& text) { *seed = parse_u64("--seed", text); }, help)
      ->default_str(std::to_string(*seed))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

}  // namespace tapegrad::cli
