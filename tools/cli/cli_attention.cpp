// `tapegrad attention`: attention heatmaps of a checkpoint on one input, as a PNG (cairo) and as text.
//
// The model decodes the input greedily, then re-reads (source, its own output) teacher-forced with
// attention kept, so every map has one row per output token (+ <eos>) and one column per key. For the
// Transformer each layer's self- and cross-attention is drawn, averaged over heads; for the attention
// RNN the decoder's attention over encoder states.
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::cli {

namespace {

struct Panel {
  std::string title;
  std::vector<std::string> rows, cols;  // query and key labels
  std::vector<double> weights;          // rows x cols
};

void draw_png(const std::vector<Panel>& panels, const std::string& path) {
  constexpr double kCell = 22, kLabel = 40, kTitle = 24, kGap = 30;
  double width = kGap, height = kGap;
  for (const Panel& p : panels) {
    width = std::max(width, kGap + kLabel + kCell * double(p.cols.size()) + kGap);
    height += kTitle + kLabel + kCell * double(p.rows.size()) + kGap;
  }
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, int(width), int(height));
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "monospace", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  double y0 = kGap;
  for (const Panel& p : panels) {
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 14);
    cairo_move_to(cr, kGap, y0 + 16);
    cairo_show_text(cr, p.title.c_str());
    const double gx = kGap + kLabel, gy = y0 + kTitle + kLabel;
    cairo_set_font_size(cr, 12);
    for (size_t c = 0; c < p.cols.size(); ++c) {  // key labels on top
      cairo_move_to(cr, gx + kCell * double(c) + 6, gy - 8);
      cairo_show_text(cr, p.cols[c].c_str());
    }
    for (size_t r = 0; r < p.rows.size(); ++r) {
      cairo_set_source_rgb(cr, 0, 0, 0);
      cairo_move_to(cr, kGap, gy + kCell * double(r) + 15);
      cairo_show_text(cr, p.rows[r].c_str());
      for (size_t c = 0; c < p.cols.size(); ++c) {
        const double w = std::clamp(p.weights[r * p.cols.size() + c], 0.0, 1.0);
        cairo_set_source_rgb(cr, 1 - w, 1 - 0.55 * w, 1 - 0.2 * w);  // white -> dark blue
        cairo_rectangle(cr, gx + kCell * double(c), gy + kCell * double(r), kCell - 1, kCell - 1);
        cairo_fill(cr);
      }
    }
    y0 += kTitle + kLabel + kCell * double(p.rows.size()) + kGap;
  }
  cairo_destroy(cr);
  const cairo_status_t st = cairo_surface_write_to_png(surface, path.c_str());
  cairo_surface_destroy(surface);
  if (st != CAIRO_STATUS_SUCCESS) throw IoError(path + ": cannot write PNG: " + cairo_status_to_string(st));
}

void print_text(const Panel& p) {
  static const char* kShades[] = {" ", ".", ":", "-", "=", "+", "*", "#", "%", "@"};
  std::printf("%s\n      ", p.title.c_str());
  for (const auto& c : p.cols) std::printf("%-2s", c.substr(0, 2).c_str());
  std::printf("\n");
  for (size_t r = 0; r < p.rows.size(); ++r) {
    std::printf("%5s ", p.rows[r].substr(0, 5).c_str());
    for (size_t c = 0; c < p.cols.size(); ++c) {
      const double w = std::clamp(p.weights[r * p.cols.size() + c], 0.0, 1.0);
      std::printf("%s ", kShades[std::min(9, int(w * 9.999))]);
    }
    std::printf("\n");
  }
}

}  // namespace

Runner add_attention(CLI::App& app) {
  struct Args {
    std::string checkpoint, input, out = "attention.png";
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("attention",
                                 "Draw the attention maps of a checkpoint on one input (PNG + text).\n"
                                 "Example: tapegrad attention --checkpoint runs/rev --out rev.png abcdef");
  sub->add_option("--checkpoint", a->checkpoint, "Checkpoint directory")->required();
  sub->add_option("--out", a->out, "PNG file to write")->capture_default_str();
  sub->add_option("input", a->input, "The source line")->required();
  return [a] {
    train::LoadedModel m = train::load_checkpoint(a->checkpoint);
    const data::Tokenization tok = m.options.tokenization;
    const auto src_tokens = data::tokenize(a->input, tok);
    if (src_tokens.empty()) throw Error("attention: the input is empty");
    const auto src = m.vocab.encode(src_tokens);
    const data::Batch one = data::make_batch({{src, {}}});
    const auto out = m.model->greedy_decode(one.src, one.src_len, 2 * int64_t(src.size()) + 8)[0];
    m.model->keep_attention(true);
    {
      NoGrad no_grad;
      m.model->logits(data::make_batch({{src, out}}));
    }
    // Column labels are one cell wide: <bos> is shown as ^, <eos> as $.
    std::vector<std::string> src_labels = src_tokens, in_labels{"^"}, out_labels;
    for (int32_t id : out) in_labels.push_back(m.vocab.token(id)), out_labels.push_back(m.vocab.token(id));
    out_labels.push_back("$");
    std::vector<Panel> panels;
    for (const auto& [name, map] : m.model->attention_maps()) {
      Panel p;
      p.title = name;
      const bool self = name.find("self_attn") != std::string::npos;
      const bool encoder = name.rfind("encoder", 0) == 0;
      p.rows = encoder ? src_labels : out_labels;  // a decoder query at step t predicts output token t
      p.cols = self ? (encoder ? src_labels : in_labels) : src_labels;
      p.weights = map.to_vector();
      if (p.weights.size() != p.rows.size() * p.cols.size())
        throw Error("attention: map " + name + " has shape " + to_string(map.shape()) + ", expected " +
                    std::to_string(p.rows.size()) + "x" + std::to_string(p.cols.size()));
      panels.push_back(std::move(p));
    }
    if (panels.empty()) throw Error("attention: this model (" + std::string(models::model_name(m.model->config().kind)) +
                                    ") has no attention to show");
    std::printf("input:  %s\noutput: %s\n\n", a->input.c_str(), data::detokenize(m.vocab.decode(out), tok).c_str());
    for (const Panel& p : panels) print_text(p), std::printf("\n");
    draw_png(panels, a->out);
    std::printf("wrote %s\n", a->out.c_str());
    return 0;
  };
}

}  // namespace tapegrad::cli
