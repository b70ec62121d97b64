// nn modules: float64 gradient checks of every module at tiny sizes, parameter naming, positional
// encodings, activation and attention-score choices, and padding semantics of the recurrent stack.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "tapegrad/nn/attention.hpp"
#include "tapegrad/nn/rnn.hpp"
#include "tapegrad/nn/transformer.hpp"
#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

// Gradient-checks `fn` with respect to x and every parameter of `m` (converted to float64).
void check_module(nn::Module& m, const std::vector<Tensor>& xs, const std::function<Tensor()>& fn,
                  const std::string& label) {
  m.to(DType::f64);
  m.eval();  // dropout off: gradcheck needs a deterministic function
  std::vector<Tensor> inputs = xs;
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>&) { return fn(); }, inputs, {}, label);
  INFO(r.message);
  CHECK(r.ok);
}

Tensor input(Shape s, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(s, g, DType::f64).requires_grad_();
}

}  // namespace

TEST_CASE("Linear, LayerNorm, FeedForward gradients", "[nn][gradcheck]") {
  Generator g(1);
  nn::Linear lin(4, 3, g);
  Tensor x = input({2, 5, 4}, 2);
  check_module(lin, {x}, [&] { return lin.forward(x); }, "Linear");
  nn::LayerNorm ln(5);
  Tensor y = input({3, 5}, 3);
  check_module(ln, {y}, [&] { return ln.forward(y); }, "LayerNorm");
  for (auto act : {nn::Activation::relu, nn::Activation::gelu_tanh, nn::Activation::gelu_exact}) {
    CAPTURE(nn::activation_name(act));
    nn::FeedForward ff(4, 7, act, 0.1, g);
    check_module(
        ff, {x}, [&] { return ff.forward(x, g); }, std::string("FeedForward ") + nn::activation_name(act));
  }
}

TEST_CASE("FeedForward applies the GELU it is given: tanh approximation or exact erf", "[nn]") {
  // Against scalar formulas: the two forms differ by up to ~5e-4, far above float64 rounding.
  const double pi = std::acos(-1.0);
  auto exact = [](double h) { return 0.5 * h * (1 + std::erf(h / std::sqrt(2.0))); };
  auto tanh_approx = [&](double h) {
    return 0.5 * h * (1 + std::tanh(std::sqrt(2 / pi) * (h + 0.044715 * h * h * h)));
  };
  for (auto act : {nn::Activation::gelu_tanh, nn::Activation::gelu_exact}) {
    CAPTURE(nn::activation_name(act));
    Generator g(21);
    nn::FeedForward ff(3, 40, act, 0.0, g);
    ff.to(DType::f64);
    ff.eval();
    const Tensor x = mul(Tensor::randn({2, 3}, g, DType::f64), 3.0);
    std::vector<double> h = ff.linear1->forward(x).to_vector();
    for (double& v : h) v = act == nn::Activation::gelu_exact ? exact(v) : tanh_approx(v);
    const std::vector<double> want = ff.linear2->forward(Tensor::from_vector(h, {2, 40}, DType::f64))
                                         .to_vector(),
                              got = ff.forward(x, g).to_vector();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
  }
}

TEST_CASE("activation names: gelu reads as gelu-tanh, every name round-trips, unknown names list the choices",
          "[nn]") {
  CHECK(nn::parse_activation("gelu") == nn::Activation::gelu_tanh);
  for (auto act : {nn::Activation::relu, nn::Activation::gelu_tanh, nn::Activation::gelu_exact})
    CHECK(nn::parse_activation(nn::activation_name(act)) == act);
  CHECK(std::string(nn::activation_name(nn::Activation::gelu_exact)) == "gelu-exact");
  CHECK_THROWS_WITH(nn::parse_activation("swish"), Catch::Contains("'swish'") &&
                                                       Catch::Contains("gelu-tanh") &&
                                                       Catch::Contains("gelu-exact"));
}

