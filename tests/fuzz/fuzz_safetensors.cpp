// Fuzz target: the safetensors reader over arbitrary bytes. A file the reader accepts must hold what
// it claims (every tensor's bytes inside the input) and come back identical after save + load.
#include <cstring>

#include "tapegrad/error.hpp"
#include "tapegrad/io.hpp"
#include "targets.hpp"

namespace tapegrad::fuzz {

namespace {

const void* raw_data(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>();
    case DType::f64:
      return t.data<double>();
    case DType::i32:
      return t.data<int32_t>();
  }
  return nullptr;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const size_t n = size_t(a.numel() * dtype_size(a.dtype()));
  return n == 0 || std::memcmp(raw_data(a), raw_data(b), n) == 0;
}

}  // namespace

void safetensors(const uint8_t* data, size_t size) {
  io::SafetensorsFile f;
  try {
    f = io::load_safetensors_bytes(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const Error&) {
    return;  // refused cleanly
  }
  uint64_t bytes = 0;
  for (const auto& [name, t] : f.tensors) bytes += uint64_t(t.numel() * dtype_size(t.dtype()));
  require(bytes <= size, "accepted tensors hold more bytes than the file");

  // Round trip, in memory through the encoder that save_safetensors writes with (a file would cost an
  // fsync per input). Saving may refuse what loading accepted only for a reason it names (an Error); a
  // refusal of the saved bytes escapes as a finding.
  std::string saved;
  try {
    saved = io::save_safetensors_bytes(f.tensors, f.metadata);
  } catch (const Error&) {
    return;
  }
  const io::SafetensorsFile g = io::load_safetensors_bytes(saved);
  require(g.metadata == f.metadata, "metadata changed in a save/load round trip");
  require(g.tensors.size() == f.tensors.size(), "tensor count changed in a save/load round trip");
  for (const auto& [name, t] : f.tensors) {
    const Tensor* u = g.find(name);
    require(u && same_bytes(t, *u), "a tensor changed in a save/load round trip");
  }
}

}  // namespace tapegrad::fuzz
