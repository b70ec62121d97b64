/// @file
/// Overflow-checked arithmetic on sizes, and sizes in human units.
///
/// Every product or sum of sizes that comes from options or files (a tensor's element count, its bytes,
/// a table of max_len x d_model, a model's parameter count) goes through checked_mul / checked_add, so
/// an absurd size becomes an Error naming what overflowed instead of a wrapped-around number that
/// later crashes. Sizes are int64_t as everywhere in tapegrad; a negative operand is refused too.
#pragma once

#include <cstdint>
#include <string>

namespace tapegrad {

/// a * b.
/// @throws Error "`what`: size overflows 64 bits (a x b)", or "`what`: negative size N" for an operand < 0.
int64_t checked_mul(int64_t a, int64_t b, const std::string& what);
/// a + b.
/// @throws Error "`what`: size overflows 64 bits (a + b)", or "`what`: negative size N" for an operand < 0.
int64_t checked_add(int64_t a, int64_t b, const std::string& what);

/// "512 B", "1.5 KB", "56.0 GB" (powers of 1024, one decimal above bytes).
std::string format_bytes(double bytes);

}  // namespace tapegrad
