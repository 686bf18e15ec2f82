// SPDX-License-Identifier: Apache-2.0
// Seed 004's cold-start experiment through a quiesce verity mount (verity_mount_bench.hpp).
#include "quiesce/experiments/verity_mount_bench.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "../base/random.hpp"
#include "quiesce/clock.hpp"
#include "quiesce/host/exit_cleanup.hpp"
#include "quiesce/host/temp_dir.hpp"
#include "quiesce/mount/verity_fs.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::experiments {

namespace fs = std::filesystem;

namespace {

// The app's files: sizes from small resources to a large library, in a fixed pattern,
// scaled so that they add up to `total` bytes.
std::vector<std::size_t> app_file_sizes(std::size_t total) {
  static constexpr std::size_t pattern_kib[] = {16, 64, 4096, 256, 16, 1024, 64, 16, 256, 2048};
  std::size_t pattern_total = 0;
  for (std::size_t k : pattern_kib)
    pattern_total += k * 1024;
  std::vector<std::size_t> sizes;
  std::size_t sum = 0;
  for (std::size_t i = 0; sum < total; ++i) {
    const std::size_t k = pattern_kib[i % std::size(pattern_kib)];
    // Repeat the pattern (scaled down if the whole app is smaller than one pattern).
    std::size_t size = total < pattern_total
                           ? std::max<std::size_t>(4096, k * 1024 * total / pattern_total)
                           : k * 1024;
    size = std::min(size, total - sum);
    sizes.push_back(size + i % 7);  // not all block-aligned
    sum += size;
  }
  return sizes;
}

// One app process's reads, in a buffer allocated before fork: the child only makes system
// calls (open, pread, close, clock_gettime, write) - a forked child of a multithreaded
// process may call nothing else.
struct app_plan {
  std::vector<std::string> paths;
  std::vector<std::size_t> sizes;
  std::vector<std::uint64_t> latencies;  // filled in the child, sent back through a pipe
  std::vector<char> buf;
};

// The child: reads every file (in an order of its own), even-indexed ones whole with 64 KiB
// reads, odd ones with 8 random reads of 4-32 KiB; writes [n][latency...][total ns] to `out`
// and exits 0, or 1 at the first failure.
[[noreturn]] void run_app(app_plan& plan, int index, int out) {
  std::uint64_t rng = static_cast<std::uint64_t>(index) * 2654435761u + 1;
  const std::size_t nfiles = plan.paths.size();
  std::size_t n = 0;
  const std::uint64_t began = now_ns();
  for (std::size_t k = 0; k < nfiles; ++k) {
    const std::size_t f = (k + static_cast<std::size_t>(index) * 3) % nfiles;
    const int fd = ::open(plan.paths[f].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) ::_exit(1);
    const std::size_t size = plan.sizes[f];
    auto read_at = [&](std::uint64_t off, std::size_t len) {
      const std::uint64_t t0 = now_ns();
      const ssize_t got = ::pread(fd, plan.buf.data(), len, static_cast<off_t>(off));
      if (got < 0) ::_exit(1);
      if (n < plan.latencies.size()) plan.latencies[n++] = now_ns() - t0;
    };
    if (f % 2 == 0) {
      for (std::uint64_t off = 0; off < size; off += 64 * 1024)
        read_at(off, 64 * 1024);
    } else {
      for (int r = 0; r < 8; ++r) {
        const std::size_t len = 4096 * (1 + xorshift64(rng) % 8);
        read_at(size > len ? xorshift64(rng) % (size - len) : 0, len);
      }
    }
    ::close(fd);
  }
  const std::uint64_t total = now_ns() - began;
  const std::uint64_t count = n;
  bool ok = ::write(out, &count, sizeof count) == sizeof count;
  const auto bytes = static_cast<ssize_t>(n * sizeof(std::uint64_t));
  ok = ok && ::write(out, plan.latencies.data(), static_cast<std::size_t>(bytes)) == bytes;
  ok = ok && ::write(out, &total, sizeof total) == sizeof total;
  ::_exit(ok ? 0 : 1);
}

bool read_exact(int fd, void* p, std::size_t len) {
  auto* c = static_cast<char*>(p);
  while (len > 0) {
    const ssize_t n = ::read(fd, c, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    c += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

bool drop_caches() {
  ::sync();
  std::ofstream out("/proc/sys/vm/drop_caches");
  out << "3\n";
  out.flush();
  return static_cast<bool>(out);
}

struct run_figures {
  histogram sched_ns, read_ns;
  double run_delay_ms = 0, cold_start_ms = 0;
};

// The sides of the cold start: the two queues, and the files without sidecars.
enum class side { unbound, bound, plain };

// The name of a file's copy without a sidecar, beside it in SOURCE (one directory: the
// exit cleanup removes a directory and the files directly in it).
std::string plain_name(const std::string& name) {
  return "plain-" + name;
}

// A mount of `src` on `mnt` verifying on the per-CPU queue or the unbound one, served by a
// thread of its own until this goes (unmounted on every way out, a signal included, before
// the mountpoint is removed).
class served_mount {
 public:
  served_mount(const fs::path& src, const fs::path& mnt, bool unbound, unsigned read_ahead_kb)
      : unmount_on_exit_(host::exit_cleanup::unmount(mnt.string())),
        m_(src, mnt, options(unbound, read_ahead_kb)),
        server_([this] { m_.serve(); }) {}
  ~served_mount() {
    m_.unmount();
    server_.join();
  }
  mount::verity_mount& get() { return m_; }

 private:
  static mount::verity_mount_options options(bool unbound, unsigned read_ahead_kb) {
    mount::verity_mount_options mo;
    mo.unbound = unbound;
    mo.read_ahead_kb = read_ahead_kb;
    mo.handle_signals = false;  // the bench's own exit discipline stays in charge
    return mo;
  }
  const host::exit_cleanup unmount_on_exit_;
  mount::verity_mount m_;
  std::thread server_;
};

// One cold start on a mount verifying on the given queue, or reading the copies without
// sidecars (side::plain, on a per-CPU mount: nothing is queued).
run_figures cold_start(const fs::path& src, const fs::path& mnt, side how,
                       const verity_mount_bench_config& o, const std::vector<std::string>& names,
                       const std::vector<std::size_t>& sizes, bool drop) {
  served_mount served(src, mnt, how == side::unbound, o.read_ahead_kb);
  mount::verity_mount& m = served.get();

  app_plan plan;
  std::size_t max_reads = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    plan.paths.push_back(
        (how == side::plain ? mnt / plain_name(names[i]) : mnt / names[i]).string());
    plan.sizes.push_back(sizes[i]);
    max_reads += i % 2 == 0 ? sizes[i] / (64 * 1024) + 1 : 8;
  }
  plan.latencies.assign(max_reads, 0);
  plan.buf.assign(64 * 1024, 0);

  if (drop && !drop_caches()) throw std::runtime_error("cannot drop the page cache");
  std::atomic<bool> loading{true};
  std::vector<named_thread> load;
  for (int i = 0; i < o.load; ++i) {
    load.emplace_back(fmt::format("load{}", i), [&] {
      std::uint64_t x = 1;
      while (loading.load(std::memory_order_relaxed))
        xorshift64(x);
    });
  }
  const wq_stats before = m.verify_queue().stats();
  struct child {
    pid_t pid;
    int out;
  };
  std::vector<child> children;
  for (int a = 0; a < o.apps; ++a) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      run_app(plan, a, p[1]);
    }
    ::close(p[1]);
    if (pid < 0) {
      ::close(p[0]);
      throw std::system_error(errno, std::generic_category(), "fork");
    }
    children.push_back({pid, p[0]});
  }
  run_figures r;
  std::string failed;
  for (const child& c : children) {
    std::uint64_t count = 0, total = 0;
    std::vector<std::uint64_t> lat;
    bool ok = read_exact(c.out, &count, sizeof count) && count <= max_reads;
    if (ok) {
      lat.resize(count);
      ok = read_exact(c.out, lat.data(), count * sizeof(std::uint64_t)) &&
           read_exact(c.out, &total, sizeof total);
    }
    ::close(c.out);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed = "an app process failed to read through the mount";
      continue;
    }
    for (std::uint64_t ns : lat)
      r.read_ns.record(ns);
    r.cold_start_ms = std::max(r.cold_start_ms, static_cast<double>(total) / 1e6);
  }
  const wq_stats after = m.verify_queue().stats();
  loading = false;
  load.clear();
  if (!failed.empty()) throw std::runtime_error(failed);
  r.sched_ns = after.queue_to_start_ns;
  r.run_delay_ms =
      static_cast<double>(after.workers.run_delay_ns - before.workers.run_delay_ns) / 1e6;
  return r;
}

