// `tapegrad plot`: training curves of one or more run directories, from their metrics.csv.
#include <cstdio>

#include "cli.hpp"
#include "curves.hpp"

namespace tapegrad::cli {

Runner add_plot(CLI::App& app) {
  struct Args {
    std::vector<std::string> runs;
    std::string out = "curves.png";
    PlotOptions options;
  };
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("plot",
                         "Draw training curves (loss; validation token accuracy and exact match) of run "
                         "directories, overlaid, as a PNG.\n"
                         "Example: tapegrad plot runs/rev runs/rev-preln --out curves.png --log");
  sub->add_option("runs", a->runs, "Run directories (each with a metrics.csv)")->required();
  sub->add_option("--out", a->out, "PNG file to write")->capture_default_str();
  sub->add_flag("--log", a->options.log_loss, "Loss axis in log scale");
  sub->add_option("--width", a->options.width, "Image width in pixels")
      ->capture_default_str()
      ->check(int_range(400, 8000));
  sub->add_option("--height", a->options.height, "Image height in pixels")
      ->capture_default_str()
      ->check(int_range(200, 8000));
  return [a] {
    std::vector<Curves> curves;
    for (const auto& r : a->runs) curves.push_back(read_curves(r));
    plot_curves(curves, a->out, a->options);
    std::printf("wrote %s (%dx%d, %zu run%s)\n", a->out.c_str(), a->options.width, a->options.height,
                curves.size(), curves.size() == 1 ? "" : "s");
    return 0;
  };
}

}  // namespace tapegrad::cli
