// `tapegrad attention`: attention heatmaps of a checkpoint on one input, as a PNG (cairo) and as text.
//
// The model decodes the input greedily, then re-reads (source, its own output) teacher-forced with
// attention kept, so every decoder map has one row per output token (+ <eos>) and one column per key:
// the source for cross-attention, <bos> + the output prefix for decoder self-attention. For the
// Transformer each layer's encoder self-, decoder self- and cross-attention is drawn, averaged over
// heads (--heads mean) or one panel per head (--heads each); --layer keeps one layer. The attention
// RNN has a single attention over the encoder states (one head, so `each` equals `mean`). The PNG
// has one row of panels per attention and one panel per head, and a colour scale for the weights
// (0 to 1, the same for every panel so they can be compared); the text output uses ten shades.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chart.hpp"
#include "cli.hpp"
#include "tapegrad/tapegrad.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::cli {

namespace {

struct Panel {
  std::string title;
  std::string axes;                     // what the rows and columns are
  std::vector<std::string> rows, cols;  // query and key labels
  std::vector<double> weights;          // rows x cols
};

// One attention of the model (one module), split into panels: one per head, or one for the mean.
struct PanelRow {
  std::vector<Panel> panels;
};

// Ten shades for the text rendering; weight w gets shade floor(10 w), 1 itself the darkest.
constexpr const char* kShades[] = {" ", ".", ":", "-", "=", "+", "*", "#", "%", "@"};
int shade_index(double w) {
  return std::clamp(int(std::floor(w * 10)), 0, 9);
}

// PNG layout, in pixels.
constexpr double kCell = 22, kLabel = 40, kTitle = 38, kGap = 30, kLegendHeight = 200;

double panel_height(const Panel& p) {
  return kTitle + kLabel + kCell * double(p.rows.size()) + kGap;
}

void draw_png(const std::vector<PanelRow>& grid, const std::string& path) {
  std::vector<double> strides;  // the width of one panel of each row, gap included
  double width = 0, height = kGap;
  for (const PanelRow& row : grid) {
    double w = kLabel + kCell * double(row.panels[0].cols.size());
    for (const Panel& p : row.panels) w = std::max(w, chart::text_width(p.title, 13, "monospace"));
    strides.push_back(w + kGap);
    width = std::max(width, kGap + strides.back() * double(row.panels.size()));
    height += panel_height(row.panels[0]);
  }
  const double legend_x = width;
  width += chart::kColourBarWidth;
  height = std::max(height, kGap + chart::kColourBarCaption + kLegendHeight + kGap);

  chart::Canvas canvas(int(width), int(height), "monospace");
  cairo_t* cr = canvas.cr();
  double y0 = kGap;
  for (size_t r = 0; r < grid.size(); ++r) {
    for (size_t h = 0; h < grid[r].panels.size(); ++h) {
      const Panel& p = grid[r].panels[h];
      const double x0 = kGap + strides[r] * double(h);
      canvas.text(x0, y0 + 14, p.title, 13);
      cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
      cairo_set_font_size(cr, 10);
      cairo_move_to(cr, x0, y0 + 29);
      cairo_show_text(cr, p.axes.c_str());
      const double gx = x0 + kLabel, gy = y0 + kTitle + kLabel;
      for (size_t c = 0; c < p.cols.size(); ++c)  // key labels on top
        canvas.text(gx + kCell * double(c) + 6, gy - 8, p.cols[c], 12);
      for (size_t q = 0; q < p.rows.size(); ++q) {
        canvas.text(x0, gy + kCell * double(q) + 15, p.rows[q], 12);
        for (size_t c = 0; c < p.cols.size(); ++c) {
          chart::set_colour(cr, chart::heat_colour(p.weights[q * p.cols.size() + c]));
          cairo_rectangle(cr, gx + kCell * double(c), gy + kCell * double(q), kCell - 1, kCell - 1);
          cairo_fill(cr);
        }
      }
    }
    y0 += panel_height(grid[r].panels[0]);
  }
  chart::draw_colour_bar(canvas, legend_x, kGap, kLegendHeight, "weight");
  canvas.write_png(path);
}

void print_scale() {
  std::printf("scale: each shade covers 0.1 of weight:");
  for (int k = 0; k < 10; ++k) std::printf(" '%s'=%.1f", kShades[k], k / 10.0);
  std::printf("-1\n\n");
}

void print_text(const Panel& p, bool values) {
  std::printf("%s\n  (%s)\n      ", p.title.c_str(), p.axes.c_str());
  for (const auto& c : p.cols) std::printf("%-2s", c.substr(0, 2).c_str());
  std::printf("\n");
  for (size_t r = 0; r < p.rows.size(); ++r) {
    std::printf("%5s ", p.rows[r].substr(0, 5).c_str());
    for (size_t c = 0; c < p.cols.size(); ++c)
      std::printf("%s ", kShades[shade_index(p.weights[r * p.cols.size() + c])]);
    std::printf("\n");
  }
  if (!values) return;
  std::printf("  values:\n");
  for (size_t r = 0; r < p.rows.size(); ++r) {
    std::printf("%5s", p.rows[r].substr(0, 5).c_str());
    for (size_t c = 0; c < p.cols.size(); ++c) std::printf(" %.4f", p.weights[r * p.cols.size() + c]);
    std::printf("\n");
  }
}

// What a module name says about its attention: "encoder.layers.1.self_attn" is layer 1's encoder
// self-attention; the attention RNN's "decoder.attention" has no layers (layer 0).
struct MapKind {
  int64_t layer = 0;
  bool layered = false, encoder = false, self = false;
  std::string label;
};

MapKind map_kind(const std::string& name) {
  MapKind k;
  k.encoder = name.rfind("encoder", 0) == 0;
  k.self = name.find("self_attn") != std::string::npos;
  const std::string marker = ".layers.";
  const size_t at = name.find(marker);
  if (at == std::string::npos) {
    k.label = "decoder attention";
    return k;
  }
  k.layered = true;
  k.layer = std::stoll(name.substr(at + marker.size()));
  k.label = "layer " + std::to_string(k.layer) + " " +
            (k.self ? (k.encoder ? "encoder self-attention" : "decoder self-attention") : "cross-attention");
  return k;
}

}  // namespace

