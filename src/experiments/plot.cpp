// SPDX-License-Identifier: Apache-2.0
// Plots: the data file, the gnuplot script and gnuplot's run (see plot.hpp).
#include "quiesce/experiments/plot.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include "../base/file_io.hpp"

extern char** environ;

namespace quiesce::experiments {

namespace fs = std::filesystem;

namespace {

bool valid_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// A gnuplot string literal: single quotes, a quote doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

bool keep(const plot_spec& spec, std::pair<double, double> p) {
  return (!spec.logx || p.first > 0) && (!spec.logy || p.second > 0);
}

// The data: one block per series (gnuplot's `index`), two blank lines apart; a series
// without a drawable point still has its block (a comment), so the indexes stay in order.
std::string data_text(const plot_spec& spec, std::size_t& drawable) {
  std::string out = fmt::format("# {}\n", spec.title);
  drawable = 0;
  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    const plot_series& s = spec.series[i];
    out += fmt::format("{}# series {}: {}\n", i ? "\n\n" : "", i, s.title);
    for (auto p : s.points) {
      if (!keep(spec, p)) continue;
      out += fmt::format("{} {}\n", p.first, p.second);
      ++drawable;
    }
  }
  return out;
}

// Paths in the script are file names: gnuplot runs in the plot's directory, so the three
// files can be moved together and drawn again with `gnuplot NAME.gp`.
std::string script_text(const plot_spec& spec, const fs::path& png, const fs::path& data) {
  std::string gp = fmt::format(
      "set terminal pngcairo size 960,{} noenhanced font 'sans,10'\n"
      "set output {}\nset title {}\nset xlabel {}\nset ylabel {}\n"
      "set grid\nset key {}\n",
      spec.height, quoted(png.string()), quoted(spec.title), quoted(spec.xlabel),
      quoted(spec.ylabel),
      spec.xtics.empty() ? "outside bottom center horizontal" : "inside top left vertical opaque");
  if (spec.logx) gp += "set logscale x\n";
  if (spec.xtic_step > 0 && spec.xtics.empty()) gp += fmt::format("set xtics {}\n", spec.xtic_step);
  if (!spec.xtics.empty()) {
    std::string tics;
    for (const auto& [x, label] : spec.xtics)
      tics += fmt::format("{}{} {}", tics.empty() ? "" : ", ", quoted(label), x);
    gp += fmt::format("set xtics rotate by -90 left font ',8' ({})\nset bmargin 30\n", tics);
  }
  if (std::any_of(spec.series.begin(), spec.series.end(),
                  [](const plot_series& s) { return s.style == "boxes"; })) {
    gp += "set style fill solid 0.6 border -1\nset boxwidth 0.35\n";
  }
  if (spec.logy) gp += "set logscale y\n";
  for (std::size_t i = 0; i < spec.marks.size(); ++i) {
    const plot_mark& m = spec.marks[i];
    gp += fmt::format(
        "set arrow {} from first {}, graph 0 to first {}, graph 1 nohead dashtype 2 lc rgb "
        "'#cc0000'\nset label {} {} at first {}, graph 0.5 center rotate by 90 offset -1,0 "
        "textcolor rgb '#cc0000'\n",
        i + 1, m.x, m.x, i + 1, quoted(m.label), m.x);
  }
  const auto drawn = [&](const plot_series& s) {
    return std::any_of(s.points.begin(), s.points.end(), [&](auto p) { return keep(spec, p); });
  };
  if (spec.panel_per_series) {
    // One panel per series, the same ranges in each (taken from every kept point).
    double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
    bool any = false;
    for (const plot_series& s : spec.series) {
      for (const auto& p : s.points) {
        if (!keep(spec, p)) continue;
        x0 = any ? std::min(x0, p.first) : p.first;
        x1 = any ? std::max(x1, p.first) : p.first;
        y0 = any ? std::min(y0, p.second) : p.second;
        y1 = any ? std::max(y1, p.second) : p.second;
        any = true;
      }
    }
    const std::size_t panels =
        static_cast<std::size_t>(std::count_if(spec.series.begin(), spec.series.end(), drawn));
    gp.replace(gp.find(fmt::format("size 960,{}", spec.height)),
               fmt::format("size 960,{}", spec.height).size(),
               fmt::format("size 960,{}",
                           spec.height * static_cast<int>(std::max<std::size_t>(panels, 1))));
    gp += fmt::format("set xrange [{}:{}]\nset yrange [{}:{}]\nset key inside top right\n", x0,
                      x1 == x0 ? x0 + 1 : x1, y0, y1 == y0 ? y0 * 2 + 1 : y1);
    gp += fmt::format("set multiplot layout {},1 title {}\nunset title\n",
                      std::max<std::size_t>(panels, 1), quoted(spec.title));
    for (std::size_t i = 0; i < spec.series.size(); ++i) {
      const plot_series& s = spec.series[i];
      if (!drawn(s)) continue;
      gp += fmt::format("plot {} index {} using 1:2 with {} lw 2 title {}\n", quoted(data.string()),
                        i, s.style, quoted(s.title));
    }
    return gp + "unset multiplot\n";
  }
  std::string plots;
  for (std::size_t i = 0; i < spec.series.size(); ++i) {
    const plot_series& s = spec.series[i];
    if (!drawn(s)) continue;
    plots += fmt::format("{}{} index {} using 1:2 with {} lw 2 title {}", plots.empty() ? "" : ", ",
                         quoted(data.string()), i, s.style, quoted(s.title));
  }
  return gp + "plot " + plots + "\n";
}

// Runs `gnuplot SCRIPT` in `dir`, its stderr into `log`; returns what it printed if it
// failed.
std::string run_gnuplot(const fs::path& dir, const fs::path& script, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  std::string arg0 = "gnuplot", arg1 = script.filename().string();
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::error_code ignored;
    fs::remove(log, ignored);
    return rc == ENOENT ? "gnuplot is not installed (Debian: gnuplot-nox)"
                        : fmt::format("cannot start gnuplot: {}", std::strerror(rc));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string printed;
  try {
    printed = read_file(log, 64 * 1024);
  } catch (const std::exception&) {
  }
  std::error_code ignored;
  fs::remove(log, ignored);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  while (!printed.empty() && (printed.back() == '\n' || printed.back() == ' '))
    printed.pop_back();
  return fmt::format("gnuplot failed ({}): {}",
                     WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                       : fmt::format("signal {}", WTERMSIG(status)),
                     printed.empty() ? "no message" : printed);
}

}  // namespace

