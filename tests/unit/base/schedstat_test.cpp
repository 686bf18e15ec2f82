// SPDX-License-Identifier: Apache-2.0
#include "quiesce/schedstat.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "quiesce/clock.hpp"
#include "quiesce/thread.hpp"

namespace quiesce {
namespace {

namespace fs = std::filesystem;

bool kernel_has_schedstat() {
  return fs::exists("/proc/self/task/" + std::to_string(this_thread_tid()) + "/schedstat");
}

TEST(Schedstat, ParsesTheThreeFields) {
  EXPECT_EQ(parse_schedstat("123 456 7\n"), (sched_sample{123, 456, 7}));
  EXPECT_EQ(parse_schedstat("18446744073709551615 0 1"),
            (sched_sample{18446744073709551615ull, 0, 1}));
  EXPECT_EQ(parse_schedstat("1 2"), std::nullopt);
  EXPECT_EQ(parse_schedstat("1 2 x"), std::nullopt);
  EXPECT_EQ(parse_schedstat("1 2 3 4"), std::nullopt);
  EXPECT_EQ(parse_schedstat(""), std::nullopt);
  const sched_sample d = sched_sample{10, 20, 3} - sched_sample{4, 5, 1};
  EXPECT_EQ(d, (sched_sample{6, 15, 2}));
}

TEST(Schedstat, SumsAddEveryField) {
  sched_sample total{1, 2, 3};
  total += sched_sample{10, 20, 30};
  EXPECT_EQ(total, (sched_sample{11, 22, 33}));
  EXPECT_EQ(&(total += sched_sample{}), &total);
}

TEST(Schedstat, ReadsAFixtureFileAndSeesItChange) {
  const fs::path file = fs::temp_directory_path() / ("schedstat-" + std::to_string(getpid()));
  std::ofstream(file) << "1000 2000 3\n";
  schedstat_reader reader(file);
  ASSERT_TRUE(reader.available());
  EXPECT_EQ(reader.sample(), (sched_sample{1000, 2000, 3}));
  std::ofstream(file) << "5000 2500 9\n";  // pread from offset 0 sees the new contents
  EXPECT_EQ(reader.sample(), (sched_sample{5000, 2500, 9}));
  std::ofstream(file) << "garbage\n";
  EXPECT_EQ(reader.sample(), std::nullopt);
  fs::remove(file);
}

TEST(Schedstat, MissingFileIsUnavailableNotAnError) {
  schedstat_reader reader(fs::path("/nonexistent/proc/self/task/1/schedstat"));
  EXPECT_FALSE(reader.available());
  EXPECT_EQ(reader.sample(), std::nullopt);
  schedstat_reader moved = std::move(reader);
  EXPECT_FALSE(moved.available());
  EXPECT_EQ(read_schedstat(999'999'999), std::nullopt);  // no such thread
}

TEST(Schedstat, RunTimeOfTheCallingThreadGrows) {
  if (!kernel_has_schedstat()) GTEST_SKIP() << "kernel without CONFIG_SCHED_INFO";
  schedstat_reader reader;
  ASSERT_TRUE(reader.available());
  const auto before = reader.sample();
  ASSERT_TRUE(before);
  // Burn CPU until the kernel's accounting moves (it updates at ticks and switches);
  // bounded by a generous deadline that fails loudly.
  const std::uint64_t deadline = now_ns() + 60'000'000'000ull;
  std::optional<sched_sample> after;
  volatile std::uint64_t x = 0;
  do {
    for (int i = 0; i < 1'000'000; ++i)
      x = x + i;
    std::this_thread::yield();
    after = reader.sample();
    ASSERT_TRUE(after);
  } while (after->run_ns == before->run_ns && now_ns() < deadline);
  EXPECT_GT(after->run_ns, before->run_ns);
  EXPECT_GE(after->switches, before->switches);
}

TEST(Schedstat, AnotherThreadIsReadableUntilItExits) {
  if (!kernel_has_schedstat()) GTEST_SKIP() << "kernel without CONFIG_SCHED_INFO";
  std::atomic<pid_t> tid{0};
  std::atomic<bool> release{false};
  std::thread t([&] {
    tid.store(this_thread_tid());
    while (!release.load())
      std::this_thread::yield();
  });
  while (tid.load() == 0)
    std::this_thread::yield();
  schedstat_reader reader(tid.load());
  ASSERT_TRUE(reader.available());
  EXPECT_TRUE(reader.sample());
  release.store(true);
  t.join();
  // join() returns when the thread clears its tid, a moment before the kernel releases the
  // task: wait (bounded) for the release, after which a sample is ESRCH, reported cleanly.
  const std::uint64_t deadline = now_ns() + 60'000'000'000ull;
  while (reader.sample() && now_ns() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(reader.sample(), std::nullopt);
}

}  // namespace
}  // namespace quiesce