void add_run(verity_mount_side& s, const run_figures& r) {
  s.sched_ns.merge(r.sched_ns);
  s.read_ns.merge(r.read_ns);
  s.run_delay_ms.runs.push_back(r.run_delay_ms);
  s.cold_start_ms.runs.push_back(r.cold_start_ms);
  s.read_p99_us.runs.push_back(r.read_ns.percentile(99) / 1e3);
}

// `size` pseudo-random bytes from `x` into a new file at `path`, and the same bytes into
// `copy`.
void write_random(const fs::path& path, const fs::path& copy, std::size_t size, std::uint64_t& x) {
  std::ofstream out(path, std::ios::binary), out_copy(copy, std::ios::binary);
  std::vector<std::uint64_t> chunk(1 << 17);  // 1 MiB
  for (std::size_t done = 0; done < size;) {
    for (std::uint64_t& w : chunk)
      w = xorshift64(x);
    const std::size_t n = std::min(size - done, chunk.size() * sizeof(std::uint64_t));
    out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n));
    out_copy.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n));
    done += n;
  }
  out.close();
  out_copy.close();
  if (!out || !out_copy) throw std::runtime_error("cannot write " + path.string());
}

// Milliseconds to read `path` whole with reads of buf.size() bytes.
double read_whole_ms(const fs::path& path, std::vector<char>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path.string());
  const std::uint64_t t0 = now_ns();
  ssize_t n = 0;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
  }
  const int err = errno;
  const std::uint64_t t1 = now_ns();
  ::close(fd);
  if (n < 0) throw std::system_error(err, std::generic_category(), "read " + path.string());
  return static_cast<double>(t1 - t0) / 1e6;
}

