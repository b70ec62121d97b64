// Constructors of the concrete models (internal to src/models).
#pragma once

#include "tapegrad/functional.hpp"
#include "tapegrad/models/seq2seq.hpp"

namespace tapegrad::models {

std::unique_ptr<Seq2Seq> make_transformer(const ModelConfig& config, uint64_t seed);
std::unique_ptr<Seq2Seq> make_rnn_seq2seq(const ModelConfig& config, uint64_t seed);

// nn::key_padding_mask(ids), or an undefined tensor when no id is <pad>: an all-zero additive mask
// changes nothing, and skipping it saves expanding it to [B, H, Tq, Tk] in every attention.
Tensor padding_mask_if_any(const Tensor& ids, DType dtype);

// layer(inputs): under checkpoint() when `checkpointed` (ModelConfig::checkpoint_layers), with `gen`,
// the generator the layer's dropout draws from, restored for the recomputation. `layer` outlives the
// call (backward runs it again): it captures by value.
inline Tensor run_layer(bool checkpointed, Generator& gen, const CheckpointFn& layer,
                        const std::vector<Tensor>& inputs) {
  return checkpointed ? checkpoint(layer, inputs, {&gen}) : layer(inputs);
}

// Index of the largest value in each row of a [N, V] tensor.
std::vector<int32_t> argmax_rows(const Tensor& x);

}  // namespace tapegrad::models
