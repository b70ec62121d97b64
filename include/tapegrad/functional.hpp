/// @file
/// Transforms of differentiable functions, above autograd: they take a function and return
/// something about it (its gradient, its recomputation).
#pragma once

#include <functional>
#include <vector>

#include "tapegrad/autograd.hpp"
#include "tapegrad/tensor.hpp"

namespace tapegrad {

// ---- activation checkpointing -------------------------------------------------------------------

/// A function checkpoint() may recompute: called with the tensors passed as `inputs`.
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Runs fn(inputs) without keeping its intermediates: the tape gets one entry for the whole call,
/// holding the inputs (and the parameters fn used), and its backward runs fn again on a fresh tape of
/// its own, with the random state of `generators` (default: default_generator()) as it was at the
/// first call, so dropout draws the same masks, then walks that tape. Gradients are bitwise those
/// of calling fn directly: each input's earlier gradient is handed to the recomputation, so
/// contributions are added in the same order.
///
/// Parameters fn uses without taking them as inputs (captured by its closure) get their gradients
/// too: the first call records fn on a scratch tape, which shows every leaf requiring grad the
/// output depends on, and the recomputation writes their gradients as the plain call would. (Unlike
/// PyTorch's reentrant checkpoint, this works when no input requires grad.) Checkpoints nest.
/// Under NoGrad, fn simply runs.
/// @throws AutogradError when fn returns an undefined tensor or one that depends on none of the
/// floating-point inputs, or (during backward) when the recomputation differs in shape or dtype.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Generator*>& generators = {});

}  // namespace tapegrad
