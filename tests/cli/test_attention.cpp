// `tapegrad attention` as a real process on tiny trained checkpoints: --heads each draws one panel per
// head (same height, wider PNG), the per-head weights average to the mean map, rows are the decoded
// output + <eos> and columns the source or the decoder's prefix (causal), --layer keeps one layer and
// refuses an out-of-range one with exit 2; the attention RNN's single head. Plus the model-side
// accessors: per-head maps [B, H, Tq, Tk] only while keep_attention is on, averaging to attention_maps.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "process.hpp"
#include "tapegrad/models/seq2seq.hpp"
#include "tapegrad/tapegrad.hpp"

namespace fs = std::filesystem;
using tapegrad::test::Run;
using tapegrad::test::png_size;
using tapegrad::test::run;

namespace {


// A checkpoint trained once per test process, removed at exit.
struct Checkpoint {
  std::string dir;
  explicit Checkpoint(const std::string& model) : dir(tapegrad::test::temp_dir("attention", model)) {
    const Run t =
        run("train --model " + model +
            " --task reverse --min-len 3 --max-len 5 --d-model 16 --heads 2 --d-ff 32 --hidden 16 "
            "--layers 2 --steps 30 --threads 1 --batch-size 8 --valid-size 10 --eval-every 0 --out " +
            dir);
    INFO(t.out);
    REQUIRE(t.code == 0);
  }
  ~Checkpoint() { fs::remove_all(dir); }
};

const std::string& transformer() {
  static Checkpoint c("transformer");
  return c.dir;
}

const std::string& attention_rnn() {
  static Checkpoint c("attention-rnn");
  return c.dir;
}

// One panel of the text output: its title, row labels and (with --values) its weights.
struct TextPanel {
  std::string title;
  std::vector<std::string> rows;
  std::vector<std::vector<double>> values;
};

std::vector<TextPanel> parse_panels(const std::string& out) {
  std::vector<TextPanel> panels;
  std::istringstream in(out);
  bool in_values = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("layer ", 0) == 0 || line.rfind("decoder attention", 0) == 0) {
      panels.push_back({line, {}, {}});
      in_values = false;
    } else if (line == "  values:") {
      in_values = true;
    } else if (line.empty()) {
      in_values = false;
    } else if (in_values) {
      std::istringstream row(line);
      std::string label;
      row >> label;
      std::vector<double> v;
      for (double x; row >> x;) v.push_back(x);
      panels.back().rows.push_back(label);
      panels.back().values.push_back(v);
    }
  }
  return panels;
}

// The text after "output: " on its line.
std::string output_line(const std::string& out) {
  const size_t at = out.find("output: ");
  REQUIRE(at != std::string::npos);
  return out.substr(at + 8, out.find('\n', at) - at - 8);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Printed with 4 decimals: each printed value is within 5e-5 of the true one, so a mean of two
// printed heads and the printed mean differ by at most 3 * 5e-5 (plus float noise).
constexpr double kPrinted = 1.5e-4 + 1e-7;

}  // namespace

TEST_CASE("attention --heads each: one panel per head, a wider PNG of the same height", "[cli][attention]") {
  const std::string dir = transformer();
  const Run mean = run("attention --checkpoint " + dir + " --out " + dir + "/mean.png abcd");
  INFO(mean.out);
  REQUIRE(mean.code == 0);
  const Run each = run("attention --checkpoint " + dir + " --heads each --out " + dir + "/each.png abcd");
  INFO(each.out);
  REQUIRE(each.code == 0);
  // 2 layers x (encoder self, decoder self, cross), averaged or 2 heads each.
  CHECK(parse_panels(mean.out).size() == 6);
  CHECK(count(mean.out, "mean of 2 heads") == 6);
  CHECK(parse_panels(each.out).size() == 12);
  CHECK(count(each.out, ", head 0 of 2") == 6);
  CHECK(count(each.out, ", head 1 of 2") == 6);
  for (const std::string kind : {"encoder self-attention", "decoder self-attention", "cross-attention"})
    CHECK(count(each.out, "layer 1 " + kind + ", head 1 of 2") == 1);
  CHECK_THAT(mean.out, Catch::Contains("scale: ") && Catch::Contains("'@'=0.9-1"));
  const auto [mean_w, mean_h] = png_size(dir + "/mean.png");
  const auto [each_w, each_h] = png_size(dir + "/each.png");
  CHECK(mean_w > 0);
  CHECK(each_h == mean_h);  // the heads of one attention sit side by side
  CHECK(each_w > mean_w);
}

