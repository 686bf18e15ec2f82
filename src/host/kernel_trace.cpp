// SPDX-License-Identifier: Apache-2.0
// The kernel's workqueue tracepoints through libtracefs (kernel_trace.hpp).
#include "quiesce/host/kernel_trace.hpp"

#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "../base/mutant.hpp"
#include "tracefs_shim.h"

namespace quiesce::host {

namespace mutant {
// libtracefs takes the first tracefs in /proc/mounts, whoever mounted it (the run neither
// mounts /sys/kernel/tracing nor names it)
inline constexpr bool trace_takes_first_tracefs = QUIESCE_MUTANT(HOST_TRACE_TAKES_FIRST_TRACEFS);
}  // namespace mutant

std::vector<traced_execution> pair_executions(std::vector<workqueue_event> events,
                                              std::size_t* unpaired,
                                              std::vector<workqueue_event>* still_open) {
  std::stable_sort(
      events.begin(), events.end(),
      [](const workqueue_event& a, const workqueue_event& b) { return a.ts_ns < b.ts_ns; });
  std::map<std::pair<int, std::uint64_t>, std::uint64_t> open;  // (cpu, work) -> start
  std::vector<traced_execution> out;
  std::size_t lone = 0;
  for (const workqueue_event& e : events) {
    const auto key = std::make_pair(e.cpu, e.work);
    if (e.start) {
      if (open.count(key)) ++lone;  // a start whose end never came
      open[key] = e.ts_ns;
      continue;
    }
    const auto it = open.find(key);
    if (it == open.end()) {
      ++lone;  // started before tracing
      continue;
    }
    out.push_back({e.cpu, it->second, e.ts_ns});
    open.erase(it);
  }
  if (still_open) {
    still_open->clear();
    for (const auto& [key, ts] : open)
      still_open->push_back({true, key.first, ts, key.second});
  } else {
    lone += open.size();  // still running
  }
  std::sort(out.begin(), out.end(), [](const traced_execution& a, const traced_execution& b) {
    return a.start_ns < b.start_ns;
  });
  if (unpaired) *unpaired = lone;
  return out;
}

namespace {

// Whether `dir` lies in a tracefs (for /sys/kernel/tracing: whether tracefs is mounted there).
bool is_tracefs(const char* dir) {
  constexpr long tracefs_magic = 0x74726163;  // TRACEFS_MAGIC, include/uapi/linux/magic.h
  struct statfs st {};
  return ::statfs(dir, &st) == 0 && st.f_type == tracefs_magic;
}

constexpr const char* wq_event_system = "workqueue";
constexpr const char* execute_start_event = "workqueue_execute_start";
constexpr const char* execute_end_event = "workqueue_execute_end";

// The kernel address of `symbol` from /proc/kallsyms, 0 if absent or hidden.
std::uint64_t kallsyms_address(const std::string& symbol) {
  std::ifstream in("/proc/kallsyms");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string addr, type, name;
    if (!(f >> addr >> type >> name) || name != symbol) continue;
    return std::stoull(addr, nullptr, 16);
  }
  return 0;
}

struct collect {
  std::vector<workqueue_event>* events;
  int start_id, end_id;
  std::uint64_t* lost;
};

void on_record(void* context, int id, int cpu, unsigned long long ts, unsigned long long work,
               long long missed) {
  auto* c = static_cast<collect*>(context);
  if (missed > 0) *c->lost += static_cast<std::uint64_t>(missed);
  if (id != c->start_id && id != c->end_id) return;
  c->events->push_back({id == c->start_id, cpu, ts, work});
}

}  // namespace

struct workqueue_trace::impl {
  qtf_instance* instance = nullptr;
  qtf_events* events = nullptr;
  int start_id = -1, end_id = -1;
  ~impl() {
    if (events) qtf_events_free(events);
    if (instance) qtf_instance_free(instance);
  }
};