written_plot write_plot(const fs::path& dir, const plot_spec& spec) {
  if (!valid_name(spec.name)) {
    throw std::invalid_argument(fmt::format("plot name '{}': use a-z, 0-9 and '-'", spec.name));
  }
  std::size_t drawable = 0;
  const std::string data = data_text(spec, drawable);
  if (drawable == 0) {
    throw std::invalid_argument(fmt::format("plot '{}': no point to draw", spec.name));
  }
  fs::create_directories(dir);
  written_plot out{dir / (spec.name + ".png"), dir / (spec.name + ".dat"), spec.caption};
  const fs::path script = dir / (spec.name + ".gp");
  write_file_atomically(out.data, {data});
  write_file_atomically(script, {script_text(spec, out.png.filename(), out.data.filename())});
  const fs::path where = fs::absolute(dir);
  if (const std::string why = run_gnuplot(where, script, where / (spec.name + ".gnuplot.log"));
      !why.empty()) {
    throw std::runtime_error(fmt::format("plot '{}': {}", spec.name, why));
  }
  return out;
}

std::string plot_markdown(const written_plot& plot, const fs::path& report_dir) {
  const fs::path rel = plot.png.lexically_proximate(report_dir);
  return fmt::format("![{}]({})\n\n*{}*\n\n", plot.png.stem().string(), rel.string(), plot.caption);
}

std::vector<std::pair<double, double>> cdf_points(std::vector<double> samples, double scale,
                                                  std::size_t max_points) {
  std::vector<std::pair<double, double>> out;
  if (samples.empty() || max_points == 0) return out;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  const std::size_t points = std::min(n, std::max<std::size_t>(max_points, 2));
  for (std::size_t k = 0; k < points; ++k) {
    const std::size_t i = points == 1 ? n - 1 : k * (n - 1) / (points - 1);
    out.emplace_back(samples[i] * scale, static_cast<double>(i + 1) / static_cast<double>(n));
  }
  return out;
}

std::vector<std::pair<double, double>> histogram_cdf(const histogram& h, double scale) {
  std::vector<std::pair<double, double>> out;
  if (h.count() == 0) return out;
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < histogram::bucket_count; ++i) {
    if (h.bucket(i) == 0) continue;
    below += h.bucket(i);
    const std::uint64_t upper = histogram::bucket_low(i) + histogram::bucket_width(i);
    out.emplace_back(static_cast<double>(upper) * scale,
                     static_cast<double>(below) / static_cast<double>(h.count()));
  }
  return out;
}

}  // namespace quiesce::experiments
