/// @file
/// Recurrent cells (Elman, GRU, LSTM) and a multi-layer recurrent stack unrolled over time on the
/// tape, so backward is backpropagation through time.
///
/// Input projections for every time step are computed in one GEMM before the loop; inside the loop
/// each step costs one [B, H] x [H, G*H] GEMM per layer. Padding: at a padded step a sequence's state
/// is carried over unchanged, so the final state is the state after its last real token.
#pragma once

#include <vector>

#include "tapegrad/nn/layers.hpp"

namespace tapegrad::nn {

/// The recurrent cell of RnnCell (equations there).
enum class CellKind { elman, gru, lstm };
/// "elman", "gru" or "lstm".
const char* cell_name(CellKind k);
/// "elman"|"rnn"|"tanh", "gru", "lstm"; throws Error naming the choices for anything else.
CellKind parse_cell(const std::string& name);

/// The recurrent state of one layer: h [B, H], and c [B, H] for LSTM (undefined otherwise).
struct RnnState {
  /// The hidden state h and the LSTM's cell state c.
  /// @{
  Tensor h, c;
  /// @}
};

/// One layer's cell. Gates G: elman 1, gru 3 (r, z, n), lstm 4 (i, f, g, o).
/// ```
///   elman: h' = tanh(x W_ih + b_ih + h W_hh + b_hh)
///   gru:   r = s(x_r + h_r), z = s(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) n + z h
///   lstm:  i, f, o = s(.), g = tanh(.), c' = f c + i g, h' = o tanh(c')
/// ```
class RnnCell : public Module {
 public:
  /// `input` features I to `hidden` features H, weights uniform(+-1/sqrt(H)) from `gen` (PyTorch's default).
  RnnCell(CellKind kind, int64_t input, int64_t hidden, Generator& gen);
  /// x [B, T, I] -> [B, T, G*H]: the input half of every gate, all steps at once.
  Tensor project_inputs(const Tensor& x) const { return linear(x, w_ih, b_ih); }
  /// One step from projected input xp [B, G*H] and state -> new state.
  RnnState step(const Tensor& xp, const RnnState& state) const;
  /// Zeros: h [batch, H] (and c for LSTM).
  RnnState initial_state(int64_t batch, DType dtype) const;
  CellKind kind() const { return kind_; }     ///< Which cell.
  int64_t hidden() const { return hidden_; }  ///< H.
  /// Parameters "w_ih" [G*H, I], "b_ih" [G*H], "w_hh" [G*H, H], "b_hh" [G*H], gates stacked in the order
  /// above.
  /// @{
  Tensor w_ih, b_ih, w_hh, b_hh;
  /// @}

 private:
  CellKind kind_;
  int64_t hidden_;
};

/// Stacked cells: layer l's outputs are layer l+1's inputs (with dropout between layers).
class RnnStack : public Module {
 public:
  /// `layers` cells, the first from `input` features, the rest from `hidden`; dropout between layers.
  RnnStack(CellKind kind, int64_t input, int64_t hidden, int64_t layers, double dropout, Generator& gen);
  /// x [B, T, I], lengths (real steps per sequence; empty = all T), initial states (empty = zeros)
  /// -> outputs of the top layer [B, T, H] (zeros at padded steps) and each layer's final state.
  /// `states` may be null; when not, its initial states are read (if any) and replaced by the final ones.
  /// Throws ShapeError for x not 3-D or lengths not one per sequence.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& lengths, std::vector<RnnState>* states,
                 Generator& gen);
  /// A single step for all layers (decoding): x [B, I] -> top h [B, H]; states updated in place.
  Tensor step(const Tensor& x, std::vector<RnnState>& states, Generator& gen);
  /// The same step from layer 0's already projected input xp0 [B, G*H] (x W_ih^T + b_ih computed by
  /// the caller, for instance partly for all time steps at once).
  Tensor step_projected(const Tensor& xp0, std::vector<RnnState>& states, Generator& gen);
  /// One RnnCell::initial_state per layer.
  std::vector<RnnState> initial_states(int64_t batch, DType dtype) const;
  std::vector<std::shared_ptr<RnnCell>> cells;  ///< the layers, bottom first (children "layers.0", ...)
  CellKind kind() const { return kind_; }       ///< Which cell.

 private:
  CellKind kind_;
  std::shared_ptr<Dropout> drop_;
};

}  // namespace tapegrad::nn