TEST_CASE("MultiHeadAttention gradients with causal and key-padding masks", "[nn][gradcheck]") {
  Generator g(4);
  nn::MultiHeadAttention mha(8, 2, 0.0, g);
  Tensor x = input({2, 4, 8}, 5);
  Tensor mem = input({2, 3, 8}, 6);
  const Tensor ids = Tensor::from_ids({5, 6, 0, 7, 8, 9}, {2, 3});  // first sequence padded at the end
  const Tensor mask = nn::key_padding_mask(ids, DType::f64);
  check_module(mha, {x}, [&] { return mha.forward(x, x, {}, true, g); }, "MHA self causal");
  check_module(mha, {x, mem}, [&] { return mha.forward(x, mem, mask, false, g); }, "MHA cross padded");
}

TEST_CASE("MultiHeadAttention: the automatic path is fused, dropout or not; unfused when asked", "[nn]") {
  // Fused with or without a dropout mask on the weights, short sequences or long; the unfused ops
  // (matmul, softmax, dropout, matmul) on the tape only when set_path asks for them.
  auto fused_on_tape = [](nn::MultiHeadAttention& mha, int64_t T) {
    Generator data(3), gen(4);
    const Tensor x = Tensor::randn({2, T, 8}, data);
    current_tape().clear();
    mha.forward(x, x, {}, true, gen);
    const auto& entries = current_tape().entries();
    const bool fused = std::any_of(entries.begin(), entries.end(), [](const auto& e) {
      return e.op == OpKind::scaled_dot_product_attention;
    });
    const bool matmul =
        std::any_of(entries.begin(), entries.end(), [](const auto& e) { return e.op == OpKind::matmul; });
    CHECK(fused != matmul);  // one path or the other
    current_tape().clear();
    return fused;
  };
  Generator init(5);
  nn::MultiHeadAttention plain(8, 2, 0.0, init), dropping(8, 2, 0.2, init);
  CHECK(fused_on_tape(plain, 5));
  CHECK(fused_on_tape(dropping, 5));
  CHECK(fused_on_tape(dropping, 256));
  dropping.set_path(nn::AttentionPath::unfused);
  CHECK_FALSE(fused_on_tape(dropping, 5));
  dropping.set_path(nn::AttentionPath::automatic);
  dropping.eval();
  CHECK(fused_on_tape(dropping, 5));
}

TEST_CASE("MultiHeadAttention: fused and unfused paths agree, dropout and kept weights included", "[nn]") {
  // automatic takes the fused path; dropout 0.2 in training, so both paths must draw the same mask
  // from the same generator state.
  const int64_t B = 2, T = 256, C = 8;
  Generator init(5);
  nn::MultiHeadAttention mha(C, 2, 0.2, init);
  Generator data(6);
  const Tensor x = Tensor::randn({B, T, C}, data);
  std::vector<double> pad(size_t(B * T), 0.0);
  for (int64_t j = T - 40; j < T; ++j) pad[size_t(T + j)] = -1e9;  // the second sequence is padded
  const Tensor mask = Tensor::from_vector(pad, {B, 1, 1, T});
  const Tensor w = Tensor::randn({B, T, C}, data);
  struct Run {
    Tensor y, weights;
    std::vector<Tensor> grads;
  };
  auto run = [&](nn::AttentionPath path, bool causal) {
    mha.set_path(path);
    mha.keep_weights(true);
    mha.zero_grad();
    Generator gen(11);
    Run r;
    r.y = mha.forward(x, x, mask, causal, gen);
    backward(sum(mul(r.y, w)));
    r.weights = mha.last_weights();
    for (const auto& p : mha.named_parameters()) r.grads.push_back(p.second.grad().clone());
    return r;
  };
  auto max_diff = [](const Tensor& a, const Tensor& b) {
    const std::vector<double> u = a.to_vector(), v = b.to_vector();
    double m = u.size() == v.size() ? 0.0 : 1e300;
    for (size_t i = 0; i < u.size() && i < v.size(); ++i) m = std::max(m, std::abs(u[i] - v[i]));
    return m;
  };
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Run fused = run(nn::AttentionPath::automatic, causal),
              unfused = run(nn::AttentionPath::unfused, causal);
    CHECK(max_diff(fused.y, unfused.y) < 1e-5);
    REQUIRE(fused.weights.defined());
    CHECK(fused.weights.shape() == Shape{B, 2, T, T});
    CHECK(max_diff(fused.weights, unfused.weights) < 1e-6);
    REQUIRE(fused.grads.size() == unfused.grads.size());
    for (size_t i = 0; i < fused.grads.size(); ++i) CHECK(max_diff(fused.grads[i], unfused.grads[i]) < 1e-4);
  }
}

