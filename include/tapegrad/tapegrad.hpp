/// @file
/// The whole core API in one include: tensors, the tape, ops, gradient checks, errors. The layers
/// above it have their own headers: nn/*.hpp, optim.hpp, models/seq2seq.hpp, data.hpp, io.hpp,
/// train.hpp, experiment.hpp, instruments.hpp, runtime.hpp.
#pragma once

#include "tapegrad/autograd.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/memory.hpp"
#include "tapegrad/op_checks.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/shape.hpp"
#include "tapegrad/tensor.hpp"
#include "tapegrad/version.hpp"

/// @namespace tapegrad
/// Everything tapegrad defines: tensors, the tape, ops and errors directly; the layers above in
/// sub-namespaces (nn, optim, models, data, io, train, experiment, runtime, memory).
