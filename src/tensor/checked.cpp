// Overflow-checked size arithmetic and byte formatting (see checked.hpp).
#include "tapegrad/checked.hpp"

#include <cstdio>
#include <iterator>

#include "tapegrad/error.hpp"

namespace tapegrad {

namespace {
void require_non_negative(int64_t a, int64_t b, const std::string& what) {
  if (a < 0 || b < 0) throw Error(what + ": negative size " + std::to_string(a < 0 ? a : b));
}
}  // namespace

int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  require_non_negative(a, b, what);
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw Error(what + ": size overflows 64 bits (" + std::to_string(a) + " x " + std::to_string(b) + ")");
  return out;
}

int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  require_non_negative(a, b, what);
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    throw Error(what + ": size overflows 64 bits (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  return out;
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit + 1 < int(std::size(kUnits))) bytes /= 1024.0, ++unit;
  char buf[64];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, kUnits[unit]);
  return buf;
}

}  // namespace tapegrad
