// The layers and models above nn.cpp's basic ones, and what training and loading them needs:
//   tapegrad.nn:    RNNCell, RNN / GRU / LSTM (nn/rnn.hpp); Dropout, PositionalEncoding, FeedForward,
//                   EncoderLayer, DecoderLayer, SeqAttention, key_padding_mask (nn/layers.hpp,
//                   nn/transformer.hpp, nn/attention.hpp); ModelConfig, Seq2Seq (the RNN and attention
//                   RNN encoder-decoders and the Transformer, models/seq2seq.hpp), GPT, make_model.
//   tapegrad.data:  Batch (padded seq2seq batches and text blocks) and Vocab (data.hpp).
//   tapegrad.train: StepRecipe, train_step (train/step.hpp, train.hpp) and load_checkpoint.
// Constructors take the fields of the C++ option structs as keywords; `seed` is a Generator, an int or
// None as in nn.cpp, and a forward's `generator` (dropout) likewise. The models draw dropout from their
// own generator (model.generator), as the trainer does. Every forward and decode releases the GIL.
#include <algorithm>
#include <memory>
#include <optional>

#include "bindings.hpp"
#include "tapegrad/data.hpp"
#include "tapegrad/models/gpt.hpp"
#include "tapegrad/models/seq2seq.hpp"
#include "tapegrad/nn/attention.hpp"
#include "tapegrad/nn/rnn.hpp"
#include "tapegrad/nn/transformer.hpp"
#include "tapegrad/train.hpp"
#include "tapegrad/train/step.hpp"

namespace tapegrad::python {

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// Undefined tensors (no bias, no mask, the c of a non-LSTM state) are None in Python.
py::object tensor_or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }
Tensor tensor_or_undefined(py::handle obj) { return obj.is_none() ? Tensor() : to_tensor(obj); }

// The recurrent stacks of one cell each, so that isinstance(m, nn.GRU) holds; all are nn.RNN.
template <nn::CellKind Kind>
struct OneCellStack : nn::RnnStack {
  OneCellStack(int64_t input, int64_t hidden, int64_t layers, double dropout, Generator& gen)
      : nn::RnnStack(Kind, input, hidden, layers, dropout, gen) {}
};

