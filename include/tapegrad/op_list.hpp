/// @file
/// The op list: every kind of tape entry, one row each, in the form TAPEGRAD_OP(name).
///
/// This is the only place an op kind is written. The including file defines TAPEGRAD_OP and
/// includes this file to generate what it needs from the rows (no include guard, on purpose):
/// include/tapegrad/autograd.hpp makes the enumerator OpKind::name, src/autograd/tape.cpp the
/// name op_name() returns ("name", as in tape dumps, profiles and `tapegrad tape`). Both come from
/// the same row, so a kind and its name cannot disagree or drift out of order. The row order is
/// the numbering (OpKind's values, the profile's row index): append, or accept that it changes.
///
/// To add an op: a row here, the function that records it (src/ops/, with its backward beside
/// it, including the create_graph branch: docs/adding-an-op.md) and a gradient-check row in
/// src/ops/op_checks.cpp (a test fails on a kind no row records; every row is checked at first and
/// second order).
// Included without TAPEGRAD_OP (as a program may include any installed header) it is empty.
#ifdef TAPEGRAD_OP
// clang-format off

// Elementwise, with broadcasting (src/ops/elementwise.cpp): add(a, b) ... pow(a, b), neg(a);
// the scalar forms add(a, s), mul(a, s), pow(a, p).
TAPEGRAD_OP(add)
TAPEGRAD_OP(sub)
TAPEGRAD_OP(mul)
TAPEGRAD_OP(div)
TAPEGRAD_OP(pow)
TAPEGRAD_OP(neg)
TAPEGRAD_OP(add_scalar)
TAPEGRAD_OP(mul_scalar)
TAPEGRAD_OP(pow_scalar)
// Unary functions (src/ops/elementwise.cpp); gelu records gelu_tanh or gelu_exact by approximation.
TAPEGRAD_OP(exp)
TAPEGRAD_OP(log)
TAPEGRAD_OP(sqrt)
TAPEGRAD_OP(abs)
TAPEGRAD_OP(tanh)
TAPEGRAD_OP(sigmoid)
TAPEGRAD_OP(relu)
TAPEGRAD_OP(gelu_tanh)
TAPEGRAD_OP(gelu_exact)
TAPEGRAD_OP(softplus)
// Linear algebra (src/ops/matmul.cpp) and shapes (src/ops/shape.cpp; transpose records permute).
TAPEGRAD_OP(matmul)
TAPEGRAD_OP(linear)
TAPEGRAD_OP(permute)
TAPEGRAD_OP(reshape)
TAPEGRAD_OP(contiguous)
TAPEGRAD_OP(concat)
TAPEGRAD_OP(narrow)
// Reductions (src/ops/reduce.cpp): sum(a, axis), sum(a), max(a, axis).
TAPEGRAD_OP(sum_axis)
TAPEGRAD_OP(sum_all)
TAPEGRAD_OP(max_axis)
// Softmax and cross-entropy (src/ops/softmax.cpp), layer_norm (norm.cpp), embedding and dropout
// (indexing.cpp), where (elementwise.cpp; masked_fill records it too).
TAPEGRAD_OP(softmax)
TAPEGRAD_OP(log_softmax)
TAPEGRAD_OP(layer_norm)
TAPEGRAD_OP(embedding)
TAPEGRAD_OP(cross_entropy)
TAPEGRAD_OP(dropout)
TAPEGRAD_OP(where)
// Fused ops (src/ops/fused.cpp, src/ops/attention.cpp).
TAPEGRAD_OP(gru_cell)
TAPEGRAD_OP(additive_score)
TAPEGRAD_OP(scaled_dot_product_attention)
// A ReLU feed-forward block as one entry (src/ops/matmul.cpp, beside linear).
TAPEGRAD_OP(feed_forward_relu)
// Recorded only by a create_graph backward (src/ops/elementwise.cpp): dx = dy * f'(x) for a unary f,
// an op of its own so that the gradient of a gradient has a backward (with f'').
TAPEGRAD_OP(unary_backward)
// A function defined outside the library, recorded by record_custom (named on its entry). The one kind
// without a double backward: its closure's gradient is not recorded, so a create_graph walk refuses it
// by name (checkpoint is recorded this way too).
TAPEGRAD_OP(custom)

// clang-format on
#endif  // TAPEGRAD_OP