// This process's CPU time so far (every thread, user and system), in ms.
double process_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace

double verity_mount_seq::cold_vs_fuse() const {
  return verified.cold_ms.median() > 0 ? fuse.cold_ms.median() / verified.cold_ms.median() : 0;
}

double verity_mount_seq::warm_vs_direct() const {
  return verified.warm_ms.median() > 0 ? direct.warm_ms.median() / verified.warm_ms.median() : 0;
}

nlohmann::json seq_read_side::to_json() const {
  return {{"cold_ms", cold_ms.to_json()},
          {"warm_ms", warm_ms.to_json()},
          {"cold_cpu_ms", cold_cpu_ms.to_json()}};
}

nlohmann::json verity_mount_seq::to_json() const {
  return {{"mib", mib},
          {"direct", direct.to_json()},
          {"fuse", fuse.to_json()},
          {"verified", verified.to_json()},
          {"verified_cold_vs_fuse", cold_vs_fuse()},
          {"verified_warm_vs_direct", warm_vs_direct()}};
}

nlohmann::json verity_mount_side::to_json() const {
  return {{"queue", queue},
          {"queue_to_start_us",
           {{"p50", sched_ns.percentile(50) / 1e3},
            {"p99", sched_ns.percentile(99) / 1e3},
            {"max", sched_ns.max() / 1e3},
            {"n", sched_ns.count()}}},
          {"read_latency_us",
           {{"p50", read_ns.percentile(50) / 1e3},
            {"p99", read_ns.percentile(99) / 1e3},
            {"n", read_ns.count()}}},
          {"queue_to_start_cdf", histogram_cdf(sched_ns, 1e-3)},
          {"read_latency_cdf", histogram_cdf(read_ns, 1e-3)},
          {"run_delay_ms", run_delay_ms.to_json()},
          {"cold_start_ms", cold_start_ms.to_json()},
          {"read_p99_us", read_p99_us.to_json()}};
}

