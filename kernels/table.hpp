// The run-time dispatch table: one set of float32 kernel entry points per instruction set.
//
// Each SIMD translation unit (kernels/simd/isa_*.cpp, compiled with its own -m flags) returns a table
// in which it fills the kernels it vectorises; dispatch.cpp fills every null entry from the scalar
// reference, so an ISA can vectorise kernels one at a time. Internal to kernels/.
#pragma once

#include "kernels/kernels.hpp"

namespace tapegrad::kernels {

struct KernelTable {
  Isa isa = Isa::scalar;
  void (*gemm_f32)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                   float, float*, int64_t) = nullptr;
  void (*gemm_f64)(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t,
                   double, double*, int64_t) = nullptr;
  // Batched GEMM, so small per-head matrices can be spread over threads by batch; null = a loop of gemm.
  void (*gemm_batched_f32)(int64_t, bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t,
                           const float*, int64_t, int64_t, float, float*, int64_t, int64_t) = nullptr;
  void (*gemm_batched_f64)(int64_t, bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, int64_t,
                           const double*, int64_t, int64_t, double, double*, int64_t, int64_t) = nullptr;
  // Packed B (kernels::pack_b): elements needed, the packing, and the GEMM that reads it (null: no
  // packing on this path).
  int64_t (*packed_b_size_f32)(int64_t, int64_t) = nullptr;
  int64_t (*packed_b_size_f64)(int64_t, int64_t) = nullptr;
  void (*pack_b_f32)(bool, int64_t, int64_t, const float*, int64_t, float*) = nullptr;
  void (*pack_b_f64)(bool, int64_t, int64_t, const double*, int64_t, double*) = nullptr;
  void (*gemm_packed_b_f32)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                            int64_t, const float*, float, float*, int64_t) = nullptr;
  void (*gemm_packed_b_f64)(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                            int64_t, const double*, double, double*, int64_t) = nullptr;
  void (*unary)(Unary, int64_t, const float*, float*) = nullptr;
  void (*unary_backward)(Unary, int64_t, const float*, const float*, const float*, float*) = nullptr;
  void (*affine)(int64_t, const float*, float, float, float*, bool) = nullptr;
  void (*binary)(Binary, int, const int64_t*, const float*, const int64_t*, const float*, const int64_t*,
                 float*) = nullptr;
  void (*binary_backward)(Binary, int, int, const int64_t*, const float*, const int64_t*, const float*,
                          const int64_t*, const float*, float*) = nullptr;
  void (*sum_to)(int, const int64_t*, const float*, const int64_t*, float*) = nullptr;
  void (*sum_axis)(int64_t, int64_t, int64_t, const float*, float*) = nullptr;
  void (*max_axis)(int64_t, int64_t, int64_t, const float*, float*, int64_t*) = nullptr;
  float (*sum_squares)(int64_t, const float*) = nullptr;
  void (*softmax)(int64_t, int64_t, const float*, float*, const SoftmaxOptions&) = nullptr;
  void (*softmax_backward)(int64_t, int64_t, const float*, const float*, float*, double) = nullptr;
  void (*log_softmax)(int64_t, int64_t, const float*, float*) = nullptr;
  void (*log_softmax_backward)(int64_t, int64_t, const float*, const float*, float*) = nullptr;
  int64_t (*cross_entropy)(int64_t, int64_t, const float*, const int32_t*, int32_t, double, float*, float*,
                           double) = nullptr;
  void (*layer_norm)(int64_t, int64_t, const float*, const float*, const float*, double, float*, float*,
                     float*) = nullptr;
  void (*layer_norm_backward)(int64_t, int64_t, const float*, const float*, const float*, const float*,
                              const float*, float*, float*, float*) = nullptr;
  void (*embedding)(int64_t, int64_t, const float*, const int32_t*, float*) = nullptr;
  void (*embedding_backward)(int64_t, int64_t, const int32_t*, const float*, float*) = nullptr;
  void (*additive_score)(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*) = nullptr;
  void (*additive_score_backward)(int64_t, int64_t, int64_t, const float*, const float*, const float*, const float*,
                                  float*, float*, float*) = nullptr;
  void (*adam_update)(int64_t, float*, const float*, float*, float*, const AdamParams&) = nullptr;
};

// Defined by each ISA's translation unit; returns a table with only its own kernels filled.
KernelTable simd_table_sse2();
KernelTable simd_table_avx2();
KernelTable simd_table_avx512();

// The table in use (set by set_isa / TAPEGRAD_ARCH, complete: no null entries).
const KernelTable& table();

}  // namespace tapegrad::kernels
