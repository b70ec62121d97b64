// Elman, GRU and LSTM cells and the multi-layer stack that unrolls them over time.
#include "tapegrad/nn/rnn.hpp"

#include <cmath>

#include "tapegrad/checked.hpp"

namespace tapegrad::nn {

const char* cell_name(CellKind k) {
  switch (k) {
    case CellKind::elman: return "elman";
    case CellKind::gru: return "gru";
    case CellKind::lstm: return "lstm";
  }
  return "?";
}

CellKind parse_cell(const std::string& name) {
  if (name == "elman" || name == "rnn" || name == "tanh") return CellKind::elman;
  if (name == "gru") return CellKind::gru;
  if (name == "lstm") return CellKind::lstm;
  throw Error("rnn cell: unknown kind '" + name + "' (expected elman, gru or lstm)");
}

namespace {
int64_t gate_count(CellKind k) { return k == CellKind::elman ? 1 : k == CellKind::gru ? 3 : 4; }
}  // namespace

RnnCell::RnnCell(CellKind kind, int64_t input, int64_t hidden, Generator& gen) : kind_(kind), hidden_(hidden) {
  const int64_t G = checked_mul(gate_count(kind), hidden, "rnn cell gates x hidden");
  const double bound = 1.0 / std::sqrt(double(hidden));  // PyTorch's default for recurrent layers
  w_ih = register_parameter("w_ih", Tensor::rand({G, input}, gen, DType::f32, -bound, bound));
  b_ih = register_parameter("b_ih", Tensor::rand({G}, gen, DType::f32, -bound, bound));
  w_hh = register_parameter("w_hh", Tensor::rand({G, hidden}, gen, DType::f32, -bound, bound));
  b_hh = register_parameter("b_hh", Tensor::rand({G}, gen, DType::f32, -bound, bound));
}

RnnState RnnCell::initial_state(int64_t batch, DType dtype) const {
  RnnState s;
  s.h = Tensor::zeros({batch, hidden_}, dtype);
  if (kind_ == CellKind::lstm) s.c = Tensor::zeros({batch, hidden_}, dtype);
  return s;
}

RnnState RnnCell::step(const Tensor& xp, const RnnState& state) const {
  const int64_t H = hidden_;
  const Tensor hp = linear(state.h, w_hh, b_hh);  // [B, G*H]
  auto gate = [H](const Tensor& t, int i) { return narrow(t, -1, i * H, H); };
  switch (kind_) {
    case CellKind::elman: return {tanh(add(xp, hp)), {}};
    case CellKind::gru:  // r, z, n and (1 - z) n + z h in one fused op
      return {gru_cell(xp, hp, state.h), {}};
    case CellKind::lstm: {
      const Tensor g = add(xp, hp);
      const Tensor i = sigmoid(gate(g, 0)), f = sigmoid(gate(g, 1)), c_hat = tanh(gate(g, 2)), o = sigmoid(gate(g, 3));
      const Tensor c = add(mul(f, state.c), mul(i, c_hat));
      return {mul(o, tanh(c)), c};
    }
  }
  return state;
}

RnnStack::RnnStack(CellKind kind, int64_t input, int64_t hidden, int64_t layers, double dropout, Generator& gen)
    : kind_(kind) {
  for (int64_t l = 0; l < layers; ++l)
    cells.push_back(register_module("layers." + std::to_string(l),
                                    std::make_shared<RnnCell>(kind, l == 0 ? input : hidden, hidden, gen)));
  drop_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

std::vector<RnnState> RnnStack::initial_states(int64_t batch, DType dtype) const {
  std::vector<RnnState> s;
  for (const auto& c : cells) s.push_back(c->initial_state(batch, dtype));
  return s;
}

Tensor RnnStack::forward(const Tensor& x, const std::vector<int64_t>& lengths, std::vector<RnnState>* states,
                         Generator& gen) {
  if (x.ndim() != 3) throw ShapeError("RnnStack: expected x [B, T, I], got " + to_string(x.shape()));
  const int64_t B = x.size(0), T = x.size(1);
  if (!lengths.empty() && int64_t(lengths.size()) != B)
    throw ShapeError("RnnStack: " + std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(B));
  std::vector<RnnState> init = states && !states->empty() ? *states : initial_states(B, x.dtype());
  // keep[t]: 1 where step t is real for that sequence; undefined when every sequence is real at t.
  std::vector<Tensor> keep(static_cast<size_t>(T));
  for (int64_t t = 0; t < T && !lengths.empty(); ++t) {
    std::vector<double> m(static_cast<size_t>(B));
    bool all = true;
    for (int64_t b = 0; b < B; ++b) all &= (m[size_t(b)] = lengths[size_t(b)] > t ? 1.0 : 0.0) == 1.0;
    if (!all) keep[size_t(t)] = Tensor::from_vector(m, {B, 1}, x.dtype());
  }
  Tensor layer_input = x;
  std::vector<RnnState> finals;
  for (size_t l = 0; l < cells.size(); ++l) {
    if (l > 0) layer_input = drop_->forward(layer_input, gen);
    const Tensor xp = cells[l]->project_inputs(layer_input);  // [B, T, G*H], one GEMM for all steps
    RnnState s = init[l];
    std::vector<Tensor> outputs;
    for (int64_t t = 0; t < T; ++t) {
      RnnState next = cells[l]->step(reshape(narrow(xp, 1, t, 1), {B, -1}), s);
      if (const Tensor& k = keep[size_t(t)]; k.defined()) {
        // padded sequences carry their state over: s' = s + keep * (next - s); outputs are zero there
        next.h = add(s.h, mul(k, sub(next.h, s.h)));
        if (next.c.defined()) next.c = add(s.c, mul(k, sub(next.c, s.c)));
        outputs.push_back(mul(next.h, k));
      } else {
        outputs.push_back(next.h);
      }
      s = next;
    }
    finals.push_back(s);
    layer_input = stack(outputs, 1);  // [B, T, H]
  }
  if (states) *states = finals;
  return layer_input;
}

Tensor RnnStack::step(const Tensor& x, std::vector<RnnState>& states, Generator& gen) {
  return step_projected(cells[0]->project_inputs(x), states, gen);
}

Tensor RnnStack::step_projected(const Tensor& xp0, std::vector<RnnState>& states, Generator& gen) {
  Tensor h;
  for (size_t l = 0; l < cells.size(); ++l) {
    if (l > 0) h = drop_->forward(h, gen);
    states[l] = cells[l]->step(l == 0 ? xp0 : cells[l]->project_inputs(h), states[l]);
    h = states[l].h;
  }
  return h;
}

}  // namespace tapegrad::nn