nlohmann::json verity_mount_bench_result::to_json() const {
  return {{"app_mib", config.app_mib},
          {"files", files},
          {"apps", config.apps},
          {"load_threads", config.load},
          {"runs", config.runs},
          {"caches_dropped", caches_dropped},
          {"read_ahead_kb", config.read_ahead_kb},
          {"bound", bound.to_json()},
          {"unbound", unbound.to_json()},
          {"plain", plain.to_json()},
          {"sequential", seq ? seq->to_json() : nlohmann::json()}};
}

std::string verity_mount_bench_result::markdown() const {
  std::string md = fmt::format(
      "App cold start through `quiesce verity mount`: {} processes each read {} files ({} MiB) "
      "through the mount{}, {} load thread{}; {} run{} of each queue, alternating. Medians "
      "over the runs (range).\n\n",
      config.apps, files, config.app_mib,
      caches_dropped ? ", the page cache dropped before each start"
                     : " (page cache NOT dropped: not root)",
      config.load, config.load == 1 ? "" : "s", config.runs, config.runs == 1 ? "" : "s");
  const auto cell = [](const run_spread& s, const char* f) {
    return fmt::format("{} ({} .. {})", fmt::format(fmt::runtime(f), s.median()),
                       fmt::format(fmt::runtime(f), s.min()),
                       fmt::format(fmt::runtime(f), s.max()));
  };
  md +=
      "| | unbound (before) | per-CPU highpri (the patch) | no sidecars (FUSE alone) |\n"
      "|---|---|---|---|\n";
  md += fmt::format("| verification workers' time runnable, ms | {} | {} | - |\n",
                    cell(unbound.run_delay_ms, "{:.2f}"), cell(bound.run_delay_ms, "{:.2f}"));
  md += fmt::format("| cold start (slowest app), ms | {} | {} | {} |\n",
                    cell(unbound.cold_start_ms, "{:.1f}"), cell(bound.cold_start_ms, "{:.1f}"),
                    cell(plain.cold_start_ms, "{:.1f}"));
  md += fmt::format("| read p99, us | {} | {} | {} |\n", cell(unbound.read_p99_us, "{:.0f}"),
                    cell(bound.read_p99_us, "{:.0f}"), cell(plain.read_p99_us, "{:.0f}"));
  md += fmt::format(
      "| queue->start p50 / p99, us (pooled) | {:.1f} / {:.1f} | {:.1f} / {:.1f} | - |\n",
      unbound.sched_ns.percentile(50) / 1e3, unbound.sched_ns.percentile(99) / 1e3,
      bound.sched_ns.percentile(50) / 1e3, bound.sched_ns.percentile(99) / 1e3);
  const auto change = [](double before, double after) {
    return before > 0 ? (after - before) / before * 100 : 0.0;
  };
  md += "\n" + ours_sentence(
                   bought(),
                   {watched("read p99, us", better::lower, unbound.read_p99_us, bound.read_p99_us),
                    watched("queue->start p99, us (pooled)", better::lower,
                            pooled(static_cast<double>(unbound.sched_ns.percentile(99)) / 1e3),
                            pooled(static_cast<double>(bound.sched_ns.percentile(99)) / 1e3))});
  md += fmt::format(
      " Medians: time runnable {:+.0f}%, cold start {:+.1f}% (seed: -96% time runnable, ~30 ms "
      "faster cold start on an ARM64 phone).\n",
      change(unbound.run_delay_ms.median(), bound.run_delay_ms.median()),
      change(unbound.cold_start_ms.median(), bound.cold_start_ms.median()));
  if (seq) {
    md += fmt::format(
        "\nSequential read of one {} MiB file, 1 MiB reads, {}, mount readahead {}; medians "
        "of {} (range), ms:\n\n"
        "| | direct from SOURCE | mount, no sidecar | mount, verified | verified vs |\n"
        "|---|---|---|---|---|\n",
        seq->mib, caches_dropped ? "cold = page cache dropped" : "cache NOT dropped: not root",
        config.read_ahead_kb ? fmt::format("{} KiB", config.read_ahead_kb) : "the kernel's",
        config.runs);
    md += fmt::format("| cold | {} | {} | {} | {:.2f}x no sidecar (goal >= 0.9x) |\n",
                      cell(seq->direct.cold_ms, "{:.0f}"), cell(seq->fuse.cold_ms, "{:.0f}"),
                      cell(seq->verified.cold_ms, "{:.0f}"), seq->cold_vs_fuse());
    md += fmt::format("| warm | {} | {} | {} | {:.2f}x direct (goal >= 0.95x) |\n",
                      cell(seq->direct.warm_ms, "{:.0f}"), cell(seq->fuse.warm_ms, "{:.0f}"),
                      cell(seq->verified.warm_ms, "{:.0f}"), seq->warm_vs_direct());
    md +=
        fmt::format("| cold, CPU time (all threads) | {} | {} | {} | +{:.0f} ms to verify |\n",
                    cell(seq->direct.cold_cpu_ms, "{:.0f}"), cell(seq->fuse.cold_cpu_ms, "{:.0f}"),
                    cell(seq->verified.cold_cpu_ms, "{:.0f}"),
                    seq->verified.cold_cpu_ms.median() - seq->fuse.cold_cpu_ms.median());
  }
  return md;
}