TEST_CASE(
    "attention: rows are the decoded output + <eos>, columns the source or the causal prefix; "
    "per-head weights average to the mean map",
    "[cli][attention]") {
  const std::string dir = transformer();
  const Run mean = run("attention --checkpoint " + dir + " --values --out " + dir + "/v.png abcd");
  const Run each =
      run("attention --checkpoint " + dir + " --values --heads each --out " + dir + "/v.png abcd");
  INFO(mean.out);
  INFO(each.out);
  REQUIRE(mean.code == 0);
  REQUIRE(each.code == 0);
  const std::string output = output_line(mean.out);
  std::vector<std::string> out_rows;
  for (char c : output) out_rows.push_back(std::string(1, c));
  out_rows.push_back("$");
  const std::vector<std::string> src_rows{"a", "b", "c", "d"};

  const std::vector<TextPanel> means = parse_panels(mean.out), heads = parse_panels(each.out);
  REQUIRE(means.size() == 6);
  REQUIRE(heads.size() == 2 * means.size());
  for (size_t p = 0; p < means.size(); ++p) {
    const TextPanel &m = means[p], &h0 = heads[2 * p], &h1 = heads[2 * p + 1];
    CAPTURE(m.title, h0.title, h1.title);
    const bool encoder = m.title.find("encoder") != std::string::npos;
    const bool decoder_self = m.title.find("decoder self") != std::string::npos;
    const size_t cols = encoder ? src_rows.size() : (decoder_self ? out_rows.size() : src_rows.size());
    CHECK(m.rows == (encoder ? src_rows : out_rows));
    CHECK(h0.rows == m.rows);
    CHECK(h1.rows == m.rows);
    REQUIRE(m.values.size() == m.rows.size());
    for (size_t r = 0; r < m.rows.size(); ++r) {
      CAPTURE(r);
      REQUIRE(m.values[r].size() == cols);
      REQUIRE(h0.values[r].size() == cols);
      REQUIRE(h1.values[r].size() == cols);
      double sum = 0;
      for (size_t c = 0; c < cols; ++c) {
        CAPTURE(c);
        CHECK(std::abs((h0.values[r][c] + h1.values[r][c]) / 2 - m.values[r][c]) <= kPrinted);
        if (decoder_self && c > r) CHECK(h0.values[r][c] == 0.0);  // query t sees <bos> and tokens < t only
        sum += m.values[r][c];
      }
      CHECK(std::abs(sum - 1) <= double(cols) * 5e-5 + 1e-7);  // a softmax row
    }
  }
}

TEST_CASE("attention --layer keeps one layer; out of range exits 2 naming --layer and the range",
          "[cli][attention]") {
  const std::string dir = transformer();
  const Run all = run("attention --checkpoint " + dir + " --out " + dir + "/all.png abcd");
  const Run one =
      run("attention --checkpoint " + dir + " --layer 1 --heads each --out " + dir + "/one.png abcd");
  INFO(one.out);
  REQUIRE(all.code == 0);
  REQUIRE(one.code == 0);
  const std::vector<TextPanel> panels = parse_panels(one.out);
  CHECK(panels.size() == 6);  // encoder self, decoder self, cross: 2 heads each
  for (const TextPanel& p : panels) CHECK(p.title.rfind("layer 1 ", 0) == 0);
  CHECK(png_size(dir + "/one.png").second < png_size(dir + "/all.png").second);
  for (const std::string bad : {"5", "2", "-1"}) {
    const Run r =
        run("attention --checkpoint " + dir + " --layer " + bad + " --out " + dir + "/bad.png abcd");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("--layer " + bad) && Catch::Contains("[0, 1]"));
  }
  const Run heads = run("attention --checkpoint " + dir + " --heads some --out " + dir + "/bad.png abcd");
  CHECK(heads.code == 2);
  CHECK_THAT(heads.out, Catch::Contains("--heads"));
}

