// SPDX-License-Identifier: Apache-2.0
// Failing closed and never hanging: a libcrypto call that fails (injected through the
// hasher's test seam), a verification item that throws, a verification queue that refuses
// the work, a reader on its own one-at-a-time queue, and tree builds through a draining
// queue. Every wait here is on a condition with a generous deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>
#include <thread>

#include "hasher.hpp"  // src/verity: the fault-injection seam
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "verity_test_util.hpp"
#include "wait.hpp"

namespace quiesce::verity::test {
namespace {

using detail::evp_call;

// Fails the `armed`-th call of kind `kind` from now (any thread), once.
std::atomic<int> armed{0};
std::atomic<evp_call> kind{evp_call::final};
std::atomic<int> injected{0};
bool fail_next(evp_call c) {
  if (c != kind.load() || armed.load() <= 0) return false;
  if (armed.fetch_sub(1) != 1) return false;
  ++injected;
  return true;
}

class Faults : public scratch_dir {
 protected:
  void SetUp() override {
    scratch_dir::SetUp();
    armed = 0;
    injected = 0;
    detail::evp_fault_hook.store(fail_next);
  }
  void TearDown() override {
    detail::evp_fault_hook.store(nullptr);
    scratch_dir::TearDown();
  }
  static void arm(evp_call c, int nth = 1) {
    kind = c;
    armed = nth;
  }
  workqueue wq_{"verity_fault_test"};
};

// The case: blocks 0 and 1 were equal, block 1 is tampered with, and a hash of
// block 1 fails. What the output buffer holds then - here block 0's hash, left by the
// block verified just before it in the same read - must not be taken for its hash.
TEST_F(Faults, AFailedHashNeverPassesATamperedBlock) {
  for (evp_call c : {evp_call::final, evp_call::update, evp_call::copy}) {
    const fs::path f = write("f", std::vector<std::uint8_t>(2 * 4096, 'a'));
    const merkle_tree t = enable(f, params{});
    patch(f, 4096 + 7, {'b'});  // block 1 tampered
    verified_file v(f, wq_, pin(t));
    std::vector<std::uint8_t> buf(2 * 4096, 0xee);
    EXPECT_EQ(v.read(0, std::span(buf).first(4096)), 4096u);  // the tree block is verified
    buf.assign(buf.size(), 0xee);
    // One read of blocks 0 and 1: block 0's hashes pass (a bitmap hit), block 1's fails.
    arm(c, 2);
    std::string what;
    EXPECT_EQ(error_of([&] { v.read(0, buf); }, &what), EIO) << static_cast<int>(c);
    EXPECT_EQ(injected.load(), 1) << static_cast<int>(c);
    EXPECT_NE(what.find("block 1 could not be verified"), std::string::npos) << what;
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 0xee), 2 * 4096) << "unverified bytes returned";
    // An untampered block whose hash fails: also EIO, and then it reads normally.
    patch(f, 4096 + 7, {'a'});
    arm(c);
    EXPECT_EQ(error_of([&] { v.read(4096, std::span(buf).first(4096)); }), EIO);
    EXPECT_EQ(v.read(0, buf), 2 * 4096u);
    injected = 0;
  }
}

// A failed hash while climbing the tree (a hash block's hash) fails the read too, and
// marks nothing verified. (A regression guard: before the fix this case failed by luck -
// the stale output did not match the next level.)
TEST_F(Faults, AFailedHashWhileClimbingFailsTheRead) {
  const fs::path f = write("f", random_bytes(1 << 20, 2));
  const merkle_tree t = enable(f, params{});
  verified_file v(f, wq_, pin(t));
  std::vector<std::uint8_t> buf(4096);
  // Let the data block's final hash pass, fail the next (the leaf-level block's).
  std::atomic<int> finals{0};
  static std::atomic<int>* counter;
  counter = &finals;
  detail::evp_fault_hook.store(
      [](evp_call c) { return c == evp_call::final && counter->fetch_add(1) == 1; });
  EXPECT_EQ(error_of([&] { v.read(0, buf); }), EIO);
  detail::evp_fault_hook.store(nullptr);
  EXPECT_EQ(v.read(0, buf), 4096u);
  EXPECT_EQ(v.stats().hash_block_hits, 0u);  // the failed climb marked nothing
}

// A verification item that throws (here: libcrypto cannot set up the digest) fails the
// read with EIO naming the cause, instead of leaving the reader waiting for ever.
TEST_F(Faults, AThrowingVerificationItemFailsTheRead) {
  const fs::path f = write("f", random_bytes(20'000, 3));
  const merkle_tree t = enable(f, params{});
  verified_file v(f, wq_, pin(t));
  std::vector<std::uint8_t> buf(100, 0xee);
  arm(evp_call::init);
  std::string what;
  EXPECT_EQ(error_of([&] { v.read(0, buf); }, &what), EIO);
  EXPECT_NE(what.find("verification failed: libcrypto: cannot initialise"), std::string::npos)
      << what;
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0xee), 100);
  EXPECT_EQ(v.read(0, buf), 100u);
  EXPECT_EQ(v.stats().failures, 1u);
}

