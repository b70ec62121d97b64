// Example: your own module. A character-level language model, written as a user-defined nn::Module
// (an embedding, a GRU and a linear head from the library's layers), trained with the library's
// train_step on its own loss: Adam, gradient clipping by global norm, and a warm-up + cosine
// learning-rate schedule.
//
// It reads text one character at a time and learns to predict the next one. By default the text is
// the few paragraphs built in below (about 3,800 characters); `--text FILE` trains on any text file
// instead, e.g. /usr/share/common-licenses/GPL-3, which every Debian system ships (package
// base-files). The last tenth of the text is held out: the model never trains on it, and its
// perplexity there (exp of the mean cross-entropy, "as unsure as a uniform choice among this many
// characters") says whether the model learned the language or just the training text.
// At the end it samples new text from the model, one character at a time, with a temperature.
//
//   build/examples/char_lm          (250 steps, about a second)
//   build/examples/char_lm --steps 1500 --hidden 128 --text /usr/share/common-licenses/GPL-3
//
// A model this small gains nothing from a second thread; on a busy machine TAPEGRAD_THREADS=1 is
// faster (the longer run above takes about 20 s on one core).
//
// Options: --steps N, --hidden H, --text FILE, --temperature T, --length N (characters to sample),
// --seed S. Exits 1 when the held-out perplexity did not at least halve, 2 on a bad option or an
// unreadable or too short text.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tapegrad/nn/layers.hpp>
#include <tapegrad/nn/rnn.hpp>
#include <tapegrad/optim.hpp>
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/train/step.hpp>
#include <vector>

using namespace tapegrad;

namespace {

const char* const kBuiltinText =
    "A neural network is a function with many knobs. We show it an example, it makes a guess, and we "
    "measure how wrong the guess was with a single number, the loss. Training is the art of turning "
    "every knob a little in the direction that makes the loss smaller.\n"
    "To know which way to turn a knob we need the derivative of the loss with respect to it. The chain "
    "rule gives it to us: the derivative of a composition is the product of the derivatives of its "
    "parts. Backpropagation is the chain rule applied in the right order, from the loss back to the "
    "knobs, so that each partial result is computed once and used by everything that needs it.\n"
    "A tape makes this easy. While the network runs forward, every operation writes one line on the "
    "tape: what it did, what it read, what it wrote, and how to pass a gradient back through it. When "
    "the forward pass is done, we read the tape from the last line to the first. Each line takes the "
    "gradient of its output and hands a share of it to each of its inputs. A value that was used twice "
    "receives two shares, and they add up.\n"
    "The tape does not care what the network is. It may be a stack of layers, a loop over the letters "
    "of a sentence, or a function you wrote this morning. As long as every step can say how to pass a "
    "gradient back, the whole program can be trained.\n"
    "A recurrent network reads a sentence one letter at a time. It keeps a small memory, a vector of "
    "numbers, and at every letter it mixes the letter into the memory and forgets a little of what it "
    "held. From the memory it guesses the next letter. At first the guesses are no better than chance. "
    "After a few hundred steps it knows that a space follows a word, that the letter q is followed by "
    "u, and that the word the is everywhere. After many more it can write whole words of its own.\n"
    "Checking a gradient is simple and worth the time. Nudge one knob up by a tiny amount, nudge it "
    "down, and see how the loss changes. The difference, divided by the size of the nudge, should match "
    "the derivative the tape computed. If it does not, the backward pass has a bug, and no amount of "
    "training will find it for you.\n"
    "When the loss stops falling, look at the learning rate first. Too large and the knobs jump past "
    "the valley; too small and they crawl. A short warm-up lets the early, noisy gradients settle, and "
    "a slow decay at the end lets the network rest in the bottom of the valley. Clipping the gradient "
    "keeps a single bad step from undoing the work of many good ones.\n"
    "A model that does well on the text it trained on has not yet shown that it learned anything. It "
    "may have memorised the text, letter by letter, the way a child can recite a poem without knowing "
    "what the words mean. To find out, we keep a part of the text aside and never train on it. If the "
    "loss on that part falls too, the model has learned something general: how words are spelled, "
    "which letters follow which, where the spaces go. If the loss on the training text keeps falling "
    "while the loss on the held-out part starts to rise, the model has begun to memorise, and it is "
    "time to stop, to make the model smaller, or to give it more text to read.\n"
    "The numbers a network learns are not stored in any one place. Each weight does a little of the "
    "work, and each example moves many weights by a little. That is why the gradient must be right for "
    "every weight at once, and why a small error in one backward pass can spread through the whole "
    "network before anyone notices. Write the forward pass, write the backward pass beside it, and "
    "check one against the other before you trust either.\n";

// Command-line options, with the defaults the test suite runs.
struct Options {
  int steps = 250, hidden = 64, length = 300;
  double temperature = 0.8;
  uint64_t seed = 1;
  std::string text_file;  // empty: the built-in text
};

// "--name value" pairs; returns false (after saying why) on anything else.
bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    if (i + 1 >= argc) return std::fprintf(stderr, "char_lm: option %s needs a value\n", name.c_str()), false;
    const std::string value = argv[++i];
    try {
      if (name == "--steps")
        o.steps = std::stoi(value);
      else if (name == "--hidden")
        o.hidden = std::stoi(value);
      else if (name == "--length")
        o.length = std::stoi(value);
      else if (name == "--temperature")
        o.temperature = std::stod(value);
      else if (name == "--seed")
        o.seed = std::stoull(value);
      else if (name == "--text")
        o.text_file = value;
      else
        return std::fprintf(stderr, "char_lm: unknown option %s\n", name.c_str()), false;
    } catch (const std::exception&) {
      return std::fprintf(stderr, "char_lm: option %s: not a number: %s\n", name.c_str(), value.c_str()),
             false;
    }
  }
  if (o.steps < 1 || o.hidden < 1 || o.length < 0 || !(o.temperature > 0))
    return std::fprintf(stderr,
                        "char_lm: --steps and --hidden must be >= 1, --length >= 0, --temperature > 0\n"),
           false;
  return true;
}

