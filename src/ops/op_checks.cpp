// The op registry (see op_checks.hpp): one row per gradient-check case, table-driven.
// Sizes include 1, 3 and 17; rows cover broadcasting, transposed views, reused inputs and
// compositions (a 2-layer MLP, one causal attention head).
#include "tapegrad/op_checks.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tapegrad/ops.hpp"

namespace tapegrad {

namespace {

using Inputs = const std::vector<Tensor>&;

InputSpec in(Shape s, Domain d = Domain::any) { return InputSpec{s, d, {}, true}; }
InputSpec ids(Shape s, std::vector<int32_t> v) { return InputSpec{s, Domain::ids, std::move(v), false}; }
InputSpec constant(Shape s, Domain d = Domain::any) { return InputSpec{s, d, {}, false}; }

// A 0/1 float mask input (constant): drawn as positive values, thresholded inside the function.
Tensor as_mask(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  for (double& x : v) x = x > 1.25 ? 1.0 : 0.0;
  return Tensor::from_vector(v, t.shape(), t.dtype());
}

std::vector<OpCheck> build() {
  std::vector<OpCheck> c;
  auto add_row = [&](std::string name, std::string shapes, std::vector<InputSpec> inputs,
                     std::function<Tensor(Inputs)> fn, GradcheckOptions o = {}) {
    c.push_back(OpCheck{std::move(name), std::move(shapes), std::move(inputs), std::move(fn), o});
  };

  // ---- elementwise binary, with broadcasting
  add_row("add", "[3,4]+[3,4]", {in({3, 4}), in({3, 4})}, [](Inputs x) { return add(x[0], x[1]); });
  add_row("add", "[2,3,17]+[17]", {in({2, 3, 17}), in({17})}, [](Inputs x) { return add(x[0], x[1]); });
  add_row("add", "[1]+[3,1]", {in({1}), in({3, 1})}, [](Inputs x) { return add(x[0], x[1]); });
  add_row("sub", "[3,1]-[1,4]", {in({3, 1}), in({1, 4})}, [](Inputs x) { return sub(x[0], x[1]); });
  add_row("mul", "[2,3]*[2,3]", {in({2, 3}), in({2, 3})}, [](Inputs x) { return mul(x[0], x[1]); });
  add_row("mul", "[4,1,3]*[2,1]", {in({4, 1, 3}), in({2, 1})}, [](Inputs x) { return mul(x[0], x[1]); });
  add_row("div", "[3,4]/[4]", {in({3, 4}), in({4}, Domain::positive)}, [](Inputs x) { return div(x[0], x[1]); });
  add_row("pow", "[3,4]^[3,4]", {in({3, 4}, Domain::positive), in({3, 4})}, [](Inputs x) { return pow(x[0], x[1]); });
  add_row("neg", "[17]", {in({17})}, [](Inputs x) { return neg(x[0]); });
  add_row("add_scalar", "[3]+2.5", {in({3})}, [](Inputs x) { return add(x[0], 2.5); });
  add_row("mul_scalar", "[3,4]*-1.5", {in({3, 4})}, [](Inputs x) { return mul(x[0], -1.5); });
  add_row("pow_scalar", "[5]^1.7", {in({5}, Domain::positive)}, [](Inputs x) { return pow(x[0], 1.7); });
  add_row("reused_input", "x*x+x [3,3]", {in({3, 3})}, [](Inputs x) { return add(mul(x[0], x[0]), x[0]); });

  // ---- unary
  add_row("exp", "[3,4]", {in({3, 4})}, [](Inputs x) { return exp(x[0]); });
  add_row("log", "[17]", {in({17}, Domain::positive)}, [](Inputs x) { return log(x[0]); });
  add_row("sqrt", "[3,3]", {in({3, 3}, Domain::positive)}, [](Inputs x) { return sqrt(x[0]); });
  add_row("abs", "[17]", {in({17}, Domain::no_kink)}, [](Inputs x) { return abs(x[0]); });
  add_row("tanh", "[3,4]", {in({3, 4})}, [](Inputs x) { return tanh(x[0]); });
  add_row("sigmoid", "[3,4]", {in({3, 4})}, [](Inputs x) { return sigmoid(x[0]); });
  add_row("relu", "[17]", {in({17}, Domain::no_kink)}, [](Inputs x) { return relu(x[0]); });
  add_row("gelu_tanh", "[3,5]", {in({3, 5})}, [](Inputs x) { return gelu(x[0], GeluApprox::tanh); });
  add_row("gelu_exact", "[3,5]", {in({3, 5})}, [](Inputs x) { return gelu(x[0], GeluApprox::exact); });
  add_row("softplus", "[3,17]", {in({3, 17})}, [](Inputs x) { return softplus(x[0]); });
  // inputs scaled to about +-100, where log(1 + e^x) overflows in float and e^x underflows
  add_row("softplus", "[17]*40", {in({17})}, [](Inputs x) { return softplus(mul(x[0], 40.0)); });
  add_row("masked_fill", "[3,4] mask[1,4]", {in({3, 4}), constant({1, 4}, Domain::positive)},
          [](Inputs x) { return masked_fill(x[0], as_mask(x[1]), -2.0); });
  add_row("where", "c[3,4] [3,4] [4]", {constant({3, 4}, Domain::positive), in({3, 4}), in({4})},
          [](Inputs x) { return where(as_mask(x[0]), x[1], x[2]); });

  // ---- linear algebra
  add_row("matmul", "[3,4]@[4,5]", {in({3, 4}), in({4, 5})}, [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul", "[1,1]@[1,1]", {in({1, 1}), in({1, 1})}, [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul", "[3,17]@[17,3]", {in({3, 17}), in({17, 3})}, [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul", "[4]@[4,3]", {in({4}), in({4, 3})}, [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul", "[3,4]@[4]", {in({3, 4}), in({4})}, [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul", "[4,3]^T@[4,5]^T^T", {in({4, 3}), in({5, 4})},
          [](Inputs x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); });
  add_row("matmul_batched", "[2,3,4]@[4,5]", {in({2, 3, 4}), in({4, 5})}, [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul_batched", "[2,1,3,4]@[3,4,2]", {in({2, 1, 3, 4}), in({3, 4, 2})},
          [](Inputs x) { return matmul(x[0], x[1]); });
  add_row("matmul_batched", "[2,3,4]@[2,5,4]^T", {in({2, 3, 4}), in({2, 5, 4})},
          [](Inputs x) { return matmul(x[0], transpose(x[1], 1, 2)); });
  // Products of a few rows sharing a computed operand sum its gradient as one GEMM (StackedRowsGrad in
  // matmul.cpp): an attention RNN's context at every decoder step, and a product of 2 rows.
  add_row("matmul_stacked", "[2,1,3] steps @ tanh([2,3,4]), and [2,2,3] @ it", {in({2, 6, 3}), in({2, 3, 4})},
          [](Inputs x) {
            const Tensor keys = tanh(x[1]);
            std::vector<Tensor> steps;
            for (int t = 0; t < 4; ++t) steps.push_back(matmul(narrow(x[0], 1, t, 1), keys));
            steps.push_back(matmul(narrow(x[0], 1, 4, 2), keys));
            return concat(steps, 1);
          });
  add_row("linear", "[2,3,4]W[5,4]b[5]", {in({2, 3, 4}), in({5, 4}), in({5})},
          [](Inputs x) { return linear(x[0], x[1], x[2]); });
  add_row("linear", "[1,3]W[1,3]", {in({1, 3}), in({1, 3})}, [](Inputs x) { return linear(x[0], x[1]); });
  add_row("linear", "h[3,70]W[70,70]b[70] x3 steps, packed once (WeightPackScope)",
          {in({3, 70}), in({70, 70}), in({70})}, [](Inputs x) {
            WeightPackScope scope;  // 70 x 70: two panels of the AVX-512 tile, the second cut short
            Tensor h = x[0];
            for (int t = 0; t < 3; ++t) h = tanh(linear(h, x[1], x[2]));
            return h;
          });
  add_row("feed_forward_relu", "x[2,3,4] w1[6,4] b1[6] w2[5,6] b2[5]",
          {in({2, 3, 4}), in({6, 4}), in({6}), in({5, 6}), in({5})},
          [](Inputs x) { return feed_forward_relu(x[0], x[1], x[2], x[3], x[4]); });
  // hidden 70: a full and a ragged AVX-512 tile in both gated GEMMs; dropout 0.3 (seed 9) on h.
  add_row("feed_forward_relu", "x[3,5] w1[70,5] w2[4,70], no biases, dropout 0.3",
          {in({3, 5}), in({70, 5}), in({4, 70})},
          [](Inputs x) { return feed_forward_relu(x[0], x[1], Tensor(), x[2], Tensor(), 0.3, 9); });

  // ---- shape
  add_row("transpose", "[3,4] 0<->1", {in({3, 4})}, [](Inputs x) { return transpose(x[0], 0, 1); });
  add_row("permute", "[2,3,4] (2,0,1)", {in({2, 3, 4})}, [](Inputs x) { return permute(x[0], {2, 0, 1}); });
  add_row("reshape", "[2,6]->[3,4]", {in({2, 6})}, [](Inputs x) { return reshape(x[0], {3, 4}); });
  add_row("reshape", "[3,4]^T->[12]", {in({3, 4})}, [](Inputs x) { return reshape(transpose(x[0], 0, 1), {-1}); });
  add_row("reshape", "[3,2,4][:,1:2]->[3,4] (a view)", {in({3, 2, 4})},
          [](Inputs x) { return reshape(narrow(x[0], 1, 1, 1), {3, 4}); });
  add_row("reshape", "[3,6][:,1:5]->[3,2,2] (a view)", {in({3, 6})},
          [](Inputs x) { return mul(reshape(narrow(x[0], 1, 1, 4), {3, 2, 2}), 2.0); });
  add_row("contiguous", "[3,4]^T", {in({3, 4})}, [](Inputs x) { return contiguous(transpose(x[0], 0, 1)); });
  add_row("concat", "[2,3]|[2,1]|[2,4] axis 1", {in({2, 3}), in({2, 1}), in({2, 4})},
          [](Inputs x) { return concat({x[0], x[1], x[2]}, 1); });
  add_row("concat", "[1,3]|[17,3] axis 0", {in({1, 3}), in({17, 3})}, [](Inputs x) { return concat({x[0], x[1]}, 0); });
  add_row("narrow", "[5,4] axis 0 [1,4)", {in({5, 4})}, [](Inputs x) { return narrow(x[0], 0, 1, 3); });
  add_row("narrow", "[3,17] axis -1 [16,17)", {in({3, 17})}, [](Inputs x) { return narrow(x[0], -1, 16, 1); });
  // Slices of a computed tensor wait and are written together (NarrowedGrad in shape.cpp): slices
  // that tile the axis are copied into a new buffer; gaps, overlaps or an earlier gradient are added.
  add_row("narrow_slices", "tanh([2,4,3]) at every step of axis 1, out of order", {in({2, 4, 3})}, [](Inputs x) {
    const Tensor y = tanh(x[0]);
    Tensor out = narrow(y, 1, 2, 1);
    for (int t : {0, 3, 1}) out = add(out, mul(narrow(y, 1, t, 1), double(t + 2)));
    return out;
  });
  add_row("narrow_slices", "tanh([2,5,3]): overlapping slices, a gap, y used whole too", {in({2, 5, 3})},
          [](Inputs x) {
            const Tensor y = tanh(x[0]);
            const Tensor slices = mul(narrow(y, 1, 0, 2), add(narrow(y, 1, 1, 2), 1.0));  // column 3, 4: none
            return add(slices, sum(mul(y, y), 1, true));
          });
  add_row("narrow_slices", "tanh([2,3,3]): slices that tile axis 1, y used whole too", {in({2, 3, 3})},
          [](Inputs x) {
            const Tensor y = tanh(x[0]);
            return add(mul(narrow(y, 1, 0, 2), 2.0), add(narrow(y, 1, 2, 1), sum(mul(y, y), 1, true)));
          });
  add_row("stack", "3x[2,3] axis 1", {in({2, 3}), in({2, 3}), in({2, 3})},
          [](Inputs x) { return stack({x[0], x[1], x[2]}, 1); });

  // ---- reductions
  add_row("sum_all", "[3,4]", {in({3, 4})}, [](Inputs x) { return sum(x[0]); });
  add_row("sum_axis", "[2,3,4] axis 1", {in({2, 3, 4})}, [](Inputs x) { return sum(x[0], 1); });
  add_row("sum_axis", "[3,17] axis -1 keepdim", {in({3, 17})}, [](Inputs x) { return sum(x[0], -1, true); });
  add_row("mean_all", "[3,4]", {in({3, 4})}, [](Inputs x) { return mean(x[0]); });
  add_row("mean_axis", "[2,3,4] axis 2", {in({2, 3, 4})}, [](Inputs x) { return mean(x[0], 2); });
  add_row("max_axis", "[3,5] axis 1", {in({3, 5}, Domain::distinct)}, [](Inputs x) { return max(x[0], 1); });
  add_row("max_axis", "[4,3,2] axis 0 keepdim", {in({4, 3, 2}, Domain::distinct)},
          [](Inputs x) { return max(x[0], 0, true); });
  add_row("max_all", "[17]", {in({17}, Domain::distinct)}, [](Inputs x) { return max(x[0]); });

  // ---- softmax family
  add_row("softmax", "[3,5]", {in({3, 5})}, [](Inputs x) { return softmax(x[0]); });
  add_row("softmax", "[1,1]", {in({1, 1})}, [](Inputs x) { return add(softmax(x[0]), x[0]); });
  add_row("softmax", "[2,2,4,4] causal scale 0.5", {in({2, 2, 4, 4})},
          [](Inputs x) { return softmax(x[0], {0.5, {}, true}); });
  add_row("softmax", "[2,2,3,4] mask[2,1,1,4]", {in({2, 2, 3, 4}), constant({2, 1, 1, 4}, Domain::positive)},
          [](Inputs x) { return softmax(x[0], {1.0, mul(as_mask(x[1]), -1e9), false}); });
  add_row("log_softmax", "[4,7]", {in({4, 7})}, [](Inputs x) { return log_softmax(x[0]); });
  add_row("log_softmax", "[2,3,17]", {in({2, 3, 17})}, [](Inputs x) { return log_softmax(x[0]); });
  add_row("cross_entropy", "[5,7] t[5] ignore 2nd", {in({5, 7}), ids({5}, {3, -100, 0, 6, 3})},
          [](Inputs x) { return cross_entropy(x[0], x[1]); });
  add_row("cross_entropy", "[2,3,5] t[2,3] smoothing 0.1", {in({2, 3, 5}), ids({2, 3}, {0, 4, 4, 1, 2, 3})},
          [](Inputs x) { return cross_entropy(x[0], x[1], -100, 0.1); });

  // ---- normalisation, indexing, regularisation
  add_row("layer_norm", "[3,5] w[5] b[5]", {in({3, 5}), in({5}), in({5})},
          [](Inputs x) { return layer_norm(x[0], x[1], x[2]); });
  add_row("layer_norm", "[2,3,17] no affine", {in({2, 3, 17})}, [](Inputs x) { return layer_norm(x[0], {}, {}); });
  add_row("embedding", "table[10,4] ids[2,3] repeated", {in({10, 4}), ids({2, 3}, {1, 7, 1, 0, 9, 1})},
          [](Inputs x) { return embedding(x[0], x[1]); });
  add_row("dropout", "[4,5] p=0.3 seed 7", {in({4, 5})}, [](Inputs x) { return dropout(x[0], 0.3, true, 7); });

  // ---- fused recurrent-model ops
  add_row("gru_cell", "xp[3,12] hp[3,12] h[3,4]", {in({3, 12}), in({3, 12}), in({3, 4})},
          [](Inputs x) { return gru_cell(x[0], x[1], x[2]); });
  add_row("gru_cell", "xp=[2,3,15][:,1] (strided rows) hp[2,15] h[2,5]", {in({2, 3, 15}), in({2, 15}), in({2, 5})},
          [](Inputs x) { return gru_cell(reshape(narrow(x[0], 1, 1, 1), {2, 15}), x[1], x[2]); });
  add_row("additive_score", "k[2,3,5] q[2,5] v[5]", {in({2, 3, 5}), in({2, 5}), in({5})},
          [](Inputs x) { return additive_score(x[0], x[1], x[2]); });
  add_row("additive_score", "k[5,7,100] q[5,100] v[100] (chunks of 2 rows)", {in({5, 7, 100}), in({5, 100}), in({100})},
          [](Inputs x) { return additive_score(x[0], x[1], x[2]); });
  add_row("additive_score", "k[1,1,1] q[1,1] v[1]", {in({1, 1, 1}), in({1, 1}), in({1})},
          [](Inputs x) { return add(additive_score(x[0], x[1], x[2]), x[1]); });

  // ---- fused attention: q [B,Tq,H,dk], k [B,Tk,H,dk], v [B,Tk,H,dv]
  auto sdpa = [](Inputs x, AttentionSpec spec) { return scaled_dot_product_attention(x[0], x[1], x[2], spec); };
  add_row("scaled_dot_product_attention", "q[2,3,2,4] k[2,5,2,4] v[2,5,2,3] scale 0.5",
          {in({2, 3, 2, 4}), in({2, 5, 2, 4}), in({2, 5, 2, 3})}, [=](Inputs x) { return sdpa(x, {0.5}); });
  add_row("scaled_dot_product_attention", "q[1,3,2,4] k,v[1,5,2,4] causal (Tq < Tk)",
          {in({1, 3, 2, 4}), in({1, 5, 2, 4}), in({1, 5, 2, 4})},
          [=](Inputs x) { return sdpa(x, {0.5, {}, true}); });
  add_row("scaled_dot_product_attention", "q[1,4,1,3] k,v[1,2,1,3] causal (Tq > Tk: rows with no key)",
          {in({1, 4, 1, 3}), in({1, 2, 1, 3}), in({1, 2, 1, 3})},
          [=](Inputs x) { return add(sdpa(x, {0.7, {}, true}), x[0]); });
  add_row("scaled_dot_product_attention", "q[2,3,2,4] k,v[2,5,2,4] key padding mask[2,1,1,5]",
          {in({2, 3, 2, 4}), in({2, 5, 2, 4}), in({2, 5, 2, 4}), constant({2, 1, 1, 5}, Domain::positive)},
          [=](Inputs x) { return sdpa(x, {0.5, mul(as_mask(x[3]), -1e9), false}); });
  add_row("scaled_dot_product_attention", "q[2,3,2,4] k,v[2,4,2,4] mask[3,4] causal",
          {in({2, 3, 2, 4}), in({2, 4, 2, 4}), in({2, 4, 2, 4}), constant({3, 4})},
          [=](Inputs x) { return sdpa(x, {0.5, x[3], true}); });
  add_row("scaled_dot_product_attention", "q,k,v narrowed from x[2,3,3*2*4] (strided views)", {in({2, 3, 24})},
          [=](Inputs x) {
            auto part = [&](int i) { return narrow(x[0], 2, 8 * i, 8).reshape({2, 3, 2, 4}); };
            return scaled_dot_product_attention(part(0), part(1), part(2), {0.5});
          });
  add_row("scaled_dot_product_attention", "q[2,3,2,4] k,v[2,5,2,4] dropout 0.3 seed 5",
          {in({2, 3, 2, 4}), in({2, 5, 2, 4}), in({2, 5, 2, 4})},
          [=](Inputs x) { return sdpa(x, {0.5, {}, false, 0.3, 5}); });
  // The stacked form (scaled_dot_product_attention_stacked): self-attention on one [B,T,3C]
  // projection, and q [B,Tq,C] with kv [B,Tk,2C]; also q, k, v on one tensor (gradients added).
  add_row("scaled_dot_product_attention", "stacked qkv[2,3,3*2*4] heads 2 causal", {in({2, 3, 24})},
          [](Inputs x) {
            return scaled_dot_product_attention_stacked(x[0], {}, 2, {0.5, {}, true});
          });
  add_row("scaled_dot_product_attention", "stacked q[2,3,8] kv[2,5,2*8] heads 2 dropout 0.3",
          {in({2, 3, 8}), in({2, 5, 16})}, [](Inputs x) {
            return scaled_dot_product_attention_stacked(x[0], x[1], 2, {0.5, {}, false, 0.3, 5});
          });
  add_row("scaled_dot_product_attention", "q = k = v = x[2,3,2,4]", {in({2, 3, 2, 4})},
          [](Inputs x) { return scaled_dot_product_attention(x[0], x[0], x[0], {0.5}); });

  // ---- what a create_graph backward records: the first derivative, itself differentiated (order 1
  // checks the second derivative through unary_backward, order 2 the third). The seed w is an input, so the derivative
  // with respect to d(output) is checked too.
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> unary_fns = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, GeluApprox::tanh); }},
      {"gelu_exact", [](const Tensor& t) { return gelu(t, GeluApprox::exact); }},
      {"softplus", [](const Tensor& t) { return softplus(t); }},
  };
  for (const auto& [fname, f] : unary_fns) {
    const Domain d = fname == "log" || fname == "sqrt" ? Domain::positive
                     : fname == "abs" || fname == "relu" ? Domain::no_kink
                                                         : Domain::any;
    add_row("unary_backward", "d " + fname + "(x)/dx [3,4]", {in({3, 4}, d), in({3, 4})}, [f = f](Inputs x) {
      EnableGrad on;  // gradcheck's numeric pass runs under NoGrad; a derivative needs the tape
      return grad({f(x[0])}, {x[0]}, {.grad_outputs = {x[1]}, .create_graph = true})[0];
    });
  }

