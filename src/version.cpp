// Library version string, from Meson's project() version.
#include "tapegrad/version.hpp"

namespace tapegrad {
const char* version() { return TAPEGRAD_VERSION; }
}  // namespace tapegrad
