// What a model config costs before anything is built: the closed-form parameter count of each model
// kind (kept equal to make_model(config)->parameter_count() by a test over every option), the bytes
// of the constant position tables, and the check that refuses a config the machine cannot hold.
//
// Counts are computed twice from one formula: in checked int64 (the real count; overflow is an
// Error) and in double (to tell which field makes a config too large, by how much the total shrinks
// when that field is set to 1).
#include <cmath>
#include <type_traits>

#include "models_internal.hpp"
#include "tapegrad/checked.hpp"
#include "tapegrad/memory.hpp"

namespace tapegrad::models {

namespace {

// Thrown by Checked, caught by blaming (which names the field responsible).
struct Overflow {};

// An int64 count whose + and * throw Overflow when the result does not fit.
struct Checked {
  int64_t v;
  friend Checked operator+(Checked a, Checked b) {
    Checked out{0};
    if (__builtin_add_overflow(a.v, b.v, &out.v)) throw Overflow{};
    return out;
  }
  friend Checked operator*(Checked a, Checked b) {
    Checked out{0};
    if (__builtin_mul_overflow(a.v, b.v, &out.v)) throw Overflow{};
    return out;
  }
};
int64_t value(Checked c) {
  return c.v;
}

int64_t gates(nn::CellKind k) {
  return k == nn::CellKind::elman ? 1 : k == nn::CellKind::gru ? 3 : 4;
}

// Parameters and position-table elements of make_model(c), in N arithmetic.
template <class N>
N num(int64_t v) {
  if constexpr (std::is_same_v<N, double>)
    return double(v);
  else
    return N{v};
}

template <class N>
struct Counts {
  N parameters, table_elements;
};

template <class N>
Counts<N> count(const ModelConfig& c) {
  const N zero = num<N>(0), two = num<N>(2), V = num<N>(c.vocab_size), C = num<N>(c.d_model),
          L = num<N>(c.layers);
  auto linear = [&](N in, N out, bool bias) { return out * in + (bias ? out : zero); };
  if (c.kind == ModelKind::gpt) {  // no biases; the token table is the output projection too
    const N T = num<N>(c.max_len), F = num<N>(4) * C;
    const N block = num<N>(4) * linear(C, C, false) + linear(C, F, false) + linear(F, C, false) + two * C;
    return {V * C + T * C + L * block + C, zero};
  }
  if (c.kind == ModelKind::transformer) {
    const N F = num<N>(c.d_ff), T = num<N>(c.max_len);
    const N attention = num<N>(4) * linear(C, C, true);
    const N feed_forward = linear(C, F, true) + linear(F, C, true);
    const N norm = two * C;
    const N encoder_layer = attention + feed_forward + two * norm;
    const N decoder_layer = two * attention + feed_forward + num<N>(3) * norm;
    const N positions = two * T * C;  // src_pos and tgt_pos
    // Tied: one [V, C] table for both embeddings and the output projection (no bias); else two
    // embeddings and a projection with its bias.
    N p = (c.tie_embeddings ? V * C : two * V * C + linear(C, V, true)) + L * (encoder_layer + decoder_layer);
    if (c.norm_first) p = p + two * norm;
    if (c.positional == nn::PositionalKind::learned) p = p + positions;
    return {p, c.positional == nn::PositionalKind::sinusoidal ? positions : zero};
  }
  const N E = num<N>(c.d_model), H = num<N>(c.hidden), G = num<N>(gates(c.cell)) * H;
  const bool attention = c.kind == ModelKind::attention_rnn;
  auto stack = [&](N input) {  // layer 0 reads `input`, the others the layer below's H
    auto cell = [&](N in) { return G * in + G + G * H + G; };
    return cell(input) + num<N>(c.layers - 1) * cell(H);
  };
  N p = two * V * E + stack(E) + stack(attention ? E + H : E) + linear(H, V, true);
  if (attention) {
    const N scorer = c.score == nn::AttentionScore::additive  ? linear(H, H, false) + linear(H, H, true) + H
                     : c.score == nn::AttentionScore::general ? linear(H, H, false)
                                                              : zero;
    p = p + scorer + linear(two * H, H, false);
  }
  return {p, zero};
}

// The one size field that makes `c` largest: the field whose setting to 1 shrinks the total most.
struct SizeField {
  const char* json;
  const char* cli;
  int64_t ModelConfig::*member;
};
constexpr SizeField kSizeFields[] = {
    {"vocab_size", "vocabulary size", &ModelConfig::vocab_size},
    {"d_model", "--d-model", &ModelConfig::d_model},
    {"layers", "--layers", &ModelConfig::layers},
    {"d_ff", "--d-ff", &ModelConfig::d_ff},
    {"hidden", "--hidden", &ModelConfig::hidden},
    {"max_len", "max_len", &ModelConfig::max_len},
};

double total_elements(const ModelConfig& c) {
  const Counts<double> n = count<double>(c);
  return n.parameters + n.table_elements;
}

std::string blame(const ModelConfig& c, ConfigNames names) {
  const SizeField* worst = &kSizeFields[0];
  double worst_ratio = 0;
  for (const SizeField& f : kSizeFields) {
    ModelConfig small = c;
    small.*f.member = 1;
    const double ratio = total_elements(c) / std::max(total_elements(small), 1.0);
    if (ratio > worst_ratio) worst_ratio = ratio, worst = &f;
  }
  return std::string(names == ConfigNames::cli ? worst->cli : worst->json) + " " +
         std::to_string(c.*worst->member);
}

// f() for a validated config; an Overflow becomes an Error naming the field most responsible.
template <class F>
auto blaming(const ModelConfig& c, ConfigNames names, F&& f) {
  c.validate(names);
  try {
    return f();
  } catch (const Overflow&) {
    throw Error(blame(c, names) + ": the model's size overflows 64 bits (it would need more than " +
                format_bytes(double(INT64_MAX)) + ")");
  }
}

}  // namespace

int64_t parameter_count(const ModelConfig& config, ConfigNames names) {
  return blaming(config, names, [&] { return value(count<Checked>(config).parameters); });
}

int64_t parameter_bytes(const ModelConfig& config, ConfigNames names) {
  return blaming(config, names,
                 [&] { return value(count<Checked>(config).parameters * Checked{int64_t(sizeof(float))}); });
}

int64_t buffer_bytes(const ModelConfig& config, ConfigNames names) {
  // A sinusoidal table is filled in float64 and then copied to float32: 12 bytes per element at peak.
  return blaming(config, names, [&] {
    return value(count<Checked>(config).table_elements * Checked{int64_t(sizeof(double) + sizeof(float))});
  });
}

void check_config(const ModelConfig& config, ConfigNames names) {
  const int64_t params = parameter_bytes(config, names), tables = buffer_bytes(config, names);
  const int64_t limit = memory::machine_limit_bytes();
  const double total = double(params) + double(tables);
  if (total > double(limit)) {
    std::string need = format_bytes(double(params)) + " of parameters";
    if (tables > 0) need += " and " + format_bytes(double(tables)) + " of position tables";
    throw OutOfMemory(blame(config, names) + ": the model would need " + need + ", more than the " +
                      format_bytes(double(limit)) + " this machine can hold");
  }
}

}  // namespace tapegrad::models