// The characters of the text, each mapped to an id 0 .. V-1 in sorted order.
struct Vocabulary {
  std::string chars;  // id -> character
  explicit Vocabulary(const std::string& text) : chars(text) {
    std::sort(chars.begin(), chars.end());
    chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  }
  int32_t id(char c) const {
    return int32_t(std::lower_bound(chars.begin(), chars.end(), c) - chars.begin());
  }
  bool contains(char c) const { return std::binary_search(chars.begin(), chars.end(), c); }
  int64_t size() const { return int64_t(chars.size()); }
};

// The model: ids [B, T] -> logits [B, T, V] for the character after each position.
//   embedding: each character id becomes a learned vector of 32 numbers;
//   GRU: a recurrent layer that reads those vectors in order, keeping a memory h [B, hidden];
//   head: a linear layer turning each step's memory into one score (logit) per character.
// Everything registered with register_module becomes part of named_parameters(), which is what the
// optimizer updates ("embed.weight", "rnn.cells.0.w_ih", "head.weight", ...).
class CharLM : public nn::Module {
 public:
  CharLM(int64_t vocab, int64_t hidden, Generator& gen)
      : embed(register_module("embed", std::make_shared<nn::Embedding>(vocab, 32, gen))),
        rnn(register_module("rnn",
                            std::make_shared<nn::RnnStack>(nn::CellKind::gru, 32, hidden, 1, 0.0, gen))),
        head(register_module("head", std::make_shared<nn::Linear>(hidden, vocab, gen))) {}

