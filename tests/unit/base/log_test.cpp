// SPDX-License-Identifier: Apache-2.0
#include "quiesce/log.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace quiesce {
namespace {

TEST(Log, CaptureReceivesEachLine) {
  log_capture capture;
  log(log_level::warning, "workqueue: f hogged CPU for >10000us 4 times");
  log(log_level::err, "first\nsecond");
  const auto lines = capture.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "workqueue: f hogged CPU for >10000us 4 times");
  EXPECT_EQ(lines[1], "first");
  EXPECT_EQ(lines[2], "second");
  EXPECT_EQ(capture.count("hogged CPU"), 1u);
  EXPECT_EQ(capture.count("nowhere"), 0u);
  capture.clear();
  EXPECT_TRUE(capture.lines().empty());
}

TEST(Log, SinkReceivesLevel) {
  std::vector<log_level> levels;
  log_sink previous =
      set_log_sink([&](log_level level, std::string_view) { levels.push_back(level); });
  log(log_level::info, "a");
  log(log_level::err, "b");
  set_log_sink(std::move(previous));
  EXPECT_EQ(levels, (std::vector<log_level>{log_level::info, log_level::err}));
  EXPECT_STREQ(to_string(log_level::warning), "warning");
}

TEST(Log, NestedCapturesRestoreInOrderAndForward) {
  log_capture outer;
  {
    log_capture inner(/*forward=*/true);
    log(log_level::info, "both");
  }
  {
    log_capture inner;
    log(log_level::info, "inner only");
  }
  log(log_level::info, "outer only");
  EXPECT_EQ(outer.lines(), (std::vector<std::string>{"both", "outer only"}));
}

TEST(Log, ConcurrentLinesAreAllDeliveredWhole) {
  log_capture capture;
  constexpr int threads = 4, per_thread = 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([t] {
      for (int i = 0; i < per_thread; ++i) {
        log(log_level::info, "thread " + std::to_string(t) + " line " + std::to_string(i));
      }
    });
  }
  for (auto& th : pool)
    th.join();
  const auto lines = capture.lines();
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(threads * per_thread));
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(capture.count("thread " + std::to_string(t) + " line "),
              static_cast<std::size_t>(per_thread));
  }
}

TEST(Log, DmesgPrefix) {
  EXPECT_EQ(dmesg_line(14'262'158'000ull, "rcu_tasks_wait_gp: x"),
            "[   14.262158] rcu_tasks_wait_gp: x");
  EXPECT_EQ(dmesg_line(248'086'491'999ull, "INFO"), "[  248.086491] INFO");
  EXPECT_EQ(dmesg_line(0, ""), "[    0.000000] ");
}

TEST(Log, DefaultSinkWritesDmesgLinesToStderr) {
  set_log_sink({});  // the default
  testing::internal::CaptureStderr();
  log(log_level::warning, "hello from the default sink");
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.front(), '[');
  EXPECT_NE(err.find("] hello from the default sink\n"), std::string::npos) << err;
}

}  // namespace
}  // namespace quiesce
