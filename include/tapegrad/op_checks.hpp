/// @file
/// The op registry: every differentiable op with how to gradient-check it.
///
/// One row per case: a name (the op, or a composition), the input shapes and domains, the function
/// and, where needed, its own tolerances. The gradcheck test and `tapegrad gradcheck` iterate this
/// table, and a test asserts that every OpKind is exercised by some row, so an op cannot exist
/// without a gradient check. Each row is checked at first order (gradcheck) and at second order
/// (gradgradcheck through a create_graph walk): `tapegrad gradcheck --order 2`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tapegrad/autograd.hpp"

namespace tapegrad {

/// Where an input's random values are drawn from.
enum class Domain {
  any,       ///< standard normal
  positive,  ///< uniform in [0.5, 2]: log, sqrt, pow bases, divisors
  no_kink,   ///< +-uniform in [0.2, 1]: relu and abs are not differentiable at 0
  distinct,  ///< a shuffled grid with gaps far above eps: max has no ties
  ids,       ///< int32 values from `ids` (not differentiated)
};

/// One input of an op check.
struct InputSpec {
  Shape shape;                    ///< the input's shape
  Domain domain = Domain::any;    ///< where its values come from
  std::vector<int32_t> ids = {};  ///< for Domain::ids
  bool differentiable = true;     ///< false: a float input held constant (e.g. a mask)
};

/// One row of the registry: a named function of its inputs and how to check it.
struct OpCheck {
  std::string name;                                      ///< starts with the op's name, e.g. "matmul_batched"
  std::string shapes;                                    ///< human-readable, e.g. "[2,3,4]@[4,5]"
  std::vector<InputSpec> inputs;                         ///< one spec per argument of fn
  std::function<Tensor(const std::vector<Tensor>&)> fn;  ///< the op (or composition) under test
  GradcheckOptions options = {};                         ///< tolerances, when the defaults do not fit
};

/// Every row, built once (src/ops/op_checks.cpp).
const std::vector<OpCheck>& op_checks();

/// Builds the inputs of `check` (float64, seeded by its row) and runs gradcheck on them (order 1) or
/// gradgradcheck (order 2: the gradient of the gradient, through a create_graph walk).
GradcheckResult run_op_check(const OpCheck& check, int order = 1);

}  // namespace tapegrad
