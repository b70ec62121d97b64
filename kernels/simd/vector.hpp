// SIMD row-wise and elementwise kernels (softmax family, layer norm, elementwise, reductions,
// embedding, Adam), templated on the xsimd architecture. Installed by each kernels/simd/isa_*.cpp.
//
// Only float32 entries are installed; the double path stays on the reference. GEMM lives apart
// (kernels/simd/gemm*.hpp). The pieces:
//   common.hpp       batch aliases, tail loads, horizontal reductions, OpenMP policy
//   math.hpp         vector exp with a stated error bound
//   softmax.hpp      softmax (+ scale, mask, causal), log_softmax, backwards, cross-entropy
//   norm.hpp         layer norm forward / backward (deterministic dgamma / dbeta)
//   strided.hpp      index-space coalescing for broadcasting ops
//   elementwise.hpp  unary ops and backwards, affine, binary ops and backwards
//   reduce.hpp       sum_to, sum_axis, sum_squares, max_axis
//   indexing.hpp     embedding gather / scatter-add
//   optim.hpp        Adam / AdamW
//   attention.hpp    additive attention scores and their backward
#pragma once

#include "kernels/simd/attention.hpp"
#include "kernels/simd/elementwise.hpp"
#include "kernels/simd/indexing.hpp"
#include "kernels/simd/norm.hpp"
#include "kernels/simd/optim.hpp"
#include "kernels/simd/reduce.hpp"
#include "kernels/simd/softmax.hpp"
#include "kernels/table.hpp"

namespace tapegrad::kernels::simd {

template <class Arch>
void install_vector_kernels(KernelTable& t) {
  t.unary = unary_f32<Arch>;
  t.unary_backward = unary_backward_f32<Arch>;
  t.affine = affine_f32<Arch>;
  t.binary = binary_f32<Arch>;
  t.binary_backward = binary_backward_f32<Arch>;
  t.sum_to = sum_to_f32<Arch>;
  t.sum_axis = sum_axis_f32<Arch>;
  t.max_axis = max_axis_f32<Arch>;
  t.sum_squares = sum_squares_f32<Arch>;
  t.softmax = softmax_f32<Arch>;
  t.softmax_backward = softmax_backward_f32<Arch>;
  t.log_softmax = log_softmax_f32<Arch>;
  t.log_softmax_backward = log_softmax_backward_f32<Arch>;
  t.cross_entropy = cross_entropy_f32<Arch>;
  t.layer_norm = layer_norm_f32<Arch>;
  t.layer_norm_backward = layer_norm_backward_f32<Arch>;
  t.embedding = embedding_f32<Arch>;
  t.embedding_backward = embedding_backward_f32<Arch>;
  t.adam_update = adam_update_f32<Arch>;
  t.additive_score = additive_score_f32<Arch>;
  t.additive_score_backward = additive_score_backward_f32<Arch>;
}

}  // namespace tapegrad::kernels::simd