TEST_CASE("Transformer encoder and decoder layers, post-LN and pre-LN", "[nn][gradcheck]") {
  for (bool pre : {false, true}) {
    CAPTURE(pre);
    Generator g(7);
    const nn::TransformerLayerOptions o{8, 2, 12, 0.0, nn::Activation::relu, pre};
    nn::EncoderLayer enc(o, g);
    nn::DecoderLayer dec(o, g);
    Tensor x = input({2, 3, 8}, 8);
    Tensor y = input({2, 4, 8}, 9);
    const Tensor mask = nn::key_padding_mask(Tensor::from_ids({4, 5, 6, 4, 0, 0}, {2, 3}), DType::f64);
    check_module(enc, {x}, [&] { return enc.forward(x, mask, g); }, "EncoderLayer");
    check_module(dec, {x, y}, [&] { return dec.forward(y, x, {}, mask, g); }, "DecoderLayer");
  }
}

TEST_CASE("Recurrent cells unrolled over 5 steps (BPTT), with padding", "[nn][gradcheck]") {
  for (auto kind : {nn::CellKind::elman, nn::CellKind::gru, nn::CellKind::lstm}) {
    CAPTURE(nn::cell_name(kind));
    Generator g(10);
    nn::RnnStack rnn(kind, 3, 4, 2, 0.0, g);
    Tensor x = input({2, 5, 3}, 11);
    check_module(rnn, {x}, [&] {
      std::vector<nn::RnnState> states;
      const Tensor out = rnn.forward(x, {5, 3}, &states, g);
      Tensor r = add(sum(out), sum(states.back().h));
      if (states.back().c.defined()) r = add(r, sum(states.back().c));
      return r;
    }, nn::cell_name(kind));
  }
}

TEST_CASE("Additive, general and dot attention over encoder states", "[nn][gradcheck]") {
  for (auto score : {nn::AttentionScore::additive, nn::AttentionScore::general, nn::AttentionScore::dot}) {
    CAPTURE(nn::score_name(score));
    Generator g(12);
    const int64_t Q = score == nn::AttentionScore::dot ? 5 : 4;  // dot: query size = key size
    nn::SeqAttention attn(score, Q, 5, 6, g);
    Tensor q = input({2, Q}, 13);
    Tensor keys = input({2, 3, 5}, 14);
    const Tensor mask = Tensor::from_vector({0, 0, -1e9, 0, 0, 0}, {2, 3}, DType::f64);
    check_module(attn, {q, keys}, [&] {
      Tensor w;
      const Tensor ctx = attn.forward(q, keys, attn.precompute(keys), mask, &w);
      CHECK(w.to_vector()[2] == 0.0);  // the padded key gets no weight
      return ctx;
    }, nn::score_name(score));
  }
}

TEST_CASE("dot attention has no parameters, scores s^T h_j and refuses unequal sizes", "[nn]") {
  Generator g(15);
  nn::SeqAttention dot(nn::AttentionScore::dot, 3, 3, 7, g);
  CHECK(dot.parameter_count() == 0);
  nn::SeqAttention general(nn::AttentionScore::general, 3, 3, 7, g);
  CHECK(general.parameter_count() == 9);
  const Tensor q = Tensor::randn({2, 3}, g, DType::f64), keys = Tensor::randn({2, 4, 3}, g, DType::f64);
  Tensor w;
  const Tensor ctx = dot.forward(q, keys, dot.precompute(keys), {}, &w);
  const std::vector<double> qv = q.to_vector(), kv = keys.to_vector(), wv = w.to_vector(),
                            cv = ctx.to_vector();
  for (int b = 0; b < 2; ++b) {
    std::vector<double> e(4);
    double total = 0;
    for (int j = 0; j < 4; ++j) {
      for (int d = 0; d < 3; ++d) e[size_t(j)] += qv[size_t(b * 3 + d)] * kv[size_t((b * 4 + j) * 3 + d)];
      total += std::exp(e[size_t(j)]);
    }
    for (int j = 0; j < 4; ++j)
      CHECK(wv[size_t(b * 4 + j)] == Approx(std::exp(e[size_t(j)]) / total).margin(1e-12));
    for (int d = 0; d < 3; ++d) {
      double c = 0;
      for (int j = 0; j < 4; ++j) c += wv[size_t(b * 4 + j)] * kv[size_t((b * 4 + j) * 3 + d)];
      CHECK(cv[size_t(b * 3 + d)] == Approx(c).margin(1e-12));
    }
  }
  CHECK_THROWS_AS(nn::SeqAttention(nn::AttentionScore::dot, 4, 6, 7, g), ShapeError);
  CHECK_THROWS_WITH(nn::SeqAttention(nn::AttentionScore::dot, 4, 6, 7, g),
                    Catch::Contains("attention dot") && Catch::Contains("query size (4)") &&
                        Catch::Contains("key size (6)"));
}

