/// @file
/// Everything a program needs to build and train its own models, in one include: tensors, the tape,
/// ops, errors, the run-time settings and instruments, the nn modules, the optimizers, files
/// (.safetensors, nn::save / nn::load) and the training step for any module (train/step.hpp).
///
/// Left to their own headers: the seq2seq models and their trainer (models/seq2seq.hpp, data.hpp,
/// train.hpp), data-parallel training (distributed.hpp), the research experiments
/// (experiment.hpp), and the gradient-check registry the tests iterate (op_checks.hpp).
#pragma once

#include "tapegrad/autograd.hpp"
#include "tapegrad/functional.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/error.hpp"
#include "tapegrad/instruments.hpp"
#include "tapegrad/io.hpp"
#include "tapegrad/memory.hpp"
#include "tapegrad/nn/attention.hpp"
#include "tapegrad/nn/layers.hpp"
#include "tapegrad/nn/module.hpp"
#include "tapegrad/nn/rnn.hpp"
#include "tapegrad/nn/transformer.hpp"
#include "tapegrad/ops.hpp"
#include "tapegrad/optim.hpp"
#include "tapegrad/runtime.hpp"
#include "tapegrad/shape.hpp"
#include "tapegrad/tensor.hpp"
#include "tapegrad/train/step.hpp"
#include "tapegrad/version.hpp"

/// @namespace tapegrad
/// Everything tapegrad defines: tensors, the tape, ops and errors directly; the layers above in
/// sub-namespaces (nn, optim, models, data, io, train, experiment, runtime, memory).