std::optional<std::string> verity_mount_bench_unusable() {
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return fmt::format("/dev/fuse: {}", std::strerror(errno));
  }
  return std::nullopt;
}

std::size_t verity_mount_bench_steps(const verity_mount_bench_config& o) {
  return static_cast<std::size_t>(o.runs) * (o.seq_mib > 0 ? 4 : 3);
}

std::uint64_t verity_mount_bench_disk_bytes(const verity_mount_bench_config& o) {
  // Each file twice (with a sidecar, and the copy without), the sidecars under 1/64.
  const std::uint64_t bytes = (std::uint64_t{o.app_mib} + o.seq_mib) << 20;
  return 2 * bytes + bytes / 64 + (std::uint64_t{1} << 20);
}

verity_mount_bench_result run_verity_mount_bench(
    const verity_mount_bench_config& o, const std::function<void(const std::string&)>& step) {
  if (auto why = verity_mount_bench_unusable()) throw std::runtime_error(*why);
  const host::temp_dir src("verity-app");  // the files, their sidecars and plain- copies
  const host::temp_dir mnt("verity-mnt");  // the mountpoint, empty
  const std::vector<std::size_t> sizes = app_file_sizes(o.app_mib << 20);
  std::vector<std::string> names;
  std::uint64_t x = 0x9e3779b97f4a7c15u;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    names.push_back(fmt::format("{}{:03}", i % 2 == 0 ? "lib" : "res", i));
    write_random(src.path() / names.back(), src.path() / plain_name(names.back()), sizes[i], x);
    verity::enable(src.path() / names.back(), verity::params{});
  }
  verity_mount_bench_result r;
  r.config = o;
  r.files = names.size();
  r.caches_dropped = ::geteuid() == 0;
  r.bound.queue = "fsverity_read_queue";
  r.unbound.queue = "fsverity_read_queue_unbound";
  r.plain.queue = "none: no sidecars, nothing verified";
  static constexpr side order[] = {side::unbound, side::bound, side::plain};
  for (int run = 0; run < o.runs; ++run) {
    for (std::size_t k = 0; k < std::size(order); ++k) {
      const side how = order[(k + static_cast<std::size_t>(run)) % std::size(order)];
      verity_mount_side& s = how == side::unbound ? r.unbound
                             : how == side::bound ? r.bound
                                                  : r.plain;
      if (step) step(fmt::format("run {}: {}", run + 1, s.queue));
      add_run(s, cold_start(src.path(), mnt.path(), how, o, names, sizes, r.caches_dropped));
    }
  }
  if (o.seq_mib == 0) return r;

  // The sequential row: one mount (per-CPU queue) for every run.
  const fs::path seq = src.path() / "seq", seq_plain = src.path() / plain_name("seq");
  write_random(seq, seq_plain, o.seq_mib << 20, x);
  verity::enable(seq, verity::params{});
  r.seq.emplace();
  r.seq->mib = o.seq_mib;
  served_mount served(src.path(), mnt.path(), false, o.read_ahead_kb);
  std::vector<char> buf(1 << 20);
  const std::pair<seq_read_side*, fs::path> ways[] = {
      {&r.seq->direct, seq},
      {&r.seq->fuse, mnt.path() / plain_name("seq")},
      {&r.seq->verified, mnt.path() / "seq"}};
  for (int run = 0; run < o.runs; ++run) {
    if (step) step(fmt::format("run {}: sequential reads", run + 1));
    for (const auto& [way, path] : ways) {
      if (r.caches_dropped && !drop_caches())
        throw std::runtime_error("cannot drop the page cache");
      const double cpu0 = process_cpu_ms();
      way->cold_ms.runs.push_back(read_whole_ms(path, buf));
      way->cold_cpu_ms.runs.push_back(process_cpu_ms() - cpu0);
      way->warm_ms.runs.push_back(read_whole_ms(path, buf));
    }
  }
  return r;
}