TEST_CASE("attention score names round-trip; luong reads as general; unknown names list the choices",
          "[nn]") {
  for (auto score : {nn::AttentionScore::additive, nn::AttentionScore::general, nn::AttentionScore::dot})
    CHECK(nn::parse_score(nn::score_name(score)) == score);
  CHECK(nn::parse_score("luong") == nn::AttentionScore::general);
  CHECK(nn::parse_score("bahdanau") == nn::AttentionScore::additive);
  CHECK_THROWS_WITH(nn::parse_score("concat"),
                    Catch::Contains("'concat'") && Catch::Contains("additive, general or dot"));
}

TEST_CASE("parameters have hierarchical names", "[nn]") {
  Generator g(1);
  const nn::TransformerLayerOptions o{8, 2, 16, 0.1, nn::Activation::relu, false};
  nn::DecoderLayer dec(o, g);
  std::vector<std::string> names;
  for (auto& [n, t] : dec.named_parameters()) names.push_back(n);
  CHECK(std::find(names.begin(), names.end(), "self_attn.q_proj.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cross_attn.out_proj.bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "norm3.weight") != names.end());
  CHECK(dec.parameter_count() == 2 * 4 * (8 * 8 + 8) + (8 * 16 + 16 + 16 * 8 + 8) + 3 * 16);
}

TEST_CASE("sinusoidal positions follow the paper's formula", "[nn]") {
  Generator g(1);
  nn::PositionalEncoding pe(nn::PositionalKind::sinusoidal, 10, 4, g);
  const auto v = pe.forward(Tensor::zeros({1, 10, 4})).to_vector();
  for (int t = 0; t < 10; ++t) {
    CHECK(v[size_t(t * 4 + 0)] == Approx(std::sin(t)).margin(1e-6));
    CHECK(v[size_t(t * 4 + 1)] == Approx(std::cos(t)).margin(1e-6));
    CHECK(v[size_t(t * 4 + 2)] == Approx(std::sin(t / 100.0)).margin(1e-6));
  }
  CHECK_THROWS_WITH(pe.forward(Tensor::zeros({1, 11, 4})), Catch::Contains("max_len 10"));
  nn::PositionalEncoding none(nn::PositionalKind::none, 10, 4, g);
  CHECK(none.parameter_count() == 0);
  nn::PositionalEncoding learned(nn::PositionalKind::learned, 10, 4, g);
  CHECK(learned.parameter_count() == 40);
}

TEST_CASE("a padded sequence's final RNN state equals running it alone", "[nn]") {
  Generator g(3);
  nn::RnnStack rnn(nn::CellKind::lstm, 3, 5, 2, 0.0, g);
  rnn.eval();
  Generator d(4);
  const Tensor x = Tensor::randn({2, 6, 3}, d);
  std::vector<nn::RnnState> both, alone;
  const Tensor out = rnn.forward(x, {6, 4}, &both, g);
  rnn.forward(narrow(narrow(x, 0, 1, 1), 1, 0, 4).contiguous(), {}, &alone, g);
  const auto h_both = both.back().h.to_vector(), h_alone = alone.back().h.to_vector();
  for (int i = 0; i < 5; ++i) CHECK(h_both[size_t(5 + i)] == Approx(h_alone[size_t(i)]).margin(1e-6));
  // outputs past the end of the shorter sequence are zero
  const auto o = out.to_vector();
  for (int t = 4; t < 6; ++t)
    for (int i = 0; i < 5; ++i) CHECK(o[size_t((6 + t) * 5 + i)] == 0.0);
}