TEST_CASE("attention on the attention RNN: one head, so each equals mean and says so", "[cli][attention]") {
  const std::string dir = attention_rnn();
  const Run mean = run("attention --checkpoint " + dir + " --values --out " + dir + "/mean.png abcd");
  const Run each =
      run("attention --checkpoint " + dir + " --values --heads each --out " + dir + "/each.png abcd");
  INFO(mean.out);
  INFO(each.out);
  REQUIRE(mean.code == 0);
  REQUIRE(each.code == 0);
  const std::vector<TextPanel> m = parse_panels(mean.out), e = parse_panels(each.out);
  REQUIRE(m.size() == 1);
  REQUIRE(e.size() == 1);
  CHECK_THAT(e[0].title, Catch::Contains("each = mean"));
  CHECK(e[0].values == m[0].values);
  CHECK(png_size(dir + "/each.png").second == png_size(dir + "/mean.png").second);
  CHECK(png_size(dir + "/each.png").first > 0);
  const Run r = run("attention --checkpoint " + dir + " --layer 1 --out " + dir + "/bad.png abcd");
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("--layer 1") && Catch::Contains("[0, 0]"));
}

TEST_CASE(
    "per-head attention maps: kept only while keep_attention is on, [B, H, Tq, Tk], averaging to "
    "attention_maps",
    "[cli][attention][library]") {
  using namespace tapegrad;
  models::ModelConfig cfg;
  cfg.vocab_size = 8;
  cfg.d_model = 16;
  cfg.heads = 4;
  cfg.d_ff = 32;
  cfg.layers = 1;
  cfg.dropout = 0;
  auto model = models::make_model(cfg, 5);
  const data::Batch batch = data::make_batch({{{4, 5, 6, 7, 5}, {6, 4, 5}}, {{5, 4}, {7, 7, 4, 6}}});
  model->logits(batch);
  CHECK(model->attention_head_maps().empty());  // training forward passes store nothing
  model->keep_attention(true);
  {
    NoGrad no_grad;
    model->logits(batch);
  }
  const auto heads = model->attention_head_maps();
  const auto means = model->attention_maps();
  REQUIRE(heads.size() == 3);  // encoder self, decoder self, cross
  REQUIRE(means.size() == heads.size());
  const int64_t S = batch.src.size(1), T = batch.tgt_in.size(1);
  for (size_t i = 0; i < heads.size(); ++i) {
    CAPTURE(heads[i].first);
    CHECK(heads[i].first == means[i].first);
    const bool encoder = heads[i].first.rfind("encoder", 0) == 0;
    const bool self = heads[i].first.find("self_attn") != std::string::npos;
    const int64_t Tq = encoder ? S : T, Tk = self ? Tq : S;
    REQUIRE(heads[i].second.shape() == Shape{2, 4, Tq, Tk});
    REQUIRE(means[i].second.shape() == Shape{2, Tq, Tk});
    const std::vector<double> h = heads[i].second.to_vector(), m = means[i].second.to_vector();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t q = 0; q < Tq; ++q)
        for (int64_t k = 0; k < Tk; ++k) {
          double sum = 0;
          for (int64_t head = 0; head < 4; ++head) sum += h[size_t(((b * 4 + head) * Tq + q) * Tk + k)];
          CHECK(std::abs(sum / 4 - m[size_t((b * Tq + q) * Tk + k)]) <= 1e-6);
        }
  }
}
