/// @file
/// The library's version.
#pragma once

#ifndef TAPEGRAD_VERSION
/// The version this header belongs to, as "MAJOR.MINOR.PATCH" (the build may define it first).
#define TAPEGRAD_VERSION "0.1.0"
#endif

namespace tapegrad {
/// The version the library was built as (TAPEGRAD_VERSION at its build), e.g. "0.1.0".
const char* version();
}  // namespace tapegrad
