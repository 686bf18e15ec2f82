// SPDX-License-Identifier: Apache-2.0
// verified_file::read_async: the completion runs once, on the verification queue's worker,
// with exactly the bytes read() returns - or EIO naming the block - and a read that
// cannot start completes before read_async returns. Waits are on conditions.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "verity_test_util.hpp"
#include "wait.hpp"

namespace quiesce::verity::test {
namespace {

// One completion: what it was called with, how often, and whether on the queue's worker.
struct completion {
  std::mutex lock;
  std::vector<std::uint8_t> data;
  int err = -1;
  std::string why;
  bool on_worker = false;
  std::atomic<int> calls{0};
  quiesce::test::gate done;

  verified_file::read_done callback(workqueue& q) {
    return [this, &q](std::span<const std::uint8_t> d, int e, const std::string& w) {
      {
        std::lock_guard g(lock);
        data.assign(d.begin(), d.end());
        err = e;
        why = w;
        on_worker = q.in_own_item();
      }
      calls.fetch_add(1);
      done.open();
    };
  }
};

class AsyncRead : public scratch_dir {
 protected:
  workqueue wq_{"verity_async_test", wq_options{.highpri = true}};
};

TEST_F(AsyncRead, CompletesOnTheWorkerWithTheBytesReadReturns) {
  const std::vector<std::uint8_t> bytes = random_bytes(100'000, 11);
  const fs::path f = write("f", bytes);
  const merkle_tree t = enable(f, params{});
  verified_file v(f, wq_, pin(t));
  for (const auto& [offset, len] : {std::pair<std::uint64_t, std::size_t>{0, 100},
                                    {4095, 2},
                                    {5000, 70'000},
                                    {99'990, 100},
                                    {0, 200'000}}) {
    completion c;
    v.read_async(offset, len, c.callback(wq_));
    ASSERT_TRUE(c.done.wait());
    std::lock_guard g(c.lock);
    EXPECT_EQ(c.err, 0) << c.why;
    EXPECT_TRUE(c.on_worker) << "completed off the verification queue";
    const std::size_t n = std::min<std::size_t>(len, bytes.size() - offset);
    ASSERT_EQ(c.data.size(), n) << offset;
    EXPECT_TRUE(std::equal(c.data.begin(), c.data.end(), bytes.begin() + offset)) << offset;
    EXPECT_EQ(c.calls.load(), 1);
  }
  // At or past the end: completes at once, empty.
  completion end;
  v.read_async(bytes.size(), 10, end.callback(wq_));
  EXPECT_TRUE(end.done.is_open());
  EXPECT_EQ(end.err, 0);
  EXPECT_TRUE(end.data.empty());
}

TEST_F(AsyncRead, ATamperedBlockFailsItsReadsOnlyWithEio) {
  const std::vector<std::uint8_t> bytes = random_bytes(64 * 1024, 12);
  const fs::path f = write("f", bytes);
  const merkle_tree t = enable(f, params{});
  flip_bit(f, 5 * 4096 + 17);  // data block 5
  verified_file v(f, wq_, pin(t));
  completion bad, spans_bad, good;
  v.read_async(5 * 4096, 10, bad.callback(wq_));
  v.read_async(3 * 4096, 4 * 4096, spans_bad.callback(wq_));  // blocks 3-6: fails whole
  v.read_async(8 * 4096, 4096, good.callback(wq_));
  for (completion* c : {&bad, &spans_bad, &good})
    ASSERT_TRUE(c->done.wait());
  EXPECT_EQ(bad.err, EIO);
  EXPECT_NE(bad.why.find("block 5 failed fs-verity verification"), std::string::npos) << bad.why;
  EXPECT_TRUE(bad.data.empty());
  EXPECT_EQ(spans_bad.err, EIO);
  EXPECT_TRUE(spans_bad.data.empty()) << "a read covering a bad block returned bytes";
  EXPECT_EQ(good.err, 0) << good.why;
  EXPECT_TRUE(std::equal(good.data.begin(), good.data.end(), bytes.begin() + 8 * 4096));
}

// Many readers at once, each completion exactly once with its own bytes: the recycled work
// items never mix two reads.
TEST_F(AsyncRead, ConcurrentReadsEachCompleteOnceWithTheirOwnBytes) {
  const std::vector<std::uint8_t> bytes = random_bytes(1 << 20, 13);
  const fs::path f = write("f", bytes);
  const merkle_tree t = enable(f, params{});
  verified_file v(f, wq_, pin(t));
  constexpr int nr_threads = 4, nr_reads = 300;
  std::atomic<int> completed{0}, wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < nr_threads; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(static_cast<unsigned>(i));
      for (int r = 0; r < nr_reads; ++r) {
        const std::uint64_t offset = rng() % bytes.size();
        const std::size_t len = 1 + rng() % 20'000;
        v.read_async(offset, len,
                     [&, offset, len](std::span<const std::uint8_t> d, int e, const std::string&) {
                       if (e != 0) ++errors;
                       const std::size_t n = std::min<std::size_t>(len, bytes.size() - offset);
                       if (d.size() != n || !std::equal(d.begin(), d.end(), bytes.begin() + offset))
                         ++wrong;
                       ++completed;
                     });
      }
    });
  }
  for (auto& t : threads)
    t.join();
  ASSERT_TRUE(quiesce::test::eventually([&] { return completed.load() >= nr_threads * nr_reads; }))
      << completed.load() << " of " << nr_threads * nr_reads << " reads completed";
  EXPECT_EQ(completed.load(), nr_threads * nr_reads);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace quiesce::verity::test