workqueue_trace::workqueue_trace(const std::string& function) : impl_(std::make_unique<impl>()) {
  if (::geteuid() != 0) throw std::runtime_error("tracing the kernel needs root");
  // Each undo action is registered before the step it undoes, so a signal arriving between
  // the two still undoes it (undoing a step that did not happen fails harmlessly).
  // The kernel's own place for tracefs, and only it: libtracefs would take the first tracefs
  // in /proc/mounts, which may be another process's passing mount - one that goes away with
  // this run's instance under it (a test's view in /tmp did so: the instance was left behind).
  constexpr const char* tracefs_root = "/sys/kernel/tracing";
  if (!mutant::trace_takes_first_tracefs && !is_tracefs(tracefs_root)) {
    unmount_.emplace(exit_cleanup::unmount(tracefs_root));
    if (::mount("nodev", tracefs_root, "tracefs", 0, nullptr) != 0) {
      throw std::runtime_error(
          fmt::format("tracefs is not mounted at {} and mounting it there failed: {}", tracefs_root,
                      std::strerror(errno)));
    }
  }
  if (!mutant::trace_takes_first_tracefs && qtf_set_tracing_dir(tracefs_root) != 0)
    throw std::runtime_error(fmt::format("tracefs: cannot use {}", tracefs_root));
  const std::string name = fmt::format("quiesce-{}", ::getpid());
  instance_path_ = fmt::format("{}/instances/{}", qtf_tracing_dir(), name);
  remove_instance_.emplace(exit_cleanup::remove_empty_dir(instance_path_));
  impl_->instance = qtf_instance_create(name.c_str());
  if (!impl_->instance) {
    throw std::runtime_error(
        fmt::format("tracefs: cannot create instance '{}': {}", name, std::strerror(errno)));
  }
  if (qtf_instance_file_write(impl_->instance, "trace_clock", "mono") < 0) {
    throw std::runtime_error("tracefs: the 'mono' trace clock is not available");
  }
  // The kernel names a function-pointer field's symbol with the .function modifier (6.x);
  // older kernels take the address.
  std::string filter = fmt::format("function.function == {}", function);
  for (const char* ev : {execute_start_event, execute_end_event}) {
    if (qtf_event_file_write(impl_->instance, wq_event_system, ev, "filter", filter.c_str()) >= 0)
      continue;
    const std::uint64_t addr = kallsyms_address(function);
    if (addr == 0) {
      throw std::runtime_error(fmt::format(
          "tracefs: cannot filter {} on '{}' (no .function filters, and /proc/kallsyms hides or "
          "lacks its address)",
          ev, function));
    }
    filter = fmt::format("function == 0x{:x}", addr);
    if (qtf_event_file_write(impl_->instance, wq_event_system, ev, "filter", filter.c_str()) < 0) {
      throw std::runtime_error(fmt::format("tracefs: the filter '{}' was refused", filter));
    }
  }
  const char* const formats[] = {execute_start_event, execute_end_event, nullptr};
  impl_->events = qtf_events_load(wq_event_system, formats);
  if (!impl_->events)
    throw std::runtime_error("tracefs: cannot read the workqueue events' formats");
  impl_->start_id = qtf_event_id(impl_->events, wq_event_system, execute_start_event);
  impl_->end_id = qtf_event_id(impl_->events, wq_event_system, execute_end_event);
  if (impl_->start_id < 0 || impl_->end_id < 0) {
    throw std::runtime_error("tracefs: no workqueue_execute_start/end events");
  }
  for (const char* ev : {execute_start_event, execute_end_event}) {
    if (qtf_event_enable(impl_->instance, wq_event_system, ev) < 0) {
      throw std::runtime_error(fmt::format("tracefs: cannot enable {}", ev));
    }
  }
  qtf_trace_on(impl_->instance);
}

workqueue_trace::~workqueue_trace() {
  if (impl_ && impl_->instance) {
    qtf_trace_off(impl_->instance);
    qtf_event_disable_all(impl_->instance);
  }
  impl_.reset();
  remove_instance_.reset();  // rmdir the instance, then
  unmount_.reset();          // unmount tracefs if we mounted it
}

std::vector<traced_execution> workqueue_trace::take() {
  std::vector<workqueue_event> events = std::move(open_);
  open_.clear();
  collect c{&events, impl_->start_id, impl_->end_id, &lost_};
  qtf_read(impl_->events, impl_->instance, "work", on_record, &c);
  return pair_executions(std::move(events), nullptr, &open_);
}

}  // namespace quiesce::host

#if defined(__SANITIZE_ADDRESS__)
// libtracefs keeps the tracing directory it found in a process-lifetime strdup'd string
// (never freed by design); LeakSanitizer would report it at exit of every traced program.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libtracefs.so\n";
}
// ...and says nothing about it (a program's output stays its own).
extern "C" const char* __lsan_default_options() {
  return "print_suppressions=0";
}
#endif