  // The whole sequence at once (training and evaluation): backward runs through every time step.
  Tensor forward(const Tensor& ids, Generator& gen) const {
    const Tensor h = rnn->forward(embed->forward(ids), /*lengths=*/{}, /*states=*/nullptr, gen);  // [B, T, H]
    return head->forward(h);
  }

  // One character at a time (sampling): id [1] and the GRU's state -> logits [1, V].
  Tensor step(int32_t id, std::vector<nn::RnnState>& state, Generator& gen) const {
    return head->forward(rnn->step(embed->forward(Tensor::from_ids({id}, {1})), state, gen));
  }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::RnnStack> rnn;
  std::shared_ptr<nn::Linear> head;
};

// A batch of `batch` windows of `len` characters starting at random places in ids[begin, end):
// inputs [batch, len] and targets [batch, len], the same characters shifted by one.
std::pair<Tensor, Tensor> random_batch(const std::vector<int32_t>& ids, size_t begin, size_t end, int batch,
                                       int len, Generator& gen) {
  std::vector<int32_t> x, y;
  for (int b = 0; b < batch; ++b) {
    const size_t start = begin + size_t(gen.uniform() * double(end - begin - size_t(len) - 1));
    x.insert(x.end(), ids.begin() + long(start), ids.begin() + long(start) + len);
    y.insert(y.end(), ids.begin() + long(start) + 1, ids.begin() + long(start) + len + 1);
  }
  return {Tensor::from_ids(x, {batch, len}), Tensor::from_ids(y, {batch, len})};
}

// Mean cross-entropy over the held-out text ids[begin, end), read as consecutive windows, without
// recording anything on the tape.
double held_out_loss(CharLM& model, const std::vector<int32_t>& ids, size_t begin, size_t end, int len,
                     Generator& gen) {
  NoGrad no_grad;
  model.eval();
  const int windows = int((end - begin - 1) / size_t(len));
  std::vector<int32_t> x, y;
  for (int w = 0; w < windows; ++w) {
    const size_t start = begin + size_t(w) * size_t(len);
    x.insert(x.end(), ids.begin() + long(start), ids.begin() + long(start) + len);
    y.insert(y.end(), ids.begin() + long(start) + 1, ids.begin() + long(start) + len + 1);
  }
  const double loss = cross_entropy(model.forward(Tensor::from_ids(x, {windows, len}), gen),
                                    Tensor::from_ids(y, {windows, len}))
                          .item();
  model.train();
  return loss;
}

// Draws a character id from softmax(logits / temperature): a low temperature sharpens the distribution
// toward the likeliest character, a high one flattens it toward uniform.
int32_t sample(const Tensor& logits, double temperature, Generator& gen) {
  const std::vector<double> p = softmax(mul(logits, 1.0 / temperature)).to_vector();
  double u = gen.uniform();
  for (size_t i = 0; i < p.size(); ++i)
    if ((u -= p[i]) < 0) return int32_t(i);
  return int32_t(p.size() - 1);
}

}  // namespace

