/// @file
/// tapegrad's exceptions. Thrown at the public boundary only, with a message that names the op (or
/// file), the rule broken and every shape (or position) involved, e.g.
/// `matmul: inner dimensions differ: a=[2,3] b=[4,5]`.
/// The library never exits; tools/ turns these into one line on stderr and exit code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace tapegrad {

/// The base of every tapegrad exception: bad input at the public boundary. Catch this one to catch all.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Incompatible shapes, bad axes, wrong ranks.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// An index (token id, target, slice bound) outside its valid range.
class IndexError : public Error {
 public:
  using Error::Error;
};

/// Mixed or unsupported dtypes.
class DTypeError : public Error {
 public:
  using Error::Error;
};

/// Misuse of the tape: backward twice over a freed tape, non-scalar backward without a seed, ...
class AutogradError : public Error {
 public:
  using Error::Error;
};

/// Reading or writing files: checkpoints, TSV data. The message names the path and the position.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A NaN or an infinity where training needs a finite value (a loss, a gradient norm). The CLI exits
/// with code 3 for it, so scripts can tell a diverged run from bad input.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

/// Memory for a tensor (or a model) that the machine cannot provide. The message names the bytes in
/// human units and what they were for, e.g. "out of memory: cannot allocate 56.0 GB for a tensor of
/// shape [..]". Thrown before the attempt when the size exceeds the machine's limit, or when the
/// allocation itself fails.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

}  // namespace tapegrad