template <nn::CellKind Kind>
void bind_one_cell_stack(py::module_& nn, const char* name, const char* doc) {
  using Stack = OneCellStack<Kind>;
  py::class_<Stack, nn::RnnStack, std::shared_ptr<Stack>>(nn, name, doc)
      .def(py::init([](int64_t input, int64_t hidden, int64_t layers, double dropout, py::object seed) {
             Generator scratch;
             return std::make_shared<Stack>(input, hidden, layers, dropout, generator_arg(seed, scratch));
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("layers") = 1, py::arg("dropout") = 0.0,
           py::arg("seed") = py::none());
}

// The fields of TransformerLayerOptions as keywords.
nn::TransformerLayerOptions layer_options(int64_t dim, int64_t heads, int64_t ff_dim, double dropout,
                                          const std::string& activation, bool norm_first, bool bias) {
  return {.dim = dim,
          .heads = heads,
          .ff_dim = ff_dim,
          .dropout = dropout,
          .activation = nn::parse_activation(activation),
          .norm_first = norm_first,
          .bias = bias};
}

template <class Layer>
std::shared_ptr<Layer> make_layer(int64_t dim, int64_t heads, int64_t ff_dim, double dropout,
                                  const std::string& activation, bool norm_first, bool bias, py::handle seed) {
  Generator scratch;
  return std::make_shared<Layer>(layer_options(dim, heads, ff_dim, dropout, activation, norm_first, bias),
                                 generator_arg(seed, scratch));
}

// ModelConfig's fields, as Python names them (its properties).
const std::vector<std::string>& config_fields() {
  static const std::vector<std::string> fields = {
      "kind",      "vocab_size", "d_model",    "layers", "dropout", "heads", "d_ff",  "positional", "norm_first",
      "activation", "max_len",   "tie_embeddings", "cell", "hidden", "score", "checkpoint_layers"};
  return fields;
}

// A ModelConfig from `config` (a ModelConfig or None: the defaults) with the keyword fields set on
// top through ModelConfig's own properties (so they parse as the properties do), then validated.
models::ModelConfig config_from(py::handle config, const py::kwargs& fields) {
  py::object obj = py::cast(config.is_none() ? models::ModelConfig{} : config.cast<models::ModelConfig>());
  const auto& known = config_fields();
  for (auto [key, value] : fields) {
    const std::string name = py::str(key);
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw py::type_error("ModelConfig has no field '" + name + "'");
    py::setattr(obj, key, value);
  }
  models::ModelConfig c = obj.cast<models::ModelConfig>();
  c.validate();
  return c;
}

// A model as the most derived Python type (a GPT is an nn.GPT).
py::object model_object(std::shared_ptr<models::Seq2Seq> model) { return py::cast(std::move(model)); }

data::Side parse_side(const std::string& side) {
  if (side == "source") return data::Side::source;
  if (side == "target") return data::Side::target;
  throw Error("side: expected source or target, got " + side);
}

// A checkpoint loaded for inference (train::LoadedModel), with its model shared with Python.
struct Checkpoint {
  std::shared_ptr<models::Seq2Seq> model;
  data::Vocab vocab;
  std::shared_ptr<const data::Tokenizer> tokenizer;
  train::TrainOptions options;
  int64_t step = 0;
  std::string optimizer_path;
};

}  // namespace

void bind_models(py::module_& nn, py::module_& data, py::module_& train) {
  // ---- recurrent layers (nn/rnn.hpp)
  py::class_<nn::RnnState>(nn, "RnnState", "One layer's recurrent state: h [B, H], and c [B, H] for LSTM (else None)")
      .def(py::init([](const Tensor& h, py::handle c) { return nn::RnnState{h, tensor_or_undefined(c)}; }),
           py::arg("h"), py::arg("c") = py::none())
      .def_readwrite("h", &nn::RnnState::h)
      .def_property(
          "c", [](const nn::RnnState& s) { return tensor_or_none(s.c); },
          [](nn::RnnState& s, py::handle c) { s.c = tensor_or_undefined(c); });
  py::class_<nn::RnnCell, nn::Module, std::shared_ptr<nn::RnnCell>>(
      nn, "RNNCell", "One recurrent cell (elman, gru or lstm): x [B, I] and a state -> the next state")
      .def(py::init([](int64_t input, int64_t hidden, const std::string& cell, py::object seed) {
             Generator scratch;
             return std::make_shared<nn::RnnCell>(nn::parse_cell(cell), input, hidden, generator_arg(seed, scratch));
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("cell") = "gru", py::arg("seed") = py::none())
      .def(
          "__call__",
          [](const nn::RnnCell& cell, const Tensor& x, std::optional<nn::RnnState> state) {
            if (x.ndim() != 2) throw ShapeError("RNNCell: expected x [B, I], got " + to_string(x.shape()));
            const nn::RnnState s = state ? *state : cell.initial_state(x.shape()[0], x.dtype());
            return cell.step(cell.project_inputs(x), s);
          },
          Release(), "x [B, I], state (zeros when None) -> the next RnnState", py::arg("x"),
          py::arg("state") = py::none())
      .def("project_inputs", &nn::RnnCell::project_inputs, Release(), "x [B, T, I] -> [B, T, G*H]", py::arg("x"))
      .def("step", &nn::RnnCell::step, Release(), "projected input [B, G*H] and a state -> the next state",
           py::arg("projected"), py::arg("state"))
      .def(
          "initial_state",
          [](const nn::RnnCell& cell, int64_t batch, const std::string& dtype) {
            return cell.initial_state(batch, module_dtype(dtype));
          },
          py::arg("batch"), py::arg("dtype") = "float32")
      .def_property_readonly("cell", [](const nn::RnnCell& c) { return nn::cell_name(c.kind()); })
      .def_property_readonly("hidden_size", &nn::RnnCell::hidden)
      .def_readonly("w_ih", &nn::RnnCell::w_ih)
      .def_readonly("b_ih", &nn::RnnCell::b_ih)
      .def_readonly("w_hh", &nn::RnnCell::w_hh)
      .def_readonly("b_hh", &nn::RnnCell::b_hh);
  py::class_<nn::RnnStack, nn::Module, std::shared_ptr<nn::RnnStack>>(
      nn, "RNN", "Stacked recurrent cells unrolled over time: x [B, T, I] -> outputs [B, T, H] and final states")
      .def(py::init([](int64_t input, int64_t hidden, int64_t layers, double dropout, const std::string& cell,
                       py::object seed) {
             Generator scratch;
             return std::make_shared<nn::RnnStack>(nn::parse_cell(cell), input, hidden, layers, dropout,
                                                   generator_arg(seed, scratch));
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("layers") = 1, py::arg("dropout") = 0.0,
           py::arg("cell") = "elman", py::arg("seed") = py::none())
      .def(
          "__call__",
          [](nn::RnnStack& rnn, const Tensor& x, const std::vector<int64_t>& lengths,
             std::optional<std::vector<nn::RnnState>> states, py::object generator) {
            std::vector<nn::RnnState> s = states.value_or(std::vector<nn::RnnState>{});
            Generator scratch;
            Generator& gen = generator_arg(generator, scratch);
            py::gil_scoped_release r;
            Tensor out = rnn.forward(x, lengths, &s, gen);
            return std::make_pair(out, s);
          },
          "x [B, T, I], real lengths per sequence (empty: all T), initial states per layer (None: zeros) -> "
          "(outputs [B, T, H], final states per layer); a padded step carries the state over",
          py::arg("x"), py::arg("lengths") = std::vector<int64_t>{}, py::arg("states") = py::none(),
          py::arg("generator") = py::none())
      .def(
          "step",
          [](nn::RnnStack& rnn, const Tensor& x, std::vector<nn::RnnState> states, py::object generator) {
            Generator scratch;
            Generator& gen = generator_arg(generator, scratch);
            py::gil_scoped_release r;
            Tensor h = rnn.step(x, states, gen);
            return std::make_pair(h, states);
          },
          "one time step of every layer: x [B, I], states -> (top h [B, H], the new states)", py::arg("x"),
          py::arg("states"), py::arg("generator") = py::none())
      .def(
          "initial_states",
          [](const nn::RnnStack& rnn, int64_t batch, const std::string& dtype) {
            return rnn.initial_states(batch, module_dtype(dtype));
          },
          py::arg("batch"), py::arg("dtype") = "float32")
      .def_readonly("cells", &nn::RnnStack::cells)
      .def_property_readonly("cell", [](const nn::RnnStack& s) { return nn::cell_name(s.kind()); });
  bind_one_cell_stack<nn::CellKind::gru>(nn, "GRU", "nn.RNN with GRU cells");
  bind_one_cell_stack<nn::CellKind::lstm>(nn, "LSTM", "nn.RNN with LSTM cells (states carry c)");

  // ---- Transformer pieces (nn/layers.hpp, nn/transformer.hpp, nn/attention.hpp)
  py::class_<nn::Dropout, nn::Module, std::shared_ptr<nn::Dropout>>(nn, "Dropout",
                                                                    "drops with probability p in training mode")
      .def(py::init<double>(), py::arg("p"))
      .def(
          "__call__",
          [](const nn::Dropout& d, const Tensor& x, py::object generator) {
            Generator scratch;
            Generator& gen = generator_arg(generator, scratch);
            py::gil_scoped_release r;
            return d.forward(x, gen);
          },
          py::arg("x"), py::arg("generator") = py::none())
      .def_property_readonly("p", &nn::Dropout::p);
  py::class_<nn::PositionalEncoding, nn::Module, std::shared_ptr<nn::PositionalEncoding>>(
      nn, "PositionalEncoding", "adds sinusoidal, learned or no position encodings to x [B, T, C]")
      .def(py::init([](const std::string& kind, int64_t max_len, int64_t dim, py::object seed,
                       const std::string& dtype) {
             Generator scratch;
             return std::make_shared<nn::PositionalEncoding>(nn::parse_positional(kind), max_len, dim,
                                                             generator_arg(seed, scratch), module_dtype(dtype));
           }),
           py::arg("kind"), py::arg("max_len"), py::arg("dim"), py::arg("seed") = py::none(),
           py::arg("dtype") = "float32")
      .def("__call__", &nn::PositionalEncoding::forward, Release(), "x + the encodings of offset .. offset + T - 1",
           py::arg("x"), py::arg("offset") = 0)
      .def_property_readonly("kind", [](const nn::PositionalEncoding& p) { return nn::positional_name(p.kind()); });
  py::class_<nn::FeedForward, nn::Module, std::shared_ptr<nn::FeedForward>>(
      nn, "FeedForward", "linear2(dropout(activation(linear1(x)))): dim -> hidden -> dim")
      .def(py::init([](int64_t dim, int64_t hidden, const std::string& activation, double dropout, bool bias,
                       py::object seed) {
             Generator scratch;
             return std::make_shared<nn::FeedForward>(dim, hidden, nn::parse_activation(activation), dropout,
                                                      generator_arg(seed, scratch), bias);
           }),
           py::arg("dim"), py::arg("hidden"), py::arg("activation") = "relu", py::arg("dropout") = 0.0,
           py::arg("bias") = true, py::arg("seed") = py::none())
      .def(
          "__call__",
          [](const nn::FeedForward& ff, const Tensor& x, py::object generator) {
            Generator scratch;
            Generator& gen = generator_arg(generator, scratch);
            py::gil_scoped_release r;
            return ff.forward(x, gen);
          },
          py::arg("x"), py::arg("generator") = py::none())
      .def_readonly("linear1", &nn::FeedForward::linear1)
      .def_readonly("linear2", &nn::FeedForward::linear2);
#define TAPEGRAD_LAYER_OPTIONS                                                                              \
  py::arg("dim") = 128, py::arg("heads") = 4, py::arg("ff_dim") = 512, py::arg("dropout") = 0.1,            \
  py::arg("activation") = "relu", py::arg("norm_first") = false, py::arg("bias") = true,                    \
  py::arg("seed") = py::none()
  py::class_<nn::EncoderLayer, nn::Module, std::shared_ptr<nn::EncoderLayer>>(
      nn, "EncoderLayer", "x + SelfAttn(x), then x + FF(x), norms post (the paper's) or pre (norm_first)")
      .def(py::init(&make_layer<nn::EncoderLayer>), TAPEGRAD_LAYER_OPTIONS)
      .def(
          "__call__",
          [](nn::EncoderLayer& layer, const Tensor& x, py::handle src_mask, bool causal, py::object generator) {
            const Tensor mask = tensor_or_undefined(src_mask);
            Generator scratch;
            Generator& gen = generator_arg(generator, scratch);
            py::gil_scoped_release r;
            return layer.forward(x, mask, gen, causal);
          },
          "x [B, S, C], an additive mask (key_padding_mask) or None -> [B, S, C]", py::arg("x"),
          py::arg("src_mask") = py::none(), py::arg("causal") = false, py::arg("generator") = py::none())
      .def_readonly("self_attn", &nn::EncoderLayer::self_attn)
      .def_readonly("ff", &nn::EncoderLayer::ff)
      .def_readonly("norm1", &nn::EncoderLayer::norm1)
      .def_readonly("norm2", &nn::EncoderLayer::norm2);
  py::class_<nn::DecoderLayer, nn::Module, std::shared_ptr<nn::DecoderLayer>>(
      nn, "DecoderLayer", "x + MaskedSelfAttn(x), x + CrossAttn(x, memory), x + FF(x)")
      .def(py::init(&make_layer<nn::DecoderLayer>), TAPEGRAD_LAYER_OPTIONS)
      .def(
          "__call__",
          [](nn::DecoderLayer& layer, const Tensor& x, const Tensor& memory, py::handle tgt_mask,
             py::handle memory_mask, py::object generator) {
            const Tensor tm = tensor_or_undefined(tgt_mask), mm = tensor_or_undefined(memory_mask);
            Generator scratch;
            Generator& gen = generator_arg(generator, scratch);
            py::gil_scoped_release r;
            return layer.forward(x, memory, tm, mm, gen);
          },
          "x [B, T, C] (causal self-attention), memory [B, S, C] -> [B, T, C]", py::arg("x"), py::arg("memory"),
          py::arg("tgt_mask") = py::none(), py::arg("memory_mask") = py::none(), py::arg("generator") = py::none())
      .def_readonly("self_attn", &nn::DecoderLayer::self_attn)
      .def_readonly("cross_attn", &nn::DecoderLayer::cross_attn)
      .def_readonly("ff", &nn::DecoderLayer::ff)
      .def_readonly("norm1", &nn::DecoderLayer::norm1)
      .def_readonly("norm2", &nn::DecoderLayer::norm2)
      .def_readonly("norm3", &nn::DecoderLayer::norm3);
#undef TAPEGRAD_LAYER_OPTIONS
  py::class_<nn::SeqAttention, nn::Module, std::shared_ptr<nn::SeqAttention>>(
      nn, "SeqAttention", "one decoder state over all encoder states (additive, general or dot scores)")
      .def(py::init([](const std::string& score, int64_t query_dim, int64_t key_dim, int64_t attn_dim,
                       py::object seed) {
             Generator scratch;
             return std::make_shared<nn::SeqAttention>(nn::parse_score(score), query_dim, key_dim, attn_dim,
                                                       generator_arg(seed, scratch));
           }),
           py::arg("score"), py::arg("query_dim"), py::arg("key_dim"), py::arg("attn_dim") = 0,
           py::arg("seed") = py::none())
      .def(
          "__call__",
          [](const nn::SeqAttention& a, const Tensor& query, const Tensor& keys, py::handle mask) {
            const Tensor mk = tensor_or_undefined(mask);
            py::gil_scoped_release r;
            Tensor weights;
            Tensor context = a.forward(query, keys, a.precompute(keys), mk, &weights);
            return std::make_pair(context, weights);
          },
          "query [B, Q], keys [B, S, K], an additive mask [B, S] or None -> (context [B, K], weights [B, S])",
          py::arg("query"), py::arg("keys"), py::arg("mask") = py::none())
      .def_property_readonly("score", [](const nn::SeqAttention& a) { return nn::score_name(a.score()); });
  nn.def(
      "key_padding_mask",
      [](const Tensor& ids, const std::string& dtype) { return nn::key_padding_mask(ids, module_dtype(dtype)); },
      "ids [B, S] -> [B, 1, 1, S]: 0 for real tokens, -1e9 for <pad>", py::arg("ids"), py::arg("dtype") = "float32");

  // ---- batches and vocabularies (data.hpp)
  data.attr("PAD") = data::kPad;
  data.attr("BOS") = data::kBos;
  data.attr("EOS") = data::kEos;
  data.attr("UNK") = data::kUnk;
  py::class_<data::Batch>(data, "Batch",
                          "Padded int32 tensors: src [B, S], tgt_in [B, T] (<bos> + target), tgt_out [B, T] "
                          "(target + <eos>)")
      .def(py::init([](const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>& pairs) {
             std::vector<data::Example> examples;
             for (const auto& [src, tgt] : pairs) examples.push_back({src, tgt});
             return data::make_batch(examples);
           }),
           "from (source ids, target ids) pairs, without <bos>/<eos>", py::arg("pairs"))
      .def_static(
          "blocks",
          [](const std::vector<std::vector<int32_t>>& blocks) {
            std::vector<data::Example> examples;
            for (const auto& b : blocks) examples.push_back({{}, b});
            return data::make_block_batch(examples);
          },
          "text blocks of N + 1 ids each -> tgt_in the first N, tgt_out the last N (no source)", py::arg("blocks"))
      .def_readonly("src", &data::Batch::src)
      .def_readonly("tgt_in", &data::Batch::tgt_in)
      .def_readonly("tgt_out", &data::Batch::tgt_out)
      .def_readonly("src_len", &data::Batch::src_len)
      .def_readonly("tgt_len", &data::Batch::tgt_len)
      .def_property_readonly("batch_size", &data::Batch::batch_size)
      .def("target_tokens", &data::Batch::target_tokens)
      .def("padding_fraction", &data::Batch::padding_fraction);
  py::class_<data::Vocab>(data, "Vocab", "token strings <-> ids, the four specials <pad> <bos> <eos> <unk> first")
      .def(py::init([](const std::vector<std::string>& tokens) { return data::Vocab::from_tokens(tokens); }),
           "the specials, then these tokens with ids 4, 5, ...", py::arg("tokens") = std::vector<std::string>{})
      .def("id", &data::Vocab::id, "the token's id (UNK if unknown)", py::arg("token"))
      .def("token", &data::Vocab::token, py::arg("id"))
      .def("encode", &data::Vocab::encode, py::arg("tokens"))
      .def("decode", &data::Vocab::decode, "tokens up to <eos>, without <pad> and <bos>", py::arg("ids"))
      .def_property_readonly("tokens", &data::Vocab::tokens)
      .def("__len__", &data::Vocab::size);

  // ---- models (models/seq2seq.hpp, models/gpt.hpp)
  py::class_<models::ModelConfig> config(
      nn, "ModelConfig", "Everything that fixes a model's architecture (stored in checkpoints as JSON)");
  config.def(py::init([](const py::kwargs& fields) { return config_from(py::none(), fields); }),
             "the defaults with any field set by keyword, validated")
      .def_property(
          "kind", [](const models::ModelConfig& c) { return models::model_name(c.kind); },
          [](models::ModelConfig& c, const std::string& v) { c.kind = models::parse_model(v); },
          "rnn | attention-rnn | transformer | gpt")
      .def_readwrite("vocab_size", &models::ModelConfig::vocab_size)
      .def_readwrite("d_model", &models::ModelConfig::d_model)
      .def_readwrite("layers", &models::ModelConfig::layers)
      .def_readwrite("dropout", &models::ModelConfig::dropout)
      .def_readwrite("heads", &models::ModelConfig::heads)
      .def_readwrite("d_ff", &models::ModelConfig::d_ff)
      .def_property(
          "positional", [](const models::ModelConfig& c) { return nn::positional_name(c.positional); },
          [](models::ModelConfig& c, const std::string& v) { c.positional = nn::parse_positional(v); },
          "sinusoidal | learned | none")
      .def_readwrite("norm_first", &models::ModelConfig::norm_first)
      .def_property(
          "activation", [](const models::ModelConfig& c) { return nn::activation_name(c.activation); },
          [](models::ModelConfig& c, const std::string& v) { c.activation = nn::parse_activation(v); },
          "relu | gelu-tanh | gelu-exact")
      .def_readwrite("max_len", &models::ModelConfig::max_len)
      .def_readwrite("tie_embeddings", &models::ModelConfig::tie_embeddings)
      .def_property(
          "cell", [](const models::ModelConfig& c) { return nn::cell_name(c.cell); },
          [](models::ModelConfig& c, const std::string& v) { c.cell = nn::parse_cell(v); }, "elman | gru | lstm")
      .def_readwrite("hidden", &models::ModelConfig::hidden)
      .def_property(
          "score", [](const models::ModelConfig& c) { return nn::score_name(c.score); },
          [](models::ModelConfig& c, const std::string& v) { c.score = nn::parse_score(v); },
          "additive | general | dot")
      .def_readwrite("checkpoint_layers", &models::ModelConfig::checkpoint_layers)
      .def("to_json", &models::ModelConfig::to_json)
      .def_static("from_json", &models::ModelConfig::from_json, py::arg("json"))
      .def(
          "validate", [](const models::ModelConfig& c) { c.validate(); }, "throws Error naming a bad field")
      .def(
          "parameter_count",
          [](const models::ModelConfig& c) { return models::parameter_count(c, models::ConfigNames::json); },
          "the parameters make_model would build, in closed form")
      .def("__repr__", [](const models::ModelConfig& c) { return "ModelConfig(" + c.to_json() + ")"; });

  py::class_<models::Seq2Seq, nn::Module, std::shared_ptr<models::Seq2Seq>>(
      nn, "Seq2Seq",
      "An encoder-decoder (kind rnn, attention-rnn or transformer): teacher-forced loss, greedy decoding, "
      "beam search. Seq2Seq(config=None, seed=1, **ModelConfig fields)")
      .def(py::init([](py::handle config, uint64_t seed, const py::kwargs& fields) {
             const models::ModelConfig c = config_from(config, fields);
             if (c.kind == models::ModelKind::gpt)
               throw Error("nn.Seq2Seq: kind gpt is the decoder-only model: build it with nn.GPT or nn.make_model");
             return std::shared_ptr<models::Seq2Seq>(models::make_model(c, seed));
           }),
           py::arg("config") = py::none(), py::arg("seed") = 1)
      .def("logits", &models::Seq2Seq::logits, Release(), "teacher-forced logits [B, T, V] of a data.Batch",
           py::arg("batch"))
      .def("loss", &models::Seq2Seq::loss, Release(), "mean cross-entropy over the non-pad target tokens",
           py::arg("batch"), py::arg("label_smoothing") = 0.0)
      .def("encoder_states", &models::Seq2Seq::encoder_states, Release(), "src [B, S], real lengths -> [B, S, C]",
           py::arg("src"), py::arg("src_len"))
      .def("greedy_decode", &models::Seq2Seq::greedy_decode, Release(),
           "src [B, S], real lengths -> up to max_len ids each, stopping at <eos> (which is dropped)",
           py::arg("src"), py::arg("src_len"), py::arg("max_len"))
      .def("beam_search", &models::Seq2Seq::beam_search, Release(),
           "the best hypothesis for one source (ids), ranked by log P / max(|y|, 1)^alpha", py::arg("src"),
           py::arg("beam") = 4, py::arg("max_len") = 64, py::arg("alpha") = 0.6)
      .def("next_token_log_probs", &models::Seq2Seq::next_token_log_probs, Release(),
           "[N, V] for prefixes (one length, starting with <bos>) of one source", py::arg("src"), py::arg("prefixes"))
      .def("keep_attention", &models::Seq2Seq::keep_attention, "keep the next forward's attention maps",
           py::arg("on") = true)
      .def("attention_maps", &models::Seq2Seq::attention_maps, "[(name, [B, Tq, Tk])] averaged over heads")
      .def("attention_head_maps", &models::Seq2Seq::attention_head_maps, "[(name, [B, H, Tq, Tk])]")
      .def_property_readonly("config", &models::Seq2Seq::config)
      .def_property_readonly(
          "generator", [](models::Seq2Seq& m) -> Generator& { return m.generator(); },
          py::return_value_policy::reference_internal, "the model's dropout generator (saved in checkpoints)");
  nn.def(
      "make_model",
      [](py::handle config, uint64_t seed, const py::kwargs& fields) {
        return model_object(models::make_model(config_from(config, fields), seed));
      },
      "the model a ModelConfig (or its fields as keywords) describes, weights drawn from seed: an nn.Seq2Seq, "
      "or an nn.GPT for kind gpt",
      py::arg("config") = py::none(), py::arg("seed") = 1);
  py::class_<models::Gpt, models::Seq2Seq, std::shared_ptr<models::Gpt>>(
      nn, "GPT", "The decoder-only Transformer: ids [B, T] -> logits [B, T, V]")
      .def(py::init([](int64_t vocab_size, int64_t d_model, int64_t layers, int64_t heads, int64_t d_ff,
                       int64_t block_size, double dropout, const std::string& activation, bool norm_first,
                       uint64_t seed) {
             models::ModelConfig c;
             c.kind = models::ModelKind::gpt;
             c.vocab_size = vocab_size;
             c.d_model = d_model;
             c.layers = layers;
             c.heads = heads;
             c.d_ff = d_ff;
             c.max_len = block_size;
             c.dropout = dropout;
             c.activation = nn::parse_activation(activation);
             c.norm_first = norm_first;
             c.validate();
             return std::make_shared<models::Gpt>(c, seed);
           }),
           py::arg("vocab_size"), py::arg("d_model") = 128, py::arg("layers") = 2, py::arg("heads") = 4,
           py::arg("d_ff") = 512, py::arg("block_size") = 128, py::arg("dropout") = 0.0,
           py::arg("activation") = "gelu-tanh", py::arg("norm_first") = true, py::arg("seed") = 0)
      .def(
          "__call__", [](models::Gpt& g, const Tensor& ids) { return g.forward(ids); }, Release(),
          py::arg("ids"))
      .def_property_readonly("block_size", &models::Gpt::block_size)
      .def(
          "generate",
          [](models::Gpt& g, const std::vector<int32_t>& prompt, int64_t max_new_tokens, double temperature,
             int64_t top_k, uint64_t seed, bool use_cache) {
            return models::generate(g, prompt,
                                    {.max_new_tokens = max_new_tokens,
                                     .temperature = temperature,
                                     .top_k = top_k,
                                     .seed = seed,
                                     .use_cache = use_cache});
          },
          Release(), "the prompt's ids followed by max_new_tokens sampled ones (temperature 0: greedy)",
          py::arg("prompt"), py::arg("max_new_tokens") = 100, py::arg("temperature") = 1.0,
          py::arg("top_k") = 0, py::arg("seed") = 1, py::arg("use_cache") = true);

  // ---- training steps (train/step.hpp, train.hpp)
  py::class_<train::StepRecipe>(train, "StepRecipe", "What a step needs besides the parameters, optimizer and loss")
      .def(py::init([](double lr, const std::string& schedule, int64_t warmup, int64_t total_steps, double clip_norm,
                       double label_smoothing, double min_lr_ratio) {
             return train::StepRecipe{.lr = lr,
                                      .schedule = optim::parse_schedule(schedule),
                                      .warmup = warmup,
                                      .total_steps = total_steps,
                                      .clip_norm = clip_norm,
                                      .label_smoothing = label_smoothing,
                                      .min_lr_ratio = min_lr_ratio};
           }),
           py::arg("lr") = 1e-3, py::arg("schedule") = "constant", py::arg("warmup") = 0, py::arg("total_steps") = 0,
           py::arg("clip_norm") = 0.0, py::arg("label_smoothing") = 0.0, py::arg("min_lr_ratio") = 0.0)
      .def_readwrite("lr", &train::StepRecipe::lr)
      .def_property(
          "schedule", [](const train::StepRecipe& r) { return optim::schedule_name(r.schedule); },
          [](train::StepRecipe& r, const std::string& s) { r.schedule = optim::parse_schedule(s); })
      .def_readwrite("warmup", &train::StepRecipe::warmup)
      .def_readwrite("total_steps", &train::StepRecipe::total_steps)
      .def_readwrite("clip_norm", &train::StepRecipe::clip_norm)
      .def_readwrite("label_smoothing", &train::StepRecipe::label_smoothing)
      .def_readwrite("min_lr_ratio", &train::StepRecipe::min_lr_ratio);
  py::class_<train::StepResult>(train, "StepResult", "What a training step measured")
      .def_readonly("step", &train::StepResult::step)
      .def_readonly("loss", &train::StepResult::loss)
      .def_readonly("lr", &train::StepResult::lr)
      .def_readonly("grad_norm", &train::StepResult::grad_norm, "global L2 norm before clipping")
      .def_readonly("tokens", &train::StepResult::tokens)
      .def_readonly("seconds", &train::StepResult::seconds)
      .def_readonly("forward_seconds", &train::StepResult::forward_seconds)
      .def_readonly("backward_seconds", &train::StepResult::backward_seconds)
      .def_readonly("update_seconds", &train::StepResult::update_seconds);
  train.def(
      "train_step",
      [](models::Seq2Seq& model, optim::Optimizer& optimizer, const train::StepRecipe& recipe,
         const data::Batch& batch, int64_t step) {
        py::gil_scoped_release r;
        return train::train_step(model, optimizer, recipe, batch, step);
      },
      "step `step` (1-based) on a seq2seq batch: model.loss(batch, recipe.label_smoothing)", py::arg("model"),
      py::arg("optimizer"), py::arg("recipe"), py::arg("batch"), py::arg("step"));
  train.def(
      "train_step",
      [](const nn::Module& module, optim::Optimizer& optimizer, const train::StepRecipe& recipe,
         const py::function& loss, int64_t step) {
        // The C++ step runs without the GIL and takes it back only to call the Python loss. The
        // callable is held through hold() so that copies of the closure need no GIL.
        const PyRef fn = hold(loss);
        const train::LossFn loss_fn = [fn] {
          py::gil_scoped_acquire gil;
          return to_tensor((*fn)());
        };
        py::gil_scoped_release r;
        return train::train_step(module, optimizer, recipe, loss_fn, step);
      },
      "the trainer's step on any module: sets the lr of 1-based `step` from the recipe's schedule, calls "
      "loss() (a Python callable returning the scalar loss), backward, refuses a non-finite loss or gradient "
      "(NonFiniteError, parameters untouched), clips, updates and zeroes the gradients",
      py::arg("module"), py::arg("optimizer"), py::arg("recipe"), py::arg("loss"), py::arg("step"));

  // ---- checkpoints written by `tapegrad train`
  py::class_<Checkpoint>(train, "Checkpoint",
                         "A checkpoint loaded for inference: the model (eval mode), its vocabulary and "
                         "tokenizer, and the options it was trained with")
      .def_property_readonly("model", [](const Checkpoint& c) { return model_object(c.model); })
      .def_readonly("vocab", &Checkpoint::vocab)
      .def_readonly("step", &Checkpoint::step)
      .def_readonly("optimizer_path", &Checkpoint::optimizer_path)
      .def_property_readonly("config", [](const Checkpoint& c) { return c.model->config(); })
      .def_property_readonly(
          "options",
          [](const Checkpoint& c) { return py::module_::import("json").attr("loads")(c.options.to_json()); },
          "the training options as the checkpoint stores them (a dict)")
      .def_property_readonly("tokenization",
                             [](const Checkpoint& c) { return data::tokenization_name(c.tokenizer->kind()); })
      .def(
          "tokenize",
          [](const Checkpoint& c, const std::string& text, const std::string& side) {
            return c.tokenizer->tokenize(text, parse_side(side));
          },
          py::arg("text"), py::arg("side") = "source")
      .def(
          "detokenize",
          [](const Checkpoint& c, const std::vector<std::string>& tokens, const std::string& side) {
            return c.tokenizer->detokenize(tokens, parse_side(side));
          },
          py::arg("tokens"), py::arg("side") = "target")
      .def(
          "encode",
          [](const Checkpoint& c, const std::string& text, const std::string& side) {
            return c.vocab.encode(c.tokenizer->tokenize(text, parse_side(side)));
          },
          "text -> ids of the checkpoint's vocabulary (unknown tokens become UNK)", py::arg("text"),
          py::arg("side") = "source")
      .def(
          "decode",
          [](const Checkpoint& c, const std::vector<int32_t>& ids, const std::string& side) {
            return c.tokenizer->detokenize(c.vocab.decode(ids), parse_side(side));
          },
          "ids (up to <eos>) -> text", py::arg("ids"), py::arg("side") = "target");
  train.def(
      "load_checkpoint",
      [](const std::string& dir) {
        train::LoadedModel m = [&] {
          py::gil_scoped_release r;
          return train::load_checkpoint(dir);
        }();
        return Checkpoint{std::shared_ptr<models::Seq2Seq>(std::move(m.model)), std::move(m.vocab),
                          std::move(m.tokenizer), std::move(m.options), m.step, std::move(m.optimizer_path)};
      },
      "a run directory of `tapegrad train` (or a directory with its two files) -> train.Checkpoint",
      py::arg("dir"));
}

}  // namespace tapegrad::python
