// The library's version.
#pragma once

#ifndef TAPEGRAD_VERSION
#define TAPEGRAD_VERSION "0.1.0"
#endif

namespace tapegrad {
const char* version();
}  // namespace tapegrad
