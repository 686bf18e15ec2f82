// SPDX-License-Identifier: Apache-2.0
// The runtime-vs-peers comparison (peers.hpp): which benchmark answers which row, running
// the benchmark programs, reading their JSON, and the renderings.
#include "quiesce/experiments/peers.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "../base/file_io.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/experiments/spread.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/verity.hpp"

extern char** environ;

namespace quiesce::experiments {

namespace fs = std::filesystem;

double sample_set::median() const {
  return median_of(values);
}
double sample_set::min() const {
  return min_of(values);
}
double sample_set::max() const {
  return max_of(values);
}

const sample_set& peer_row::best_peer() const {
  const auto better_median = [&](const sample_set& a, const sample_set& b) {
    return direction == better::higher ? a.median() > b.median() : a.median() < b.median();
  };
  return *std::min_element(peers.begin(), peers.end(), better_median);
}

double peer_row::ratio() const {
  const double ours_m = ours.median();
  const double theirs = best_peer().median();
  if (ours_m <= 0 || theirs <= 0) return 0;
  return direction == better::higher ? ours_m / theirs : theirs / ours_m;
}

bool peer_row::meets_goal() const {
  if (goal.at_most) return !ours.values.empty() && ours.max() <= *goal.at_most;
  return ratio() >= goal.ratio;
}

double hashing_row::tree_ratio() const {
  return openssl.median() > 0 ? tree.median() / openssl.median() : 0;
}
double hashing_row::verify_ratio() const {
  return openssl.median() > 0 ? verify.median() / openssl.median() : 0;
}

namespace {

// ---- which benchmark answers which row -----------------------------------------------

// A measurement: a benchmark's run name up to its parameters' end (the lookup ignores the
// "/iterations:", "/real_time" and "/threads:" suffixes Google Benchmark appends).
struct source {
  std::string runtime;
  std::string program;  // "bench_wq" or "bench_rcu"
  std::string benchmark;
};

struct row_spec {
  std::string metric;
  std::string unit;
  better direction;
  std::string field;  // "items_per_second", "real_time" (ns) or a counter ("p50_us")
  double scale;       // applied to the field
  source ours;
  std::vector<source> peers;
  row_goal goal = {};
};

source wq(std::string runtime, std::string benchmark) {
  return {std::move(runtime), "bench_wq", std::move(benchmark)};
}
source rcu(std::string runtime, std::string benchmark) {
  return {std::move(runtime), "bench_rcu", std::move(benchmark)};
}

std::vector<row_spec> row_specs() {
  std::vector<row_spec> rows;
  // Dispatch throughput: a bound queue against the mutex pool (the kernel-semantics
  // per-CPU queue's counterpart), an unbound one against every peer.
  for (const int posters : {1, 2}) {
    const std::string suffix = fmt::format("/posters:{}", posters);
    const std::string from = posters == 1 ? "one thread" : "two threads";
    rows.push_back({fmt::format("1M empty items from {}, bound", from),
                    "M items/s",
                    better::higher,
                    "items_per_second",
                    1e-6,
                    wq("quiesce", "throughput_workqueue/bound" + suffix),
                    {wq("mutex+condvar", "throughput_mutex_pool" + suffix)}});
    rows.push_back(
        {fmt::format("1M empty items from {}, unbound", from),
         "M items/s",
         better::higher,
         "items_per_second",
         1e-6,
         wq("quiesce", "throughput_workqueue/unbound" + suffix),
         {wq("oneTBB", "throughput_tbb" + suffix), wq("Boost.Asio", "throughput_asio" + suffix),
          wq("mutex+condvar", "throughput_mutex_pool" + suffix)}});
  }
  // The same through workqueue::post: a lambda per item, as Asio's post and TBB's enqueue.
  for (const int posters : {1, 2}) {
    const std::string suffix = fmt::format("/posters:{}", posters);
    const std::string from = posters == 1 ? "one thread" : "two threads";
    for (const char* queue : {"bound", "unbound"}) {
      rows.push_back(
          {fmt::format("1M posted lambdas from {}, {}", from, queue),
           "M items/s",
           better::higher,
           "items_per_second",
           1e-6,
           wq("quiesce", fmt::format("throughput_post/{}{}", queue, suffix)),
           {wq("oneTBB", "throughput_tbb" + suffix), wq("Boost.Asio", "throughput_asio" + suffix),
            wq("mutex+condvar", "throughput_mutex_pool" + suffix)}});
    }
  }
  // Round trips (the kernel's lib/test_workqueue.c shape): post, wait for it to finish.
  for (const int producers : {1, 2}) {
    const std::string suffix = fmt::format("/producers:{}", producers);
    const std::string from = producers == 1 ? "one thread" : "two threads";
    for (const char* queue : {"bound", "unbound"}) {
      rows.push_back(
          {fmt::format("100k round trips (post, wait) from {}, {}", from, queue),
           "M round trips/s",
           better::higher,
           "items_per_second",
           1e-6,
           wq("quiesce", fmt::format("round_trip_workqueue/{}{}", queue, suffix)),
           {wq("oneTBB", "round_trip_tbb" + suffix), wq("Boost.Asio", "round_trip_asio" + suffix),
            wq("mutex+condvar", "round_trip_mutex_pool" + suffix)}});
    }
  }
  // Latency under load: a CPU-bound thread per CPU at normal priority; quiesce's highpri
  // per-CPU queue against the peers' pools (which have no priority to give).
  // Goals (issue 29): p99 a tenth of the best peer's, p99.9 under 200 us.
  struct loaded_row {
    const char* pct;
    row_goal goal;
  };
  for (const loaded_row& l :
       {loaded_row{"p50", {}}, loaded_row{"p99", {.ratio = 10, .at_most = {}, .why = {}}},
        loaded_row{"p99.9", {.ratio = 1, .at_most = 200, .why = "a ceiling"}}}) {
    rows.push_back(
        {fmt::format("post -> start under load (a spinner per CPU), {}, highpri bound", l.pct),
         "us",
         better::lower,
         fmt::format("{}_us", l.pct),
         1.0,
         wq("quiesce", "loaded_workqueue"),
         {wq("oneTBB", "loaded_tbb"), wq("Boost.Asio", "loaded_asio"),
          wq("mutex+condvar", "loaded_mutex_pool")},
         l.goal});
  }
  for (const char* queue : {"bound", "unbound"}) {
    for (const char* pct : {"p50", "p99"}) {
      rows.push_back({fmt::format("post -> start, idle pool, {}, {}", pct, queue),
                      "us",
                      better::lower,
                      fmt::format("{}_us", pct),
                      1.0,
                      wq("quiesce", fmt::format("latency_workqueue/{}", queue)),
                      {wq("oneTBB", "latency_tbb"), wq("Boost.Asio", "latency_asio"),
                       wq("mutex+condvar", "latency_mutex_pool")}});
    }
  }
  rows.push_back({"read lock+unlock, 1 thread",
                  "ns",
                  better::lower,
                  "real_time",
                  1.0,
                  rcu("quiesce", "quiesce_read_lock_unlock/threads:1"),
                  {rcu("liburcu memb", "urcu_memb_read_lock_unlock/threads:1")}});
  rows.push_back({"QSBR quiescent state, 1 thread",
                  "ns",
                  better::lower,
                  "real_time",
                  1.0,
                  rcu("quiesce", "quiesce_qsbr_quiescent_state/threads:1"),
                  {rcu("liburcu qsbr", "urcu_qsbr_quiescent_state_bench/threads:1")}});
  for (const char* readers : {"0", "2"}) {
    const std::string r = readers;
    const std::string what = r == "0" ? "no readers" : "2 busy readers";
    for (const char* pct : {"p50", "p99"}) {
      if (r == "0" && std::string(pct) == "p99") continue;  // one row: the typical cost
      struct flavour {
        const char* name;
        const char* ours;
        const char* peer;
        const char* theirs;
      };
      for (const flavour& f :
           {flavour{"default", "quiesce_synchronize/", "liburcu memb", "urcu_memb_synchronize/"},
            flavour{"QSBR", "quiesce_qsbr_synchronize/", "liburcu qsbr",
                    "urcu_qsbr_synchronize/"}}) {
        rows.push_back({fmt::format("rcu_synchronize, {}, {}: {}", what, pct, f.name),
                        "us",
                        better::lower,
                        fmt::format("{}_us", pct),
                        1.0,
                        rcu("quiesce", f.ours + r),
                        {rcu(f.peer, f.theirs + r)}});
      }
    }
  }
  rows.push_back({"1M retires until barrier: default",
                  "M items/s",
                  better::higher,
                  "items_per_second",
                  1e-6,
                  rcu("quiesce", "quiesce_obj_retire_until_barrier"),
                  {rcu("liburcu memb", "urcu_memb_call_rcu_until_barrier")}});
  rows.push_back({"1M retires until barrier: QSBR",
                  "M items/s",
                  better::higher,
                  "items_per_second",
                  1e-6,
                  rcu("quiesce", "quiesce_qsbr_obj_retire_until_barrier"),
                  {rcu("liburcu qsbr", "urcu_qsbr_call_rcu_until_barrier")}});
  // A retire flood (bench_rcu: up to 10 M objects/s for 10 s, one thread, a reader
  // beside it): what quiesce holds unreclaimed is bounded by the callback limit whatever
  // the flood (liburcu's call_rcu has no bound); the resident set grows by the objects held.
  const auto limit = static_cast<double>(rcu_callback_limit());
  rows.push_back({"retire flood (up to 10 M/s, a reader): peak unreclaimed, default",
                  "k objects",
                  better::lower,
                  "peak_unreclaimed",
                  1e-3,
                  rcu("quiesce", "quiesce_retire_flood"),
                  {rcu("liburcu memb", "urcu_memb_call_rcu_flood")},
                  {.ratio = 1, .at_most = limit * 1e-3, .why = "rcu_callback_limit()"}});
  // 64-byte objects take 80 bytes of heap each (glibc's 16-byte header), so the limit's
  // worth is 80 MiB; the ceiling leaves a fifth more for the heap's own slack.
  rows.push_back(
      {"retire flood (up to 10 M/s, a reader): peak resident growth, default",
       "MiB",
       better::lower,
       "peak_rss_mib",
       1.0,
       rcu("quiesce", "quiesce_retire_flood"),
       {rcu("liburcu memb", "urcu_memb_call_rcu_flood")},
       {.ratio = 1, .at_most = limit * 96 / (1 << 20), .why = "96 bytes per object at the limit"}});
  return rows;
}

constexpr std::int64_t scaling_sizes[] = {1'000, 10'000, 100'000, 1'000'000, 10'000'000};
constexpr std::int64_t burst_sizes[] = {1, 10, 100, 1'000, 10'000, 100'000};

// ---- running a benchmark program -------------------------------------------------------

// Every repetition of every benchmark of one program's run, by run name.
using runs = std::map<std::string, std::vector<nlohmann::json>>;

fs::path self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error(fmt::format("cannot find this executable: {}", ec.message()));
  return exe.parent_path();
}

std::string tail_of(const fs::path& file, std::size_t bytes) {
  std::string all;
  try {
    all = read_file(file);
  } catch (const std::system_error&) {
    return {};  // no log: nothing to quote
  }
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

// An environment variable a benchmark program runs with, replacing this process's.
struct env_var {
  std::string name;
  std::string value;
};

// Runs `program` from `dir` with JSON output to a file, its console output to a log;
// returns its runs. `filter` is a Google Benchmark regex.
runs run_benchmark(const fs::path& dir, const std::string& program, const std::string& filter,
                   int repetitions, double min_time_s, const std::vector<env_var>& env = {}) {
  const fs::path exe = dir / program;
  if (!fs::exists(exe)) {
    throw std::runtime_error(fmt::format(
        "{} not found in {} (the release build has it: ./quiesce build)", program, dir.string()));
  }
  char tmpl[] = "/tmp/quiesce-peers-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    throw std::runtime_error(
        fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
  }
  const fs::path tmp = tmpl;
  const fs::path out = tmp / "out.json";
  const fs::path log = tmp / "console.log";
  std::vector<std::string> args = {
      exe.string(), "--benchmark_out=" + out.string(), "--benchmark_out_format=json",
      fmt::format("--benchmark_repetitions={}", repetitions),
      fmt::format("--benchmark_min_time={}", min_time_s),
      // Repetitions of quiesce and its peers alternate in a
      // random order, so that a slow spell of this noisy
      // machine does not fall on one side only.
      "--benchmark_enable_random_interleaving=true", "--benchmark_filter=" + filter};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  // This environment, with `env` in place of what it names.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string_view var = *e;
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const env_var& v) {
      return var.size() > v.name.size() && var.rfind(v.name, 0) == 0 && var[v.name.size()] == '=';
    });
    if (!replaced) env_strings.emplace_back(var);
  }
  for (const env_var& v : env)
    env_strings.push_back(v.name + "=" + v.value);
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    fs::remove_all(tmp);
    throw std::runtime_error(fmt::format("cannot run {}: {}", exe.string(), std::strerror(rc)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string tail = tail_of(log, 2000);
    fs::remove_all(tmp);
    throw std::runtime_error(fmt::format("{} failed ({}); its last output:\n{}", program,
                                         WIFEXITED(status)
                                             ? fmt::format("exit {}", WEXITSTATUS(status))
                                             : fmt::format("signal {}", WTERMSIG(status)),
                                         tail));
  }
  nlohmann::json doc;
  try {
    std::ifstream in(out);
    doc = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fs::remove_all(tmp);
    throw std::runtime_error(fmt::format("{}: unreadable JSON output: {}", program, e.what()));
  }
  fs::remove_all(tmp);
  runs result;
  for (const auto& b : doc.value("benchmarks", nlohmann::json::array())) {
    if (b.value("run_type", "") != "iteration") continue;  // aggregates are ours to compute
    if (b.contains("error_occurred") && b["error_occurred"].get<bool>()) {
      throw std::runtime_error(fmt::format("{}: {} reported an error: {}", program,
                                           b.value("name", "?"), b.value("error_message", "")));
    }
    result[b.value("run_name", b.value("name", ""))].push_back(b);
  }
  return result;
}

// The run whose name is `benchmark` followed by nothing or by Google Benchmark's own
// suffixes.
const std::vector<nlohmann::json>& find_run(const runs& all, const source& s) {
  for (const auto& [name, reps] : all) {
    if (name == s.benchmark) return reps;
    if (name.rfind(s.benchmark + "/", 0) == 0) {
      const std::string rest = name.substr(s.benchmark.size() + 1);
      if (rest.rfind("iterations:", 0) == 0 || rest.rfind("real_time", 0) == 0 ||
          rest.rfind("threads:", 0) == 0 || rest.rfind("min_time:", 0) == 0) {
        return reps;
      }
    }
  }
  throw std::runtime_error(
      fmt::format("{}: no measurement named {} in its output", s.program, s.benchmark));
}

double field_of(const nlohmann::json& rep, const std::string& field, const source& s) {
  if (!rep.contains(field)) {
    throw std::runtime_error(fmt::format("{}: {} has no field {}", s.program, s.benchmark, field));
  }
  double v = rep[field].get<double>();
  if (field == "real_time" && rep.value("time_unit", "ns") != "ns") {
    throw std::runtime_error(fmt::format("{}: {} is not timed in ns", s.program, s.benchmark));
  }
  return v;
}

sample_set samples(const std::map<std::string, runs>& by_program, const source& s,
                   const std::string& field, double scale) {
  sample_set set{.runtime = s.runtime, .values = {}};
  for (const auto& rep : find_run(by_program.at(s.program), s))
    set.values.push_back(field_of(rep, field, s) * scale);
  return set;
}

std::string fmt_value(double v) {
  if (v >= 100) return fmt::format("{:.0f}", v);
  if (v >= 10) return fmt::format("{:.1f}", v);
  if (v >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

}  // namespace

// A ceiling is printed as the table prints values, so that the two read alike.
std::string row_goal::text() const {
  if (at_most)
    return fmt::format("<= {}{}", fmt_value(*at_most), why.empty() ? "" : " (" + why + ")");
  return fmt::format(">= {:g}x", ratio);
}

namespace {

// "median (min-max)"
std::string fmt_set(const sample_set& s) {
  return fmt::format("{} ({}-{})", fmt_value(s.median()), fmt_value(s.min()), fmt_value(s.max()));
}

nlohmann::json set_json(const sample_set& s) {
  return {{"runtime", s.runtime},
          {"values", s.values},
          {"median", s.median()},
          {"min", s.min()},
          {"max", s.max()}};
}

// The hashing table: bench_verity once per SHA-256 implementation this CPU runs.
void run_hashing(const fs::path& dir, int repetitions, double min_time_s, bool every,
                 peers_result& result) {
  const verity::sha256_choice& choice = verity::sha256_hashing();
  result.sha256_chosen = fmt::format("{} ({})", choice.chosen, choice.why);
  if (!fs::exists(dir / "bench_verity")) {
    result.hashing_skipped =
        fmt::format("bench_verity is not built in {} (the release preset builds it)", dir.string());
    return;
  }
  for (const verity::sha256_choice::row& row : choice.rows) {
    if (row.mb_per_s <= 0) {
      result.sha256_not_here.push_back(fmt::format("{} ({})", row.name, row.not_here));
      continue;
    }
    if (!every && row.name != "openssl" && row.name != choice.chosen) {
      result.sha256_left_out.push_back(row.name);
      continue;
    }
    fmt::print(stderr, "quiesce bench peers: running bench_verity with SHA-256 {}...\n", row.name);
    const std::string alone =
        row.name == "openssl" ? "BM_openssl_sha256" : "BM_sha256_kernel/" + row.name;
    std::map<std::string, runs> by_program;
    by_program["bench_verity"] =
        run_benchmark(dir, "bench_verity",
                      "^(BM_build_tree|BM_verified_sequential/bio_kib:1024|" + alone + ")(/|$)",
                      repetitions, min_time_s, {{"QUIESCE_SHA256", row.name}});
    auto verity_source = [](const std::string& benchmark) {
      return source{"quiesce", "bench_verity", benchmark};
    };
    result.hashing.push_back(
        {.sha256 = row.name,
         .lanes = row.lanes,
         .alone = samples(by_program, verity_source(alone), "bytes_per_second", 1e-6),
         .tree = samples(by_program, verity_source("BM_build_tree"), "bytes_per_second", 1e-6),
         .verify = samples(by_program, verity_source("BM_verified_sequential/bio_kib:1024"),
                           "worker_MBps", 1.0),
         .openssl = samples(by_program, verity_source("BM_build_tree"), "sha256_MBps", 1.0)});
  }
}

}  // namespace

std::string peers_unavailable(const peers_options& options) {
  const fs::path dir = options.bench_dir.empty() ? self_dir() : options.bench_dir;
  for (const char* program : {"bench_wq", "bench_rcu"}) {
    if (!fs::exists(dir / program)) {
      return fmt::format("{} is not built in {} (the release preset builds it)", program,
                         dir.string());
    }
  }
  return {};
}

void make_smoke(peers_options& options) {
  options.growth = false;
  options.every_sha256 = false;
  options.min_time_s = 0.01;
  options.flood_seconds = 0.2;
  options.size_divisor = 20;
}

peers_result run_peers(const peers_options& options) {
  if (options.repetitions < 1) throw std::invalid_argument("repetitions: at least 1");
  if (options.size_divisor < 1 || options.size_divisor > 1000)
    throw std::invalid_argument("size divisor: 1 to 1000");
  const std::uint64_t started = now_ns();
  const fs::path dir = options.bench_dir.empty() ? self_dir() : options.bench_dir;
  std::string wq_filter = "^(throughput|latency|round_trip|loaded)_";
  if (options.growth) wq_filter = "^(throughput|latency|round_trip|loaded|scaling|burst)_";
  std::map<std::string, runs> by_program;
  fmt::print(stderr, "quiesce bench peers: running bench_wq ({} repetitions)...\n",
             options.repetitions);
  by_program["bench_wq"] =
      run_benchmark(dir, "bench_wq", wq_filter, options.repetitions, options.min_time_s,
                    {{"QUIESCE_BENCH_DIVISOR", fmt::format("{}", options.size_divisor)}});
  fmt::print(stderr, "quiesce bench peers: running bench_rcu ({} repetitions)...\n",
             options.repetitions);
  by_program["bench_rcu"] =
      run_benchmark(dir, "bench_rcu", ".", options.repetitions, options.min_time_s,
                    {{"QUIESCE_FLOOD_SECONDS", fmt::format("{}", options.flood_seconds)}});

  peers_result result;
  result.repetitions = options.repetitions;
  result.size_divisor = options.size_divisor;
  for (const row_spec& spec : row_specs()) {
    peer_row row{.metric = spec.metric,
                 .unit = spec.unit,
                 .direction = spec.direction,
                 .ours = samples(by_program, spec.ours, spec.field, spec.scale),
                 .peers = {},
                 .goal = spec.goal};
    for (const source& p : spec.peers)
      row.peers.push_back(samples(by_program, p, spec.field, spec.scale));
    result.rows.push_back(std::move(row));
  }
  if (options.growth) {
    for (const char* queue : {"bound", "unbound"}) {
      for (const std::int64_t n : scaling_sizes) {
        const source s = wq("quiesce", fmt::format("scaling_throughput/{}/items:{}", queue, n));
        result.scaling.push_back({queue, n, samples(by_program, s, "items_per_second", 1e-6)});
      }
    }
    for (const std::int64_t q : burst_sizes) {
      const source s = wq("quiesce", fmt::format("burst_latency/bound/queued:{}", q));
      result.bursts.push_back({q, samples(by_program, s, "p50_us", 1.0),
                               samples(by_program, s, "p99_us", 1.0),
                               samples(by_program, s, "max_us", 1.0)});
    }
  }
  run_hashing(dir, options.repetitions, options.min_time_s, options.every_sha256, result);
  result.seconds = static_cast<double>(now_ns() - started) / 1e9;
  return result;
}

nlohmann::json peers_result::to_json() const {
  const peers_result& r = *this;
  nlohmann::json rows = nlohmann::json::array();
  for (const peer_row& row : r.rows) {
    nlohmann::json peers = nlohmann::json::array();
    for (const sample_set& p : row.peers)
      peers.push_back(set_json(p));
    rows.push_back({{"metric", row.metric},
                    {"unit", row.unit},
                    {"better", row.direction == better::higher ? "higher" : "lower"},
                    {"quiesce", set_json(row.ours)},
                    {"peers", peers},
                    {"best_peer", row.best_peer().runtime},
                    {"ratio", row.ratio()},
                    {"goal", row.goal.text()},
                    {"meets_goal", row.meets_goal()}});
  }
  nlohmann::json scaling = nlohmann::json::array();
  for (const scaling_row& s : r.scaling)
    scaling.push_back(
        {{"queue", s.queue}, {"items", s.items}, {"throughput", set_json(s.throughput)}});
  nlohmann::json bursts = nlohmann::json::array();
  for (const burst_row& b : r.bursts) {
    bursts.push_back({{"queued", b.queued},
                      {"p50_us", set_json(b.p50)},
                      {"p99_us", set_json(b.p99)},
                      {"max_us", set_json(b.max)}});
  }
  nlohmann::json hashing = nlohmann::json::array();
  for (const hashing_row& h : r.hashing) {
    hashing.push_back({{"sha256", h.sha256},
                       {"lanes", h.lanes},
                       {"alone_MBps", set_json(h.alone)},
                       {"tree_MBps", set_json(h.tree)},
                       {"verify_MBps", set_json(h.verify)},
                       {"openssl_MBps", set_json(h.openssl)},
                       {"tree_ratio", h.tree_ratio()},
                       {"verify_ratio", h.verify_ratio()}});
  }
  return {{"repetitions", r.repetitions},
          {"size_divisor", r.size_divisor},
          {"rows", rows},
          {"hashing", hashing},
          {"sha256_chosen", r.sha256_chosen},
          {"sha256_not_here", r.sha256_not_here},
          {"sha256_left_out", r.sha256_left_out},
          {"hashing_skipped", r.hashing_skipped},
          {"scaling", scaling},
          {"bursts", bursts},
          {"seconds", r.seconds}};
}

std::string peers_result::markdown() const {
  const peers_result& r = *this;
  std::string md = fmt::format(
      "Medians of {} repetitions in one run (quiesce's and the peers' repetitions interleaved "
      "in a random order), (min-max) of the repetitions. Ratio: quiesce "
      "against the best peer, >= 1.00 means quiesce is at least as good (throughput: ours / "
      "theirs; latency and cost: theirs / ours). Goal: a ratio to reach, or a ceiling (<=) "
      "that every repetition of quiesce must keep, whatever the peers do.\n\n"
      "| metric | quiesce | peers | best peer | ratio | goal |\n|---|---|---|---|---|---|\n",
      r.repetitions);
  if (r.size_divisor > 1) {
    md.insert(0, fmt::format("**Smoke run: the benchmarks' sizes divided by {} - every row ran, "
                             "and its figures measure nothing.**\n\n",
                             r.size_divisor));
  }
  for (const peer_row& row : r.rows) {
    std::string peers;
    for (const sample_set& p : row.peers)
      peers += fmt::format("{}{} {}", peers.empty() ? "" : "; ", p.runtime, fmt_set(p));
    md += fmt::format("| {} ({}) | {} | {} | {} | {:.2f}x | {}: {} |\n", row.metric, row.unit,
                      fmt_set(row.ours), peers, row.best_peer().runtime, row.ratio(),
                      row.goal.text(), row.meets_goal() ? "met" : "NOT met");
  }
  if (!r.scaling.empty()) {
    md +=
        "\nHow throughput grows with the number of items (quiesce, one poster, M items/s):\n\n"
        "| items | bound | unbound |\n|---|---|---|\n";
    const std::size_t half = r.scaling.size() / 2;
    for (std::size_t i = 0; i < half; ++i) {
      md += fmt::format("| {} | {} | {} |\n", r.scaling[i].items, fmt_set(r.scaling[i].throughput),
                        fmt_set(r.scaling[half + i].throughput));
    }
  }
  if (!r.bursts.empty()) {
    md +=
        "\nQueue-to-start of every item of a burst queued at once (quiesce, bound queue, "
        "us; >= 10,000 items per repetition):\n\n"
        "| queued at once | p50 | p99 | max |\n|---|---|---|---|\n";
    for (const burst_row& b : r.bursts) {
      md += fmt::format("| {} | {} | {} | {} |\n", b.queued, fmt_set(b.p50), fmt_set(b.p99),
                        fmt_set(b.max));
    }
  }
  if (!r.hashing_skipped.empty()) {
    md += fmt::format("\nfs-verity hashing per SHA-256 implementation: not measured ({}).\n",
                      r.hashing_skipped);
  } else if (!r.hashing.empty()) {
    md += fmt::format(
        "\nfs-verity hashing on one core, per SHA-256 implementation (bench_verity, 4 KiB "
        "blocks, MB/s): alone, a 64 MiB Merkle tree built in memory, and a verification "
        "worker's throughput on sequential 1 MiB reads, each against OpenSSL's single-stream "
        "SHA-256 measured in the same process. This machine uses {}.\n\n"
        "| SHA-256 | messages per call | alone | tree build | x OpenSSL | verification | x OpenSSL "
        "|\n|---|---|---|---|---|---|---|\n",
        r.sha256_chosen);
    for (const hashing_row& h : r.hashing) {
      md += fmt::format("| {} | {} | {} | {} | {:.2f}x | {} | {:.2f}x |\n", h.sha256, h.lanes,
                        fmt_set(h.alone), fmt_set(h.tree), h.tree_ratio(), fmt_set(h.verify),
                        h.verify_ratio());
    }
    if (!r.sha256_not_here.empty()) {
      std::string absent;
      for (const std::string& a : r.sha256_not_here)
        absent += (absent.empty() ? "" : ", ") + a;
      md += fmt::format("\nNot measured, this CPU cannot run them: {}.\n", absent);
    }
    if (!r.sha256_left_out.empty()) {
      std::string left;
      for (const std::string& a : r.sha256_left_out)
        left += (left.empty() ? "" : ", ") + a;
      md += fmt::format("\nLeft out of this quick run (`quiesce bench peers` measures them): {}.\n",
                        left);
    }
  }
  md += fmt::format("\nMeasured in {:.0f} s.\n", r.seconds);
  return md;
}

std::vector<plot_spec> peers_result::plots() const {
  const peers_result& r = *this;
  plot_spec ratios{.name = "peers-ratio",
                   .title = "The runtime against the best peer, per metric",
                   .caption =
                       "quiesce's median against the best peer's for each metric "
                       "(throughput ours / theirs, latency and cost theirs / ours): a bar "
                       "above the line at 1 is a metric where quiesce is at least as good.",
                   .xlabel = "",
                   .ylabel = "ratio to the best peer (log)",
                   .logx = false,
                   .logy = true,
                   .series = {},
                   .marks = {},
                   .xtics = {},
                   .height = 900};
  plot_series met{"goal met", {}, "boxes"}, missed{"goal not met", {}, "boxes"};
  plot_series goal{"1 = as good as the best peer", {}, "lines"};
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const peer_row& row = r.rows[i];
    const auto x = static_cast<double>(i + 1);
    (row.meets_goal() ? met : missed).points.emplace_back(x, row.ratio());
    ratios.xtics.emplace_back(x, fmt::format("{} vs {}", row.metric, row.best_peer().runtime));
  }
  goal.points = {{0.5, 1.0}, {static_cast<double>(r.rows.size()) + 0.5, 1.0}};
  ratios.series = {met, missed, goal};
  std::vector<plot_spec> out = {ratios};
  if (!r.scaling.empty()) {
    plot_spec growth{.name = "peers-scaling",
                     .title = "quiesce: throughput by the number of items queued",
                     .caption =
                         "Items per second from one poster as the amount of work grows "
                         "(median of the repetitions): the cost per item should not grow.",
                     .xlabel = "items (log)",
                     .ylabel = "M items/s",
                     .logx = true,
                     .logy = false,
                     .series = {},
                     .marks = {}};
    std::map<std::string, plot_series> by_queue;
    for (const scaling_row& s : r.scaling) {
      plot_series& series = by_queue[s.queue];
      series.title = s.queue;
      series.style = "linespoints";
      series.points.emplace_back(static_cast<double>(s.items), s.throughput.median());
    }
    for (auto& [queue, series] : by_queue)
      growth.series.push_back(std::move(series));
    out.push_back(std::move(growth));
  }
  if (!r.hashing.empty()) {
    plot_spec sha{.name = "peers-sha256",
                  .title = "fs-verity hashing per SHA-256 implementation, against OpenSSL",
                  .caption =
                      "Tree building and a verification worker on one core, each as a "
                      "multiple of OpenSSL's single-stream SHA-256 measured in the same "
                      "process (medians): bars above 1 beat what a one-stream tool can do.",
                  .xlabel = "",
                  .ylabel = "x OpenSSL's SHA-256",
                  .logx = false,
                  .logy = false,
                  .series = {},
                  .marks = {},
                  .xtics = {}};
    plot_series tree{"tree build", {}, "boxes"}, verify{"verification worker", {}, "boxes"};
    plot_series one{"1 = OpenSSL's single stream", {}, "lines"};
    for (std::size_t i = 0; i < r.hashing.size(); ++i) {
      const double x = static_cast<double>(i + 1);
      tree.points.emplace_back(x - 0.2, r.hashing[i].tree_ratio());
      verify.points.emplace_back(x + 0.2, r.hashing[i].verify_ratio());
      sha.xtics.emplace_back(x, r.hashing[i].sha256);
    }
    one.points = {{0.5, 1.0}, {static_cast<double>(r.hashing.size()) + 0.5, 1.0}};
    sha.series = {tree, verify, one};
    out.push_back(std::move(sha));
  }
  return out;
}

}  // namespace quiesce::experiments
