// SPDX-License-Identifier: Apache-2.0
// Plots of the experiments' results: each written as NAME.png by gnuplot, from NAME.dat (the
// data, one block per series, exactly the numbers the result holds) and NAME.gp (the
// script), all three kept beside each other so a reader can re-draw or check a plot.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "quiesce/histogram.hpp"

namespace quiesce::experiments {

struct plot_series {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (x, y)
  std::string style = "lines";                    // gnuplot's: lines, points, linespoints, boxes
};

// A vertical mark at x with a label (the chosen chunk size, a stall report).
struct plot_mark {
  double x = 0;
  std::string label;
};

struct plot_spec {
  std::string name;     // file stem: NAME.png, NAME.dat, NAME.gp; [a-z0-9-] only
  std::string title;    // above the plot
  std::string caption;  // one line under it in the report: what to see
  std::string xlabel, ylabel;
  bool logx = false, logy = false;  // points <= 0 on a log axis are left out (and counted)
  std::vector<plot_series> series;
  std::vector<plot_mark> marks;
  // Labels for x positions (a category axis, e.g. one bar per metric); empty: numbers.
  std::vector<std::pair<double, std::string>> xtics = {};
  double xtic_step = 0;  // > 0: a number tick every step (1 for runs); 0: gnuplot's choice
  int height = 540;      // pixels (the width is 960)
  // Each series in a panel of its own, stacked, sharing the x range and the y range (the
  // image is `height` pixels per panel): for series that overlap on one axis and cannot be
  // told apart (the keygc probe's collectors, one after another in time).
  bool panel_per_series = false;
};

struct written_plot {
  std::filesystem::path png, data;  // DIR/NAME.png and DIR/NAME.dat
  std::string caption;
};

// Writes DIR/NAME.dat and DIR/NAME.gp and runs gnuplot to draw DIR/NAME.png (created if
// missing). Throws std::invalid_argument for a bad name or a plot without any point, and
// std::runtime_error naming the cause if gnuplot is missing or fails (its own message).
written_plot write_plot(const std::filesystem::path& dir, const plot_spec& spec);

// The Markdown that shows a plot in a report at `report_dir`: the image (path relative to
// the report) and its caption in italics.
std::string plot_markdown(const written_plot& plot, const std::filesystem::path& report_dir);

// The points of an empirical CDF of `samples` scaled by `scale` (x = value * scale, y =
// fraction of samples <= x), at most `max_points` points (evenly spaced ranks, always the
// first and the last).
std::vector<std::pair<double, double>> cdf_points(std::vector<double> samples, double scale,
                                                  std::size_t max_points = 2000);

// The points of the CDF of a histogram's samples: one per non-empty bucket, x = the bucket's
// upper bound in ns times `scale`, y = fraction of samples in it or below. Empty: no sample.
std::vector<std::pair<double, double>> histogram_cdf(const histogram& h, double scale);

}  // namespace quiesce::experiments