  // ---- compositions
  add_row("mlp2_composition", "x[4,3] W1[5,3] W2[2,5] ce", {in({4, 3}), in({5, 3}), in({5}), in({2, 5}), in({2})},
          [](Inputs x) {
            const Tensor h = tanh(linear(x[0], x[1], x[2]));
            return cross_entropy(linear(h, x[3], x[4]), Tensor::from_ids({0, 1, 1, 0}, {4}));
          });
  add_row("attention_head_composition", "x[2,4,6] Wq,Wk,Wv[3,6] causal",
          {in({2, 4, 6}), in({3, 6}), in({3, 6}), in({3, 6})}, [](Inputs x) {
            const Tensor q = linear(x[0], x[1]), k = linear(x[0], x[2]), v = linear(x[0], x[3]);
            const Tensor w = softmax(matmul(q, transpose(k, 1, 2)), {1.0 / std::sqrt(3.0), {}, true});
            return matmul(w, v);
          });
  add_row("multihead_attention_composition", "x[2,3,8] m[2,5,8] 2 heads", {in({2, 3, 8}), in({2, 5, 8}), in({8, 8})},
          [](Inputs x) {
            // heads split by views: q [B,H,Tq,dk], k^T [B,H,dk,Tk] (a transposed view), v [B,H,Tk,dk]
            const Tensor q = linear(x[0], x[2]).reshape({2, 3, 2, 4}).permute({0, 2, 1, 3});
            const Tensor kt = linear(x[1], x[2]).reshape({2, 5, 2, 4}).permute({0, 2, 3, 1});
            const Tensor v = x[1].reshape({2, 5, 2, 4}).permute({0, 2, 1, 3});
            const Tensor w = softmax(matmul(q, kt), {0.5, {}, false});
            return matmul(w, v).permute({0, 2, 1, 3}).reshape({2, 3, 8});
          });
  return c;
}

}  // namespace

