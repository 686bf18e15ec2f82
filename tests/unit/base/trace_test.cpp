// SPDX-License-Identifier: Apache-2.0
#include "quiesce/trace.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce {
namespace {

// Each test uses its own category, as the trace is process-global.
std::vector<trace::event> events_of(const char* category) {
  std::vector<trace::event> out;
  for (const auto& e : trace::snapshot()) {
    if (e.category && std::string(e.category) == category) out.push_back(e);
  }
  return out;
}

trace::event make(const char* name, const char* cat, std::uint64_t n) {
  trace::event e;
  e.ts_ns = now_ns();
  e.name = name;
  e.category = cat;
  e.num_key = "n";
  e.num_val = n;
  return e;
}

TEST(Trace, DisabledRecordsNothing) {
  trace::enable(false);
  trace::emit(make("x", "disabled", 1));
  EXPECT_TRUE(events_of("disabled").empty());
}

TEST(Trace, ChromeJsonParsesAndHoldsTheKernelEventNames) {
  trace::enable();
  const char* fn = trace::intern("key_garbage_collector");
  EXPECT_EQ(fn, trace::intern(std::string("key_garbage_collector")));  // same pointer
  named_thread worker("kworker/0:1", [&] {
    for (const char* name : {trace::workqueue_queue_work, trace::workqueue_activate_work,
                             trace::workqueue_execute_start, trace::workqueue_execute_end}) {
      trace::event e = make(name, "workqueue", 42);
      e.str_key = "function";
      e.str_val = fn;
      e.str2_key = "workqueue";
      e.str2_val = "events";
      trace::emit(e);
    }
    trace::event span = make(trace::rcu_grace_period_start, "rcu", 7);
    span.ph = trace::phase::complete;
    span.dur_ns = 1500;
    trace::emit(span);
  });
  worker.join();
  trace::enable(false);

  const nlohmann::json j = nlohmann::json::parse(trace::chrome_json());
  ASSERT_TRUE(j.contains("traceEvents"));
  std::set<std::string> names;
  bool saw_thread_name = false, saw_args = false, saw_dur = false;
  for (const auto& e : j["traceEvents"]) {
    names.insert(e["name"].get<std::string>());
    if (e["ph"] == "M" && e["args"]["name"] == "kworker/0:1") saw_thread_name = true;
    if (e["name"] == "workqueue_execute_start" &&
        e["args"]["function"] == "key_garbage_collector" && e["args"]["workqueue"] == "events" &&
        e["args"]["n"] == 42) {
      saw_args = true;
    }
    if (e["name"] == "rcu_grace_period_start" && e["ph"] == "X" && e["dur"] == 1.5) saw_dur = true;
  }
  for (const char* expected :
       {"workqueue_queue_work", "workqueue_activate_work", "workqueue_execute_start",
        "workqueue_execute_end", "rcu_grace_period_start"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
  EXPECT_TRUE(saw_thread_name);
  EXPECT_TRUE(saw_args);
  EXPECT_TRUE(saw_dur);
}

TEST(Trace, RingKeepsTheNewestEventsOnly) {
  trace::set_ring_capacity(8);
  trace::enable();
  std::thread t([] {  // a new thread gets a ring of the new capacity
    for (std::uint64_t i = 0; i < 20; ++i)
      trace::emit(make("e", "overwrite", i));
  });
  t.join();
  trace::enable(false);
  trace::set_ring_capacity(16384);
  EXPECT_EQ(trace::overwritten(), 12u);
  EXPECT_EQ(nlohmann::json::parse(trace::chrome_json())["otherData"]["overwritten_events"], 12u);
  const auto events = events_of("overwrite");
  ASSERT_EQ(events.size(), 8u);
  for (std::size_t i = 0; i < events.size(); ++i)
    EXPECT_EQ(events[i].num_val, 12 + i);
}

TEST(Trace, ClearHidesRecordedEvents) {
  trace::enable();
  trace::emit(make("before", "clear", 1));
  std::thread([] { trace::emit(make("exited", "clear", 2)); }).join();
  ASSERT_EQ(events_of("clear").size(), 2u);
  trace::clear();
  EXPECT_TRUE(events_of("clear").empty());
  trace::emit(make("after", "clear", 3));
  trace::enable(false);
  const auto after = events_of("clear");
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].num_val, 3u);
}

TEST(Trace, ConcurrentExportNeverSeesATornEvent) {
  // Writers overwrite small rings as fast as they can while a reader snapshots: every
  // event it sees must be whole (its fields were written together).
  trace::set_ring_capacity(64);
  trace::enable();
  std::atomic<bool> stop{false};
  const char* names[2] = {"torn-a", "torn-b"};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (std::uint64_t i = 1; !stop.load(std::memory_order_relaxed); ++i) {
        trace::event e;
        e.name = names[w];
        e.category = "torn";
        e.ts_ns = i * 2;
        e.dur_ns = i + 1;
        e.num_key = "n";
        e.num_val = i;
        e.str_key = "w";
        e.str_val = names[w];
        e.ph = trace::phase::complete;
        trace::emit(e);
      }
    });
  }
  std::size_t checked = 0, torn = 0;
  const std::uint64_t deadline = now_ns() + 60'000'000'000ull;
  while (checked < 20000 && torn == 0 && now_ns() < deadline) {
    for (const auto& e : events_of("torn")) {
      const bool whole = e.ts_ns == e.num_val * 2 && e.dur_ns == e.num_val + 1 &&
                         e.str_val == e.name && e.ph == trace::phase::complete;
      torn += !whole;
      ++checked;
    }
  }
  stop = true;
  for (auto& t : writers)
    t.join();
  trace::enable(false);
  trace::set_ring_capacity(16384);
  EXPECT_EQ(torn, 0u) << "of " << checked << " events read";
  EXPECT_GT(checked, 0u);
}

TEST(Trace, WritesJsonFileAtomically) {
  trace::enable();
  trace::emit(make("file", "file", 1));
  trace::enable(false);
  const auto path = std::filesystem::temp_directory_path() / "quiesce-trace-test.json";
  trace::write_chrome_json(path.string());
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_TRUE(j["traceEvents"].is_array());
  std::filesystem::remove(path);
  EXPECT_THROW(trace::write_chrome_json("/nonexistent-dir/x.json"), std::system_error);
  EXPECT_THROW(trace::set_ring_capacity(0), std::invalid_argument);
}

}  // namespace
}  // namespace quiesce