Runner add_attention(CLI::App& app) {
  struct Args {
    std::string checkpoint, input, out = "attention.png", heads = "mean";
    int64_t layer = 0;
    bool values = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("attention",
                         "Draw the attention maps of a checkpoint on one input (PNG + text).\n"
                         "Example: tapegrad attention --checkpoint runs/rev --heads each --layer 0 abcdef");
  sub->add_option("--checkpoint", a->checkpoint, "Checkpoint directory")->required();
  sub->add_option("--out", a->out, "PNG file to write")->capture_default_str();
  sub->add_option("--heads", a->heads,
                  "mean: heads averaged, one panel per attention; each: one panel per head")
      ->check(CLI::IsMember({"mean", "each"}))
      ->capture_default_str();
  CLI::Option* layer_opt =
      sub->add_option("--layer", a->layer, "Show only this layer (0-based); default: all layers");
  sub->add_flag("--values", a->values, "Also print every weight as a number (4 decimals)");
  sub->add_option("input", a->input, "The source line")->required();
  return [a, layer_opt] {
    train::LoadedModel m = train::load_checkpoint(a->checkpoint);
    const data::Tokenizer& tok = *m.tokenizer;
    const auto src_tokens = tok.tokenize(a->input, data::Side::source);
    if (src_tokens.empty()) throw Error("attention: the input is empty");
    const auto src = m.vocab.encode(src_tokens);
    const data::Batch one = data::make_batch({{src, {}}});
    const auto out = m.model->greedy_decode(one.src, one.src_len, 2 * int64_t(src.size()) + 8)[0];
    m.model->keep_attention(true);
    {
      NoGrad no_grad;
      m.model->logits(data::make_batch({{src, out}}));
    }
    m.model->keep_attention(false);
    const bool each = a->heads == "each";
    const auto maps = each ? m.model->attention_head_maps() : m.model->attention_maps();
    if (maps.empty())
      throw Error("attention: this model (" + std::string(models::model_name(m.model->config().kind)) +
                  ") has no attention to show");
    int64_t layers = 0;
    for (const auto& map : maps) layers = std::max(layers, map_kind(map.first).layer + 1);
    const bool one_layer = layer_opt->count() > 0;
    if (one_layer && (a->layer < 0 || a->layer >= layers))
      throw Error("--layer " + std::to_string(a->layer) + ": expected a layer in [0, " +
                  std::to_string(layers - 1) + "] (this model's attention has " + std::to_string(layers) +
                  " layer" + (layers == 1 ? "" : "s") + ")");

    // Labels are one cell wide: <bos> is shown as ^, <eos> as $.
    std::vector<std::string> src_labels = src_tokens, in_labels{"^"}, out_labels;
    for (int32_t id : out) in_labels.push_back(m.vocab.token(id)), out_labels.push_back(m.vocab.token(id));
    out_labels.push_back("$");
    std::vector<PanelRow> grid;
    for (const auto& [name, map] : maps) {
      const MapKind kind = map_kind(name);
      if (one_layer && kind.layer != a->layer) continue;
      Panel base;
      base.rows =
          kind.encoder ? src_labels : out_labels;  // a decoder query at step t predicts output token t
      base.cols = kind.self ? (kind.encoder ? src_labels : in_labels) : src_labels;
      base.axes = kind.encoder ? "rows: source, columns: source"
                               : (kind.self ? "rows: output + $, columns: ^ + output prefix"
                                            : "rows: output + $, columns: source");
      // each: [1, H, Tq, Tk]; mean: [1, Tq, Tk], one panel.
      const int64_t heads = each ? map.size(1) : 1, cells = int64_t(base.rows.size() * base.cols.size());
      if (map.size(0) != 1 || map.numel() != heads * cells)
        throw Error("attention: map " + name + " has shape " + to_string(map.shape()) + ", expected " +
                    (each ? "[1, H, " : "[1, ") + std::to_string(base.rows.size()) + ", " +
                    std::to_string(base.cols.size()) + "]");
      const std::vector<double> w = map.to_vector();
      PanelRow row;
      for (int64_t h = 0; h < heads; ++h) {
        Panel p = base;
        if (!kind.layered)
          p.title = kind.label + (each ? ", its one head (each = mean)" : ", one head");
        else
          p.title = kind.label + (each ? ", head " + std::to_string(h) + " of " + std::to_string(heads)
                                       : ", mean of " + std::to_string(m.model->config().heads) + " heads");
        p.weights.assign(w.begin() + h * cells, w.begin() + (h + 1) * cells);
        row.panels.push_back(std::move(p));
      }
      grid.push_back(std::move(row));
    }
    std::printf("input:  %s\noutput: %s\n", a->input.c_str(),
                tok.detokenize(m.vocab.decode(out), data::Side::target).c_str());
    print_scale();
    for (const PanelRow& row : grid)
      for (const Panel& p : row.panels) print_text(p, a->values), std::printf("\n");
    draw_png(grid, a->out);
    std::printf("wrote %s\n", a->out.c_str());
    return 0;
  };
}

}  // namespace tapegrad::cli
