// Padding a list of examples into the batch-first int32 tensors the models consume (layout in
// data.hpp). Not here: bucketing by length or shuffling; callers choose which examples go together
// (batches by tokens: src/train/token_batches.cpp).
#include <algorithm>

#include "tapegrad/checked.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/error.hpp"

namespace tapegrad::data {

int64_t Batch::target_tokens() const {
  int64_t n = 0;
  for (int64_t len : tgt_len) n += len;
  return n;
}

double Batch::padding_fraction() const {
  int64_t real = target_tokens();
  for (int64_t len : src_len) real += len;
  const int64_t positions = src.numel() + tgt_out.numel();
  return positions ? double(positions - real) / double(positions) : 0.0;
}

Batch make_batch(const std::vector<Example>& examples) {
  if (examples.empty()) throw Error("make_batch: no examples");
  const int64_t B = int64_t(examples.size());
  // At least one column each, so an all-empty source still gives a well-formed [B, 1] tensor.
  int64_t S = 1, T = 1;
  for (size_t b = 0; b < examples.size(); ++b) {
    const Example& ex = examples[b];
    for (const auto* seq : {&ex.src, &ex.tgt})
      for (int32_t id : *seq)
        if (id < 0)
          throw IndexError("make_batch: example " + std::to_string(b) + " has negative token id " +
                           std::to_string(id));
    S = std::max(S, int64_t(ex.src.size()));
    T = std::max(T, int64_t(ex.tgt.size()) + 1);  // + <bos> in tgt_in, + <eos> in tgt_out
  }
  const auto src_cells = size_t(checked_mul(B, S, "make_batch: batch x source length"));
  const auto tgt_cells = size_t(checked_mul(B, T, "make_batch: batch x target length"));
  std::vector<int32_t> src(src_cells, kPad), tgt_in(tgt_cells, kPad), tgt_out(tgt_cells, kPad);
  Batch batch;
  for (int64_t b = 0; b < B; ++b) {
    const Example& ex = examples[size_t(b)];
    const int64_t n = int64_t(ex.tgt.size());
    std::copy(ex.src.begin(), ex.src.end(), src.begin() + b * S);
    tgt_in[size_t(b * T)] = kBos;
    std::copy(ex.tgt.begin(), ex.tgt.end(), tgt_in.begin() + b * T + 1);
    std::copy(ex.tgt.begin(), ex.tgt.end(), tgt_out.begin() + b * T);
    tgt_out[size_t(b * T + n)] = kEos;
    batch.src_len.push_back(int64_t(ex.src.size()));
    batch.tgt_len.push_back(n + 1);
  }
  batch.src = Tensor::from_ids(src, {B, S});
  batch.tgt_in = Tensor::from_ids(tgt_in, {B, T});
  batch.tgt_out = Tensor::from_ids(tgt_out, {B, T});
  return batch;
}

}  // namespace tapegrad::data
