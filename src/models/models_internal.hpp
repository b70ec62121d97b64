// Constructors of the concrete models (internal to src/models).
#pragma once

#include "tapegrad/models/seq2seq.hpp"

namespace tapegrad::models {

std::unique_ptr<Seq2Seq> make_transformer(const ModelConfig& config, uint64_t seed);
std::unique_ptr<Seq2Seq> make_rnn_seq2seq(const ModelConfig& config, uint64_t seed);

// Index of the largest value in each row of a [N, V] tensor.
std::vector<int32_t> argmax_rows(const Tensor& x);

}  // namespace tapegrad::models
