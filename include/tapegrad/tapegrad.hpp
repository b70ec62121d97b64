// The whole public API in one include.
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
