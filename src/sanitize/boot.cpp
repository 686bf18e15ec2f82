// The boot of seed 003: a sanitizer thread registered with RCU Tasks, and a boot sequence
// whose BPF trampoline attach (register_ftrace_direct -> synchronize_rcu_tasks) waits for a
// Tasks grace period.
#include <fmt/format.h>

#include <atomic>

#include "quiesce/clock.hpp"
#include "quiesce/log.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/sanitize.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/watchdog.hpp"

namespace quiesce::sanitize {

namespace {

// A boot step: CPU work of `work` (as systemd's units do), never a sleep.
void boot_step(std::chrono::nanoseconds work) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(work.count());
  volatile std::uint64_t x = 0;
  while (now_ns() < end)
    x = x + 1;
}

bool is_report(std::string_view line) {
  return line.find("rcu_tasks_wait_gp:") != std::string_view::npos ||
         line.find("detected stalls on threads") != std::string_view::npos ||
         line.find("blocked for more than") != std::string_view::npos;
}

}  // namespace

boot_result run_boot(const boot_options& options) {
  page_sanitizer sanitizer(options.sanitizer);  // allocates before anything is timed
  const watchdog_config saved = get_watchdog_config();
  watchdog_config cfg = saved;
  cfg.rcu_tasks_info = options.info;
  cfg.rcu_tasks_stall = options.stall;
  cfg.hung_task = options.hung;
  set_watchdog_config(cfg);
  log_capture capture(/*forward=*/false);

  boot_result r;
  r.policy = options.sanitizer.policy;
  std::atomic<bool> online{false};
  sanitize_result sres;
  named_thread ksgxd("ksgxd", [&] {
    rcu_thread_online(rcu_tasks_domain());
    online.store(true, std::memory_order_release);
    sres = sanitizer.run();
    rcu_thread_offline(rcu_tasks_domain());
  });
  while (!online.load(std::memory_order_acquire))
    std::this_thread::yield();  // starts first

  named_thread systemd("systemd", [&] {
    const std::uint64_t boot_start = now_ns();
    for (int i = 0; i < options.steps_before; ++i)
      boot_step(options.step_work);
    const std::uint64_t attach = now_ns();
    rcu_synchronize(rcu_tasks_domain());  // bpf_trampoline_update -> synchronize_rcu_tasks
    r.waiter_ms = static_cast<double>(now_ns() - attach) / 1e6;
    for (int i = 0; i < options.steps_after; ++i)
      boot_step(options.step_work);
    r.boot_ms = static_cast<double>(now_ns() - boot_start) / 1e6;
  });
  systemd.join();
  ksgxd.join();
  set_watchdog_config(saved);

  r.sanitize_ms = static_cast<double>(sres.duration_ns) / 1e6;
  r.pages = sres.pages_processed;
  r.pages_per_s = sres.duration_ns ? static_cast<double>(sres.pages_processed) * 1e9 /
                                         static_cast<double>(sres.duration_ns)
                                   : 0;
  bool in_report = false;  // a report's continuation lines start with a tab
  for (const std::string& line : capture.lines()) {
    if (is_report(line)) {
      r.reports.push_back(line);
      ++r.stall_reports;
      in_report = true;
    } else if (in_report && !line.empty() && line[0] == '\t') {
      r.reports.push_back(line);
    } else {
      in_report = false;
    }
  }
  return r;
}

}  // namespace quiesce::sanitize
