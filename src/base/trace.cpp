// SPDX-License-Identifier: Apache-2.0
#include "quiesce/trace.hpp"

#include "mutex.hpp"
#include "never_destroyed.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>
#include <unordered_set>

#include "file_io.hpp"
#include "quiesce/thread.hpp"

namespace quiesce::trace {

namespace detail {
std::atomic<bool> enabled_flag{false};
}  // namespace detail

namespace {

// One event slot. The owning thread is its only writer; exporters read it concurrently.
// seq (a per-slot sequence count) is odd while a write is in progress and equals
// 2 * (generation + 1) after the generation-th write, so a reader can tell both a torn
// read and a slot that was overwritten by a later lap of the ring. Every field is an
// atomic accessed relaxed, ordered by the seq protocol (writer: odd, release fence, data,
// release even; reader: acquire seq, data, acquire fence, seq again).
struct slot {
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint64_t> ts{0}, dur{0}, num_val{0}, num2_val{0}, num3_val{0};
  std::atomic<const char*> name{nullptr}, category{nullptr};
  std::atomic<const char*> str_key{nullptr}, str_val{nullptr};
  std::atomic<const char*> str2_key{nullptr}, str2_val{nullptr}, num_key{nullptr};
  std::atomic<const char*> num2_key{nullptr}, num3_key{nullptr};
  std::atomic<char> ph{'i'};
};

struct ring {
  ring(std::size_t cap, int tid_, std::string name)
      : slots(std::make_unique<slot[]>(cap)),
        capacity(cap),
        tid(tid_),
        thread_name(std::move(name)) {}