std::vector<plot_spec> verity_mount_bench_result::plots() const {
  const std::string setting =
      fmt::format("{} app processes, {} load thread{}{}", config.apps, config.load,
                  config.load == 1 ? "" : "s", caches_dropped ? "" : ", page cache warm");
  const auto cdf = [&](const char* name, const char* what, const char* caption,
                       std::vector<std::pair<double, double>> (*points)(const verity_mount_side&)) {
    return plot_spec{
        .name = name,
        .title = fmt::format("Seed 004 through the mount: {} (CDF; {})", what, setting),
        .caption = caption,
        .xlabel = fmt::format("{}, us (log; histogram bucket upper bounds)", what),
        .ylabel = "fraction <= x",
        .logx = true,
        .logy = false,
        .series = {{fmt::format("unbound ({})", unbound.queue), points(unbound), "lines"},
                   {fmt::format("per-CPU ({})", bound.queue), points(bound), "lines"}},
        .marks = {}};
  };
  plot_spec per_run{
      .name = "verity-mount-per-run",
      .title = fmt::format("Seed 004 through the mount: each run ({})", setting),
      .caption =
          "Per run: how long the verification workers waited on a run queue (schedstat "
          "run_delay, the seed's metric: -96% on the phone) and the cold start (the "
          "slowest app); lower is better.",
      .xlabel = "run",
      .ylabel = "ms",
      .logx = false,
      .logy = false,
      .series = {},
      .marks = {}};
  const auto by_run = [](const run_spread& s) {
    std::vector<std::pair<double, double>> out;
    for (std::size_t i = 0; i < s.runs.size(); ++i)
      out.emplace_back(static_cast<double>(i + 1), s.runs[i]);
    return out;
  };
  per_run.series = {{"unbound: workers runnable", by_run(unbound.run_delay_ms), "linespoints"},
                    {"per-CPU: workers runnable", by_run(bound.run_delay_ms), "linespoints"},
                    {"unbound: cold start", by_run(unbound.cold_start_ms), "linespoints"},
                    {"per-CPU: cold start", by_run(bound.cold_start_ms), "linespoints"}};
  per_run.xtic_step = 1;
  return {cdf("verity-mount-queue-to-start", "queue -> start of verification",
              "Each verification work item's queue -> start through the kernel, every run "
              "pooled: further left is better.",
              [](const verity_mount_side& s) { return histogram_cdf(s.sched_ns, 1e-3); }),
          cdf("verity-mount-read", "read(2) latency of the apps",
              "Every read(2) the app processes made through the mount, every run pooled: "
              "further left is better.",
              [](const verity_mount_side& s) { return histogram_cdf(s.read_ns, 1e-3); }),
          per_run};
}

std::vector<bought_row> verity_mount_bench_result::bought() const {
  return {{.seed = "004",
           .metric = "verification workers' time runnable, ms",
           .published = "-96% (unbound -> per-CPU highpri)",
           .seed_way = better::lower,
           .before = unbound.run_delay_ms,
           .after = bound.run_delay_ms,
           .note = "an app cold start through the mount"},
          {.seed = "004",
           .metric = "app cold start (the slowest app), ms",
           .published = "not published (the seed measured the workers)",
           .seed_way = better::lower,
           .before = unbound.cold_start_ms,
           .after = bound.cold_start_ms,
           .note = "through the mount"}};
}

}  // namespace quiesce::experiments
