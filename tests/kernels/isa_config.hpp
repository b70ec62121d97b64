// For kernel tests: sets the instruction set and thread count for a scope, restoring both afterwards.
#pragma once

#include "kernels/kernels.hpp"

struct Config {
  tapegrad::kernels::Isa old_isa;
  int old_threads;
  Config(tapegrad::kernels::Isa isa, int threads)
      : old_isa(tapegrad::kernels::active_isa()), old_threads(tapegrad::kernels::num_threads()) {
    tapegrad::kernels::set_isa(isa);
    tapegrad::kernels::set_num_threads(threads);
  }
  ~Config() {
    tapegrad::kernels::set_isa(old_isa);
    tapegrad::kernels::set_num_threads(old_threads);
  }
};