  void write(const event& e) noexcept {
    const std::uint64_t index = head.load(std::memory_order_relaxed);  // only we write head
    slot& s = slots[index % capacity];
    const std::uint64_t generation = index / capacity;
    s.seq.store(2 * generation + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.ts.store(e.ts_ns, std::memory_order_relaxed);
    s.dur.store(e.dur_ns, std::memory_order_relaxed);
    s.num_val.store(e.num_val, std::memory_order_relaxed);
    s.name.store(e.name, std::memory_order_relaxed);
    s.category.store(e.category, std::memory_order_relaxed);
    s.str_key.store(e.str_key, std::memory_order_relaxed);
    s.str_val.store(e.str_val, std::memory_order_relaxed);
    s.str2_key.store(e.str2_key, std::memory_order_relaxed);
    s.str2_val.store(e.str2_val, std::memory_order_relaxed);
    s.num_key.store(e.num_key, std::memory_order_relaxed);
    s.num2_key.store(e.num2_key, std::memory_order_relaxed);
    s.num2_val.store(e.num2_val, std::memory_order_relaxed);
    s.num3_key.store(e.num3_key, std::memory_order_relaxed);
    s.num3_val.store(e.num3_val, std::memory_order_relaxed);
    s.ph.store(static_cast<char>(e.ph), std::memory_order_relaxed);
    s.seq.store(2 * generation + 2, std::memory_order_release);
    head.store(index + 1, std::memory_order_release);
  }

  // Copies the event of `index` into `out`; false if it is being written or was overwritten.
  bool read(std::uint64_t index, event& out) const noexcept {
    const slot& s = slots[index % capacity];
    const std::uint64_t expected = 2 * (index / capacity) + 2;
    if (s.seq.load(std::memory_order_acquire) != expected) return false;
    out.ts_ns = s.ts.load(std::memory_order_relaxed);
    out.dur_ns = s.dur.load(std::memory_order_relaxed);
    out.num_val = s.num_val.load(std::memory_order_relaxed);
    out.name = s.name.load(std::memory_order_relaxed);
    out.category = s.category.load(std::memory_order_relaxed);
    out.str_key = s.str_key.load(std::memory_order_relaxed);
    out.str_val = s.str_val.load(std::memory_order_relaxed);
    out.str2_key = s.str2_key.load(std::memory_order_relaxed);
    out.str2_val = s.str2_val.load(std::memory_order_relaxed);
    out.num_key = s.num_key.load(std::memory_order_relaxed);
    out.num2_key = s.num2_key.load(std::memory_order_relaxed);
    out.num2_val = s.num2_val.load(std::memory_order_relaxed);
    out.num3_key = s.num3_key.load(std::memory_order_relaxed);
    out.num3_val = s.num3_val.load(std::memory_order_relaxed);
    out.ph = static_cast<phase>(s.ph.load(std::memory_order_relaxed));
    out.tid = tid;
    std::atomic_thread_fence(std::memory_order_acquire);
    return s.seq.load(std::memory_order_relaxed) == expected;
  }

  const std::unique_ptr<slot[]> slots;           // I (the slots themselves: see slot)
  const std::size_t capacity;                    // I
  const int tid;                                 // I
  const std::string thread_name;                 // I
  std::atomic<std::uint64_t> head{0};            // A: events ever written; owner stores release
  std::atomic<bool> exited{false};               // A: set by the owner's thread-exit hook
  std::atomic<std::uint64_t> cleared_before{0};  // A: clear() hides events below this index
};

struct registry {
  quiesce::detail::mutex lock{"trace registry lock"};
  std::vector<std::shared_ptr<ring>> rings QUIESCE_GUARDED_BY(lock);
  std::size_t capacity QUIESCE_GUARDED_BY(lock) = 16384;
  // Nodes are stable: a c_str() handed out outlives every caller.
  std::unordered_set<std::string> interned QUIESCE_GUARDED_BY(lock);
};

// Never destroyed: workers emit events until the process ends.
registry& reg() {
  static quiesce::detail::never_destroyed<registry> r;
  return r.get();
}

// The calling thread's ring; marks it exited when the thread ends so clear() can free it.
struct ring_handle {
  std::shared_ptr<ring> r;
  ~ring_handle() {
    if (r) r->exited.store(true, std::memory_order_release);
  }
};
thread_local ring_handle this_thread_ring;

}  // namespace

namespace detail {
void emit_slow(const event& e) noexcept {
  ring_handle& handle = this_thread_ring;
  if (!handle.r) {
    try {
      registry& r = reg();
      quiesce::detail::lock_guard guard(r.lock);
      handle.r = std::make_shared<ring>(r.capacity, this_thread_tid(), this_thread_name());
      r.rings.push_back(handle.r);
    } catch (...) {  // out of memory: drop the event rather than fail the caller
      handle.r.reset();
      return;
    }
  }
  handle.r->write(e);
}
}  // namespace detail

void enable(bool on) noexcept {
  detail::enabled_flag.store(on, std::memory_order_relaxed);
}

void set_ring_capacity(std::size_t events) {
  if (events == 0) throw std::invalid_argument("events: ring capacity must be at least 1");
  registry& r = reg();
  quiesce::detail::lock_guard guard(r.lock);
  r.capacity = events;
}

const std::string& intern_string(std::string_view s) {
  registry& r = reg();
  quiesce::detail::lock_guard guard(r.lock);
  return *r.interned.emplace(s).first;  // a node of the set: never moves
}

const char* intern(std::string_view s) {
  return intern_string(s).c_str();
}

namespace {
std::vector<std::shared_ptr<ring>> all_rings() {
  registry& r = reg();
  quiesce::detail::lock_guard guard(r.lock);
  return r.rings;
}
}  // namespace

std::vector<event> snapshot() {
  std::vector<event> events;
  for (const auto& ring : all_rings()) {
    const std::uint64_t head = ring->head.load(std::memory_order_acquire);
    const std::uint64_t first = std::max(head > ring->capacity ? head - ring->capacity : 0,
                                         ring->cleared_before.load(std::memory_order_acquire));
    event e;
    for (std::uint64_t i = first; i < head; ++i) {
      if (ring->read(i, e)) events.push_back(e);
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const event& a, const event& b) { return a.ts_ns < b.ts_ns; });
  return events;
}

void clear() {
  registry& r = reg();
  quiesce::detail::lock_guard guard(r.lock);
  // Rings of exited threads are freed. Live threads keep writing to theirs without the lock,
  // so those are not freed: their current events are hidden from later snapshots instead.
  std::erase_if(r.rings, [](const std::shared_ptr<ring>& ring) {
    return ring->exited.load(std::memory_order_acquire);
  });
  for (auto& ring : r.rings) {
    ring->cleared_before.store(ring->head.load(std::memory_order_acquire),
                               std::memory_order_release);
  }
}

std::uint64_t overwritten() {
  std::uint64_t lost = 0;
  for (const auto& ring : all_rings()) {
    const std::uint64_t head = ring->head.load(std::memory_order_acquire);
    const std::uint64_t cleared = ring->cleared_before.load(std::memory_order_acquire);
    if (head > ring->capacity && head - ring->capacity > cleared)
      lost += head - ring->capacity - cleared;
  }
  return lost;
}

std::string chrome_json() {
  const auto pid = static_cast<int>(::getpid());
  nlohmann::json events = nlohmann::json::array();
  for (const auto& ring : all_rings()) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", ring->tid},
                      {"args", {{"name", ring->thread_name}}}});
  }
  for (const event& e : snapshot()) {
    nlohmann::json j = {{"name", e.name ? e.name : "?"},
                        {"ph", std::string(1, static_cast<char>(e.ph))},
                        {"ts", static_cast<double>(e.ts_ns) / 1000.0},
                        {"pid", pid},
                        {"tid", e.tid}};
    if (e.category) j["cat"] = e.category;
    if (e.ph == phase::complete) j["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    if (e.ph == phase::instant) j["s"] = "t";  // thread-scoped instant
    nlohmann::json args = nlohmann::json::object();
    if (e.str_key) args[e.str_key] = e.str_val ? e.str_val : "";
    if (e.str2_key) args[e.str2_key] = e.str2_val ? e.str2_val : "";
    if (e.num_key) args[e.num_key] = e.num_val;
    if (e.num2_key) args[e.num2_key] = e.num2_val;
    if (e.num3_key) args[e.num3_key] = e.num3_val;
    if (!args.empty()) j["args"] = std::move(args);
    events.push_back(std::move(j));
  }
  return nlohmann::json{{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ns"},
                        {"otherData", {{"overwritten_events", overwritten()}}}}
      .dump();
}

void write_chrome_json(const std::string& path) {
  write_output_file(path, {chrome_json()});
}

}  // namespace quiesce::trace