const std::vector<OpCheck>& op_checks() {
  static const std::vector<OpCheck> checks = build();
  return checks;
}

GradcheckResult run_op_check(const OpCheck& check, int order) {
  if (order != 1 && order != 2) throw Error("run_op_check: order must be 1 or 2, got " + std::to_string(order));
  Generator gen(std::hash<std::string>{}(check.name + check.shapes) & 0xffffffff);
  std::vector<Tensor> inputs;
  for (const InputSpec& spec : check.inputs) {
    Tensor t;
    const int64_t n = spec.shape.numel();
    switch (spec.domain) {
      case Domain::any: t = Tensor::randn(spec.shape, gen, DType::f64); break;
      case Domain::positive: t = Tensor::rand(spec.shape, gen, DType::f64, 0.5, 2.0); break;
      case Domain::no_kink: {
        std::vector<double> v(static_cast<size_t>(n));
        for (double& x : v) x = (gen.uniform() < 0.5 ? -1 : 1) * (0.2 + 0.8 * gen.uniform());
        t = Tensor::from_vector(v, spec.shape, DType::f64);
        break;
      }
      case Domain::distinct: {
        std::vector<double> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = -1.0 + 0.1 * double(i);
        for (int64_t i = n - 1; i > 0; --i) std::swap(v[size_t(i)], v[size_t(gen.next_u64() % uint64_t(i + 1))]);
        t = Tensor::from_vector(v, spec.shape, DType::f64);
        break;
      }
      case Domain::ids: t = Tensor::from_ids(spec.ids, spec.shape); break;
    }
    if (spec.differentiable) t.requires_grad_();
    inputs.push_back(t);
  }
  const std::string label = check.name + " " + check.shapes;
  return order == 1 ? gradcheck(check.fn, inputs, check.options, label)
                    : gradgradcheck(check.fn, inputs, check.options, label);
}

}  // namespace tapegrad