// A failed hash fails a tree build - in memory, streamed, and in parallel on a queue -
// instead of producing a digest over whatever the output buffer held.
TEST_F(Faults, AFailedHashFailsTheBuild) {
  const std::vector<std::uint8_t> bytes = random_bytes((9 << 20) + 5, 4);
  const fs::path f = write("f", bytes);
  arm(evp_call::final);
  EXPECT_THROW(build_tree(bytes.data(), bytes.size(), params{}), std::system_error);
  arm(evp_call::final);
  EXPECT_EQ(error_of([&] { build_tree(f, params{}); }), EIO);
  arm(evp_call::update);
  EXPECT_EQ(error_of([&] { build_tree(f, params{}, &wq_); }), EIO);
  arm(evp_call::init);  // an item's hasher cannot be set up: the item throws
  EXPECT_EQ(error_of([&] { build_tree(f, params{}, &wq_); }), EIO);
  arm(evp_call::final);
  EXPECT_NE(error_of([&] { enable(f, params{}, {}, &wq_); }), 0);
  EXPECT_FALSE(fs::exists(f.string() + ".verity"));
  EXPECT_EQ(build_tree(f, params{}, &wq_).root_hash, build_tree(f, params{}).root_hash);
}

// Holds one item of `wq` running and a drain() of it in progress: the queue refuses
// outside work until release().
class draining_queue {
 public:
  explicit draining_queue(workqueue& wq) : wq_(wq) {
    wq_.queue(blocker_);
    EXPECT_TRUE(running_.wait());
    drainer_ = std::thread([this] { wq_.drain(); });
    EXPECT_TRUE(quiesce::test::eventually([this] { return wq_.stats().draining; }));
  }
  ~draining_queue() {
    release_.open();
    drainer_.join();
  }

 private:
  workqueue& wq_;
  quiesce::test::gate running_, release_;
  work blocker_{"blocker", [this](work&) {
                  running_.open();
                  may_block b;
                  release_.wait();
                }};
  std::thread drainer_;
};

TEST_F(Faults, AReadWhoseVerificationIsRefusedFailsInsteadOfWaiting) {
  const fs::path f = write("f", random_bytes(20'000, 5));
  const merkle_tree t = enable(f, params{});
  verified_file v(f, wq_, pin(t));
  std::vector<std::uint8_t> buf(100, 0xee);
  {
    draining_queue draining(wq_);
    std::string what;
    EXPECT_EQ(error_of([&] { v.read(0, buf); }, &what), EIO);
    EXPECT_NE(what.find("refused the work"), std::string::npos) << what;
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 0xee), 100);
  }
  EXPECT_EQ(v.read(0, buf), 100u);  // drained: the queue takes work again
}

TEST_F(Faults, BuildingATreeThroughADrainingQueueThrows) {
  const fs::path f = write("f", random_bytes((9 << 20) + 5, 6));
  {
    draining_queue draining(wq_);
    std::string what;
    EXPECT_EQ(error_of([&] { build_tree(f, params{}, &wq_); }, &what), ECANCELED) << what;
    EXPECT_NE(what.find("refused the hashing work"), std::string::npos) << what;
    EXPECT_EQ(error_of([&] { enable(f, params{}, {}, &wq_); }), ECANCELED);
    EXPECT_FALSE(fs::exists(f.string() + ".verity"));
  }
  EXPECT_EQ(build_tree(f, params{}, &wq_).root_hash, build_tree(f, params{}).root_hash);
}

// read() from an item of its own one-at-a-time queue is refused (EDEADLK), not a deadlock;
// from an item of a queue that runs several at once it reads.
TEST_F(Faults, AReaderOnItsOwnOneAtATimeQueueIsRefused) {
  const fs::path f = write("f", random_bytes(20'000, 7));
  const merkle_tree t = enable(f, params{});
  for (const wq_options& opt :
       {wq_options{.ordered = true}, wq_options{.max_active = 1},
        wq_options{.unbound = true, .max_active = 1}, wq_options{.max_active = 4}}) {
    workqueue q("verity_reader_queue", opt);
    verified_file v(f, q, pin(t));
    int err = -2;
    std::string what;
    quiesce::test::gate done;
    work reader("reader", [&](work&) {
      std::vector<std::uint8_t> buf(100);
      err = error_of([&] { v.read(0, buf); }, &what);
      done.open();
    });
    q.queue(reader);
    ASSERT_TRUE(done.wait());
    reader.flush();
    if (opt.max_active == 4) {
      EXPECT_EQ(err, 0) << what;
    } else {
      EXPECT_EQ(err, EDEADLK) << opt.ordered << " " << opt.max_active;
      EXPECT_NE(what.find("its own verification queue"), std::string::npos) << what;
    }
    // From an item of another queue, and from a plain thread, reads work.
    err = -2;
    quiesce::test::gate done2;
    work other("other_reader", [&](work&) {
      std::vector<std::uint8_t> buf(100);
      err = error_of([&] { v.read(0, buf); });
      done2.open();
    });
    wq_.queue(other);
    ASSERT_TRUE(done2.wait());
    other.flush();
    EXPECT_EQ(err, 0);
  }
}

// The second constructor keeps its queue alive for as long as the file is open.
TEST_F(Faults, ASharedQueueOutlivesItsLastOtherOwner) {
  const fs::path f = write("f", random_bytes(20'000, 8));
  const merkle_tree t = enable(f, params{});
  auto q = std::make_shared<workqueue>("verity_shared_queue");
  std::weak_ptr<workqueue> weak = q;
  std::optional<verified_file> v;
  v.emplace(f, std::move(q), pin(t));
  EXPECT_FALSE(weak.expired());
  std::vector<std::uint8_t> buf(100);
  EXPECT_EQ(v->read(0, buf), 100u);
  v.reset();
  EXPECT_TRUE(weak.expired());
  EXPECT_THROW(verified_file(f, std::shared_ptr<workqueue>(), pin(t)), std::invalid_argument);
}

}  // namespace
}  // namespace quiesce::verity::test
