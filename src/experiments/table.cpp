// SPDX-License-Identifier: Apache-2.0
// The experiment table (table.hpp): one row per experiment, and the size each runs at in
// a full, quick or smoke report.
#include "quiesce/experiments/table.hpp"

#include "quiesce/experiments/keygc_compare.hpp"
#include "quiesce/experiments/peers.hpp"
#include "quiesce/experiments/sanitize_boot.hpp"
#include "quiesce/experiments/sweep.hpp"
#include "quiesce/experiments/verity_bench.hpp"
#include "quiesce/experiments/verity_mount_bench.hpp"
#include "quiesce/sanitize.hpp"

namespace quiesce::experiments {
namespace {

// The three sizes of a row: full, quick, smoke.
template <typename T>
T sized(const experiment_options& o, T full, T quick, T smoke) {
  return o.smoke ? smoke : o.quick ? quick : full;
}

template <typename Result>
experiment_output rendered(const Result& r) {
  experiment_output out{r.to_json(), r.markdown(), r.plots(), {}, {}};
  if constexpr (requires { r.bought(); }) out.bought = r.bought();
  return out;
}

experiment_output skipped(const std::string& why) {
  return {{{"skipped", why}}, "Not measured: " + why + ".\n", {}, why, {}};
}

experiment_output keygc(const experiment_options& o) {
  keygc_config c;
  c.keys = sized<std::size_t>(o, 100'000, 20'000, 2'000);
  keygc_config base = c, budget = c;
  base.mode = keys::gc_mode::monolithic;
  budget.mode = keys::gc_mode::budget;
  // The spread of 3 pairs; budget (its default slice) runs in each pair too.
  keygc_comparison_result r = run_keygc_comparison(base, c, sized(o, 3, 3, 1), {}, budget);
  add_kernel_column(r, c, o.set_gc_delay);
  return rendered(r);
}

experiment_output sweep_keygc(const experiment_options& o) {
  sweep_config c;  // the seed's design: 100,000 keys, sizes 1 .. 1024, three runs each
  c.runs = sized(o, c.runs, 2, 1);
  c.keys = sized<std::size_t>(o, c.keys, 5'000, 1'000);
  c.chunks.clear();
  for (std::size_t chunk = 1; chunk <= 1024; chunk *= sized<std::size_t>(o, 2, 8, 32))
    c.chunks.push_back(chunk);
  return rendered(run_sweep(c));
}

experiment_output sanitize_boot(const experiment_options& o) {
  boot_options b;
  b.sanitizer.pages = sized<std::size_t>(o, 32768, 8192, 1024);
  const double seconds = sized(o, 3.0, 1.0, 0.2);  // the loop's target duration
  b.sanitizer.passes = sanitize::calibrate_passes(
      b.sanitizer.pages, std::chrono::nanoseconds(static_cast<std::int64_t>(seconds * 1e9)));
  b.sanitizer.policy = sanitize::qs_policy::resched;
  return rendered(run_sanitize_comparison(b, sized(o, 3, 3, 1)));
}

experiment_output verity(const experiment_options& o) {
  verity_bench_config c;
  c.file_mib = sized(o, 256, 32, 4);
  c.seconds = sized(o, 3.0, 0.5, 0.1);  // three runs of both queues either way
  return rendered(run_verity_bench(c));
}

experiment_output verity_mount(const experiment_options& o) {
  if (auto why = verity_mount_bench_unusable()) return skipped(*why);
  verity_mount_bench_config c;
  c.app_mib = sized(o, 64, 16, 4);
  c.seq_mib = sized(o, 256, 64, 8);
  if (o.smoke) c.runs = 1;
  c.load = 2;  // a busy device: as many CPU-bound threads as these machines have CPUs
  return rendered(run_verity_mount_bench(c));
}

experiment_output peers(const experiment_options& o) {
  peers_options p{.repetitions = sized(o, 3, 2, 1),
                  .growth = !o.quick,
                  .every_sha256 = !o.quick,
                  .min_time_s = 0.1,
                  .flood_seconds = o.quick ? 1.0 : 10.0,
                  .size_divisor = 1,
                  .bench_dir = {}};
  if (o.smoke) make_smoke(p);
  if (std::string why = peers_unavailable(p); !why.empty()) return skipped(why);
  return rendered(run_peers(p));
}

constexpr experiment table[] = {
    {"keygc", "000", "keygcbench: monolithic vs chunked (64) collector, and budget", keygc},
    {"sweep keygc", "000", "the chunk-size study (sizes 1 .. 1024, the seed's design)",
     sweep_keygc},
    {"sanitize", "003", "EPC sanitization: cond_resched() vs cond_resched_tasks_qs()",
     sanitize_boot},
    {"verity bench", "004", "verified reads: verification on an unbound vs a per-CPU highpri queue",
     verity},
    {"verity bench --mount", "004",
     "app cold start through quiesce verity mount: unbound vs per-CPU highpri verification",
     verity_mount},
    {"bench peers", "", "the runtime against the libraries a user would pick instead", peers},
};

}  // namespace

std::span<const experiment> all_experiments() {
  return table;
}

}  // namespace quiesce::experiments
