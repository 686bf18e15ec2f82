// SPDX-License-Identifier: Apache-2.0
// quiesce/trace.hpp - per-thread event buffers named like the kernel's tracepoints,
// exported as Chrome trace JSON (open it in https://ui.perfetto.dev or chrome://tracing).
//
// Each thread writes to its own bounded ring (overwrite-oldest) with plain stores and no
// lock; a reader (export) may run concurrently and skips any slot that is being rewritten
// while it reads (a per-slot sequence count). When tracing is off, emit() costs one relaxed
// load and a branch.
//
// Names and string arguments are `const char*` that must outlive the trace: string
// literals, or pointers from intern().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce::trace {

// Tracepoint names used across quiesce (the kernel's, where it has them).
inline constexpr const char* workqueue_queue_work = "workqueue_queue_work";
inline constexpr const char* workqueue_activate_work = "workqueue_activate_work";
inline constexpr const char* workqueue_execute_start = "workqueue_execute_start";
inline constexpr const char* workqueue_execute_end = "workqueue_execute_end";
inline constexpr const char* rcu_grace_period_start = "rcu_grace_period_start";
inline constexpr const char* rcu_grace_period_end = "rcu_grace_period_end";
// A line logged (quiesce/log.hpp; debug excepted) - the watchdog's lockup, hog and stall
// reports among them - as an instant event named like the kernel's printk:console.
inline constexpr const char* console = "console";

// Chrome trace phases: begin/end of a span on one thread, an instant, a complete span
// (begin + duration), a counter value.
enum class phase : char { begin = 'B', end = 'E', instant = 'i', complete = 'X', counter = 'C' };

// One event as exported. Argument keys are optional (nullptr = absent).
struct event {
  std::uint64_t ts_ns = 0;   // CLOCK_MONOTONIC (quiesce::now_ns)
  std::uint64_t dur_ns = 0;  // complete events only
  const char* name = nullptr;
  const char* category = nullptr;
  const char* str_key = nullptr;   // e.g. "function"
  const char* str_val = nullptr;   // e.g. "key_garbage_collector"
  const char* str2_key = nullptr;  // e.g. "workqueue"
  const char* str2_val = nullptr;  // e.g. "events"
  const char* num_key = nullptr;   // e.g. "work"
  std::uint64_t num_val = 0;
  const char* num2_key = nullptr;  // e.g. "pool"
  std::uint64_t num2_val = 0;
  const char* num3_key = nullptr;  // e.g. "cpu"
  std::uint64_t num3_val = 0;
  phase ph = phase::instant;
  int tid = 0;  // filled in by snapshot()
};

namespace detail {
extern std::atomic<bool> enabled_flag;  // A: relaxed; enable()/disable() only toggle it
void emit_slow(const event& e) noexcept;
}  // namespace detail

// True while tracing is on. One relaxed load.
inline bool enabled() noexcept {
  return detail::enabled_flag.load(std::memory_order_relaxed);
}

// Records `e` in the calling thread's ring if tracing is on (the first event of a thread
// allocates its ring). Never blocks, never throws. The thread id is added at export.
inline void emit(const event& e) noexcept {
  if (enabled()) detail::emit_slow(e);
}

// Turns tracing on or off for the whole process. Events already recorded are kept.
void enable(bool on = true) noexcept;

// Capacity, in events, of rings created from now on (default 16384, about 1.5 MiB per
// thread). Throws std::invalid_argument if `events` is 0.
void set_ring_capacity(std::size_t events);

// Returns a pointer to a process-lifetime copy of `s` (same pointer for equal strings).
// Takes a lock: call it at setup (e.g. when a work item is named), not per event.
const char* intern(std::string_view s);
// The same copy, as a string.
const std::string& intern_string(std::string_view s);

// Every event currently held by any ring, oldest first (by timestamp). Safe while other
// threads emit; events overwritten during the copy are skipped, never torn.
std::vector<event> snapshot();

// Drops every recorded event (rings of exited threads are freed).
void clear();

// Events recorded since the last clear() that a ring has overwritten (its thread emitted
// more than the ring holds): they are missing from snapshot().
std::uint64_t overwritten();

// The snapshot as Chrome trace JSON: {"traceEvents":[...],"displayTimeUnit":"ns",
// "otherData":{"overwritten_events":overwritten()}}, with thread-name metadata so Perfetto
// labels each thread's track.
std::string chrome_json();
// Writes chrome_json() to `path` atomically (temporary file + rename), or, where `path`
// names a device or a FIFO (after symlinks: /dev/stdout), into it. Throws
// std::system_error if the file cannot be written.
void write_chrome_json(const std::string& path);

}  // namespace quiesce::trace
