// quiesce keygc - keygcbench for quiesce (seed 000): the key collector's execution times
// and the latency it inflicts on its CPU's pool, monolithic vs chunked vs budget.
#include <fmt/format.h>

#include "keygc_experiment.hpp"
#include "registry.hpp"

namespace quiesce::cli {
namespace {

struct keygc_cli {
  keygc_config config;
  std::string mode = "chunked";
  std::string against = "monolithic";
  bool compare = false;
  bool json = false;
};

keygc_config config_for(const keygc_cli& o, const std::string& mode) {
  keygc_config c = o.config;
  c.mode = keys::parse_gc_mode(mode);
  return c;
}

std::string probe_line(const keygc_result& r) {
  return fmt::format(
      "probe (queue->start on the collector's CPU): n={} p50={:.1f}us "
      "p99={:.1f}us max={:.1f}us",
      r.probe_ns.count(), r.probe_ns.percentile(50) / 1e3, r.probe_ns.percentile(99) / 1e3,
      r.probe_ns.max() / 1e3);
}

std::string describe(const keygc_result& r) {
  std::string mode = keys::to_string(r.config.mode);
  if (r.config.mode == keys::gc_mode::chunked) mode += fmt::format(" (chunk {})", r.config.chunk);
  if (r.config.mode == keys::gc_mode::budget) mode += fmt::format(" ({} us)", r.config.slice_us);
  return mode;
}

std::string result_text(const keygc_result& r) {
  return fmt::format(
      "keygcbench results, {} ({} keys, {} run{}, {} executions):\n\n{}\n"
      "total task time: {:.3f} ms\n{}\nhog reports: {}\n",
      describe(r), r.config.keys, r.config.runs, r.config.runs == 1 ? "" : "s", r.executions,
      keygc_lines(r), r.total_ms(), probe_line(r), r.hog_reports);
}

std::string comparison_text(const keygc_result& base, const keygc_result& patched) {
  const keygc_comparison c = compare(base, patched);
  return fmt::format(
      "{}\n{}\nThese results translate to:\n\n- {:.1f}% drop in the combined "
      "variance.\n- {:.1f}% {} in the total task time.\n- {:.1f}% drop in the "
      "probe's max latency.\n",
      result_text(base), result_text(patched), c.variance_drop_pct,
      std::abs(c.total_time_increase_pct), c.total_time_increase_pct >= 0 ? "increase" : "decrease",
      c.probe_max_drop_pct);
}

nlohmann::json comparison_json(const keygc_result& base, const keygc_result& patched) {
  const keygc_comparison c = compare(base, patched);
  return {{"baseline", base.to_json()},
          {"patched", patched.to_json()},
          {"variance_drop_pct", c.variance_drop_pct},
          {"total_time_increase_pct", c.total_time_increase_pct},
          {"probe_max_drop_pct", c.probe_max_drop_pct}};
}

void validate(const keygc_cli& o) {
  if (o.config.keys == 0) throw usage_error("--keys: must be at least 1");
  if (o.config.per_keyring == 0) throw usage_error("--per-keyring: must be at least 1");
  if (o.config.chunk == 0) throw usage_error("--chunk: must be at least 1");
  if (o.config.runs < 1) throw usage_error("--runs: must be at least 1");
  if (o.config.slice_us <= 0) throw usage_error("--slice-us: must be positive");
  if (o.config.cpu >= 0 && !system_topology().cpus().contains(o.config.cpu)) {
    throw usage_error(fmt::format("--cpu: {} is not usable (usable: {})", o.config.cpu,
                                  system_topology().cpus().to_string()));
  }
  for (const std::string* m : {&o.mode, &o.against}) {
    try {
      keys::parse_gc_mode(*m);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--mode/--against: ") + e.what());
    }
  }
}

const command_registrar keygc_command{
    {"keygc", [](CLI::App& app) {
       auto o = std::make_shared<keygc_cli>();
       auto* sub = app.add_subcommand(
           "keygc",
           "Seed 000: the key collector's execution times and the latency it inflicts "
           "on its CPU (keygcbench)");
       sub->add_option("--keys", o->config.keys, "Keys in the population")->capture_default_str();
       sub->add_option("--per-keyring", o->config.per_keyring, "Keys per keyring")
           ->capture_default_str();
       sub->add_option("--mode", o->mode, "monolithic | chunked | budget")->capture_default_str();
       sub->add_option("--chunk", o->config.chunk, "Chunk size (chunked mode)")
           ->capture_default_str();
       sub->add_option("--slice-us", o->config.slice_us, "Time slice per execution (budget mode)")
           ->capture_default_str();
       sub->add_option("--runs", o->config.runs, "Runs per mode (samples are pooled)")
           ->capture_default_str();
       sub->add_option("--cpu", o->config.cpu, "The collector's CPU (default: the last usable)");
       sub->add_flag("--compare", o->compare,
                     "Run the baseline (--against) and --mode side by side");
       sub->add_option("--against", o->against, "Baseline mode for --compare")
           ->capture_default_str();
       sub->add_flag("--json", o->json, "One JSON object on stdout");
       sub->callback([o] {
         validate(*o);
         if (o->compare) {
           const keygc_result base = run_keygc(config_for(*o, o->against));
           const keygc_result patched = run_keygc(config_for(*o, o->mode));
           if (o->json) {
             fmt::print("{}\n", comparison_json(base, patched).dump(2));
           } else {
             fmt::print("{}", comparison_text(base, patched));
           }
           return;
         }
         const keygc_result r = run_keygc(config_for(*o, o->mode));
         if (o->json) {
           fmt::print("{}\n", r.to_json().dump(2));
         } else {
           fmt::print("{}", result_text(r));
         }
       });
     }}};

std::string markdown(const nlohmann::json& j) {
  auto row = [](const char* name, const nlohmann::json& s) {
    return fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", name,
                       s["n"].get<std::uint64_t>(), s["min_ms"].get<double>(),
                       s["avg_ms"].get<double>(), s["max_ms"].get<double>(),
                       s["var_ms2"].get<double>());
  };
  std::string md;
  for (const char* side : {"baseline", "patched"}) {
    const nlohmann::json& r = j[side];
    md += fmt::format(
        "**{}** ({}{}, {} keys): total task time {:.1f} ms; probe p50 {:.1f} us, "
        "p99 {:.1f} us, max {:.1f} us; hog reports {}\n\n",
        side, r["mode"].get<std::string>(),
        r["mode"] == "chunked" ? fmt::format(" {}", r["chunk"].get<int>()) : "",
        r["keys"].get<std::size_t>(), r["total_ms"].get<double>(),
        r["probe"]["p50_us"].get<double>(), r["probe"]["p99_us"].get<double>(),
        r["probe"]["max_us"].get<double>(), r["hog_reports"].get<int>());
    md += "| phase | n | min ms | avg ms | max ms | var ms^2 |\n|---|---|---|---|---|---|\n";
    md +=
        row("unused", r["unused"]) + row("expired", r["expired"]) + row("combined", r["combined"]);
    md += "\n";
  }
  md += fmt::format(
      "Ours: {:.1f}% drop in the combined variance, {:.1f}% {} in the total task "
      "time, {:.1f}% drop in the probe's max latency (seed: 93% drop, 2.2% "
      "increase).\n\n",
      j["variance_drop_pct"].get<double>(), std::abs(j["total_time_increase_pct"].get<double>()),
      j["total_time_increase_pct"].get<double>() >= 0 ? "increase" : "decrease",
      j["probe_max_drop_pct"].get<double>());
  return md;
}

const experiment_registrar keygc_experiment{{"keygc", "000",
                                             "keygcbench: monolithic vs chunked (64) collector",
                                             [](const experiment_options& opt) {
                                               keygc_config c;
                                               c.keys = opt.quick ? 20'000 : 100'000;
                                               keygc_config base = c;
                                               base.mode = keys::gc_mode::monolithic;
                                               const keygc_result b = run_keygc(base);
                                               const keygc_result p = run_keygc(c);
                                               return comparison_json(b, p);
                                             },
                                             markdown}};

}  // namespace
}  // namespace quiesce::cli