int train_and_sample(int argc, char** argv) {
  Options opt;
  if (!parse_options(argc, argv, opt)) return 2;
  std::string text = kBuiltinText;
  if (!opt.text_file.empty()) {
    std::ifstream in(opt.text_file, std::ios::binary);
    if (!in) return std::fprintf(stderr, "char_lm: cannot read --text %s\n", opt.text_file.c_str()), 2;
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  constexpr int kBatch = 16, kLen = 64;  // 16 windows of 64 characters per step
  if (text.size() < 20 * kLen)
    return std::fprintf(stderr, "char_lm: the text needs at least %d characters\n", 20 * kLen), 2;

  const Vocabulary vocab(text);
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(vocab.id(c));
  const size_t split = ids.size() * 9 / 10;  // [0, split) trains, [split, end) is held out

  Generator gen(opt.seed);
  CharLM model(vocab.size(), opt.hidden, gen);
  optim::Adam optimizer(model.named_parameters(), {.lr = 0.0});  // the recipe sets the rate at every step
  // Warm up linearly over the first 5% of the steps, then follow a cosine down to a tenth; rescale
  // the gradients whenever their global norm is above 1.
  const train::StepRecipe recipe{.lr = 0.01,
                                 .schedule = optim::Schedule::cosine,
                                 .warmup = std::max(1, opt.steps / 20),
                                 .total_steps = opt.steps,
                                 .clip_norm = 1.0,
                                 .min_lr_ratio = 0.1};
  std::printf("text: %s, %zu characters (%zu train, %zu held out), %lld distinct\n",
              opt.text_file.empty() ? "built-in" : opt.text_file.c_str(), ids.size(), split,
              ids.size() - split, (long long)vocab.size());
  std::printf("model: embedding 32, GRU %d, linear head; %lld parameters; %d steps of %d x %d characters\n",
              opt.hidden, (long long)model.parameter_count(), opt.steps, kBatch, kLen);
  std::printf("a model that knows nothing has perplexity %lld (a uniform guess among the characters)\n",
              (long long)vocab.size());

  const double first_held_out = held_out_loss(model, ids, split, ids.size(), kLen, gen);
  std::printf("step    0  held-out loss %.3f  perplexity %.2f\n", first_held_out, std::exp(first_held_out));
  double last_held_out = first_held_out, first_loss = 0, loss = 0;
  for (int step = 1; step <= opt.steps; ++step) {
    // train_step sets the step's learning rate, calls the loss below (the forward pass), runs
    // backward (every parameter's .grad), clips, lets Adam update and zeroes the gradients.
    const train::StepResult r = train::train_step(
        model, optimizer, recipe,
        [&] {
          const auto [x, y] = random_batch(ids, 0, split, kBatch, kLen, gen);
          return cross_entropy(model.forward(x, gen), y);
        },
        step);
    loss = r.loss;
    if (step == 1) first_loss = loss;
    if (step == 1 || step % 25 == 0 || step == opt.steps) {
      last_held_out = held_out_loss(model, ids, split, ids.size(), kLen, gen);
      std::printf(
          "step %4d  lr %.4f  grad norm %5.2f  train loss %.3f  perplexity %5.2f  |  held-out loss %.3f  "
          "perplexity %5.2f\n",
          step, r.lr, r.grad_norm, loss, std::exp(loss), last_held_out, std::exp(last_held_out));
      std::fflush(stdout);
    }
  }
  std::printf("train loss %.3f -> %.3f; held-out perplexity %.2f -> %.2f\n", first_loss, loss,
              std::exp(first_held_out), std::exp(last_held_out));

  // Sampling: feed a prompt to build up the GRU's memory, then repeatedly draw the next character
  // from the model's prediction and feed it back in.
  {
    NoGrad no_grad;
    model.eval();
    std::string prompt = "The ";  // or, for a text without these characters, its first character
    if (!std::all_of(prompt.begin(), prompt.end(), [&](char c) { return vocab.contains(c); }))
      prompt = text.substr(0, 1);
    std::vector<nn::RnnState> state = model.rnn->initial_states(1, DType::f32);
    Tensor logits;
    for (char c : prompt) logits = model.step(vocab.id(c), state, gen);
    std::string out = prompt;
    for (int i = 0; i < opt.length; ++i) {
      const int32_t next = sample(logits, opt.temperature, gen);
      out += vocab.chars[size_t(next)];
      logits = model.step(next, state, gen);
    }
    std::printf("sample (temperature %.2f):\n---\n%s\n---\n", opt.temperature, out.c_str());
  }
  if (std::exp(last_held_out) > 0.5 * std::exp(first_held_out)) {
    std::printf("FAILED: the held-out perplexity did not halve\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return train_and_sample(argc, argv);
  } catch (const Error& e) {  // the library reports bad input (a shape, a value) with one clear line
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 2;
  }
}
