// The libFuzzer entry point of one target, chosen at build time by TAPEGRAD_FUZZ_TARGET (a function
// name in targets.hpp); tests/fuzz/meson.build builds one executable per target.
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tapegrad::fuzz::TAPEGRAD_FUZZ_TARGET(data, size);
  return 0;
}
