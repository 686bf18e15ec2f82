// SPDX-License-Identifier: Apache-2.0
#include "quiesce/keys.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <random>
#include <set>
#include <system_error>
#include <thread>

#include "quiesce/log.hpp"
#include "quiesce/thread.hpp"
#include "quiesce/watchdog.hpp"
#include "wait.hpp"

namespace quiesce::keys {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::gate;

int error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::system_error& e) {
    return e.code().value();
  }
  return 0;
}

// A store with a clock the test moves.
struct fake_clock_store {
  explicit fake_clock_store(gc_mode mode = gc_mode::chunked, std::size_t chunk = 64)
      : store(options(mode, chunk)) {}
  store_options options(gc_mode mode, std::size_t chunk) {
    store_options o;
    o.mode = mode;
    o.chunk = chunk;
    o.gc_delay = 5s;
    o.clock = [this] { return now.load(); };
    return o;
  }
  std::atomic<std::int64_t> now{1'000'000'000};
  key_store store;
};

TEST(KeyStore, AddLinkReadAndInfo) {
  key_store s;
  const key_serial ring = s.add_keyring("ring");
  const key_serial k = s.add_key("user", "alpha", "payload", ring);
  EXPECT_GE(k, 3);
  EXPECT_EQ(s.read(k), "payload");
  EXPECT_EQ(s.links(ring), std::vector<key_serial>{k});
  const key_info i = s.info(k);
  EXPECT_EQ(i.type, "user");
  EXPECT_EQ(i.description, "alpha");
  EXPECT_EQ(i.usage, 1);  // its link
  const key_serial ring2 = s.add_keyring("ring2");
  s.link(ring2, k);
  EXPECT_EQ(s.info(k).usage, 2);
  s.link(ring2, k);  // already linked: no change
  EXPECT_EQ(s.info(k).usage, 2);
  s.unlink(ring, k);
  s.gc_wait_idle();  // the link's reference drops after a grace period
  EXPECT_EQ(s.info(k).usage, 1);
  EXPECT_EQ(s.links(ring2), std::vector<key_serial>{k});
}

TEST(KeyStore, ErrorsAreTheKernels) {
  fake_clock_store f;
  key_store& s = f.store;
  const key_serial ring = s.add_keyring("ring");
  const key_serial k = s.add_key("user", "k", "v", ring);
  EXPECT_EQ(error_of([&] { s.read(12345); }), ENOKEY);
  EXPECT_EQ(error_of([&] { s.add_key("user", "x", "", 12345); }), ENOKEY);
  EXPECT_EQ(error_of([&] { s.add_key("nosuchtype", "x", "", ring); }), EINVAL);
  EXPECT_EQ(error_of([&] { s.link(k, ring); }), ENOTDIR);
  EXPECT_EQ(error_of([&] { s.set_timeout(k, -1s); }), EINVAL);
  EXPECT_EQ(error_of([&] { s.unlink(s.root(), k); }), ENOENT);
  EXPECT_EQ(error_of([&] { s.register_type("user"); }), EEXIST);
  EXPECT_EQ(error_of([&] { s.unregister_type("keyring"); }), EINVAL);
  EXPECT_EQ(error_of([&] { s.unregister_type("nosuch"); }), EINVAL);
  s.set_timeout(k, 10s);
  f.now += 11'000'000'000;
  EXPECT_EQ(error_of([&] { s.read(k); }), EKEYEXPIRED);
  const key_serial r = s.add_key("user", "r", "v", ring);
  s.revoke(r);
  EXPECT_EQ(error_of([&] { s.read(r); }), EKEYREVOKED);
  // Nothing corrupted: the store still works.
  EXPECT_EQ(s.links(ring).size(), 2u);
  EXPECT_THROW(parse_gc_mode("fast"), std::invalid_argument);
  EXPECT_EQ(parse_gc_mode("budget"), gc_mode::budget);
  EXPECT_THROW(key_store(store_options{.chunk = 0}), std::invalid_argument);
}

TEST(KeyStore, UnreferencedKeysAreCollectedInEveryMode) {
  for (gc_mode mode : {gc_mode::monolithic, gc_mode::chunked, gc_mode::budget}) {
    key_store s(store_options{.mode = mode, .chunk = 7});
    const key_serial ring = s.add_keyring("ring");
    for (int i = 0; i < 500; ++i)
      s.add_key("user", "k" + std::to_string(i), "v", ring);
    EXPECT_EQ(s.live_keys(), 502u);  // root + ring + 500
    s.clear(ring);
    s.gc_wait_idle();
    EXPECT_EQ(s.live_keys(), 2u) << to_string(mode);
    EXPECT_EQ(s.stats().keys_destroyed, 500u);
    if (mode == gc_mode::chunked) {
      EXPECT_GT(s.stats().executions, 500u / 7);
    }
  }
}

TEST(KeyStore, AReferenceKeepsAKeyAlive) {
  key_store s;
  const key_serial ring = s.add_keyring("ring");
  const key_serial k = s.add_key("user", "held", "v", ring);
  key_ref ref = s.get(k);
  EXPECT_EQ(ref.serial(), k);
  s.clear(ring);
  s.gc_wait_idle();
  EXPECT_TRUE(s.exists(k));
  ref = key_ref();
  s.gc_wait_idle();
  EXPECT_FALSE(s.exists(k));
  EXPECT_EQ(error_of([&] { s.get(k); }), ENOKEY);
}

TEST(KeyStore, ExpiredKeysAreReapedOnlyAfterExpiryPlusGcDelay) {
  fake_clock_store f;
  key_store& s = f.store;
  const key_serial ring = s.add_keyring("ring");
  const key_serial k = s.add_key("user", "temp", "v", ring);
  s.set_timeout(k, 10s);  // expires at +10 s, reaped at +15 s (gc_delay 5 s)
  f.now += 12'000'000'000;
  s.gc_check_expired();
  s.gc_wait_idle();
  EXPECT_TRUE(s.exists(k));  // expired, but not gc_delay ago
  EXPECT_EQ(s.links(ring).size(), 1u);
  f.now += 4'000'000'000;  // +16 s
  s.gc_check_expired();
  s.gc_wait_idle();  // the link goes, then (a pass later) the key
  s.gc_request();
  s.gc_wait_idle();
  EXPECT_FALSE(s.exists(k));
  EXPECT_GE(s.stats().links_dropped, 1u);
}

TEST(KeyStore, RevokedAndInvalidatedKeysAreUnlinked) {
  fake_clock_store f;
  key_store& s = f.store;
  const key_serial ring = s.add_keyring("ring");
  const key_serial rev = s.add_key("user", "rev", "v", ring);
  const key_serial inv = s.add_key("user", "inv", "v", ring);
  s.invalidate(inv);  // unlinked by the next pass
  s.gc_wait_idle();
  s.gc_request();
  s.gc_wait_idle();
  EXPECT_FALSE(s.exists(inv));
  s.revoke(rev);
  s.gc_check_expired();
  s.gc_wait_idle();
  EXPECT_TRUE(s.exists(rev));  // revoked now: kept for gc_delay
  f.now += 6'000'000'000;
  s.gc_check_expired();
  s.gc_wait_idle();
  s.gc_request();
  s.gc_wait_idle();
  EXPECT_FALSE(s.exists(rev));
}

TEST(KeyStore, UnregisteringATypeInUseCompletesAndLeavesNone) {
  for (gc_mode mode : {gc_mode::monolithic, gc_mode::chunked}) {
    key_store s(store_options{.mode = mode, .chunk = 3});
    std::atomic<int> destroyed{0};
    s.register_type("big_key", [&destroyed](std::string& payload) {
      ++destroyed;
      payload.clear();
    });
    const key_serial ring = s.add_keyring("ring");
    std::vector<key_serial> keys;
    for (int i = 0; i < 20; ++i)
      keys.push_back(s.add_key("big_key", "b" + std::to_string(i), "x", ring));
    const key_serial other = s.add_key("user", "stays", "v", ring);
    key_ref held = s.get(keys[0]);  // in use while its type goes away
    s.unregister_type("big_key");   // blocks through the three passes
    const key_info i = s.info(keys[0]);
    EXPECT_TRUE(i.dead);
    EXPECT_EQ(i.type, ".dead");
    EXPECT_EQ(s.links(ring), std::vector<key_serial>{other});
    EXPECT_EQ(error_of([&] { s.add_key("big_key", "new", "x", ring); }), EINVAL);
    held = key_ref();
    s.gc_wait_idle();
    s.gc_request();
    s.gc_wait_idle();
    for (key_serial k : keys)
      EXPECT_FALSE(s.exists(k)) << to_string(mode);
    EXPECT_EQ(destroyed.load(), 20);  // every payload destroyed exactly once
    EXPECT_TRUE(s.exists(other));
  }
}

TEST(KeyStore, NoKeyIsDestroyedWhileAReaderHoldsItsKeyring) {
  watchdog_config cfg;
  cfg.tick = 1ms;
  cfg.rcu_stall = 20ms;
  scoped_watchdog_config fast_stalls(cfg);
  log_capture capture;
  key_store s;
  std::atomic<int> destroyed{0};
  s.register_type("tracked", [&destroyed](std::string&) { ++destroyed; });
  const key_serial ring = s.add_keyring("ring");
  for (int i = 0; i < 10; ++i)
    s.add_key("tracked", "t" + std::to_string(i), "v", ring);
  gate inside, release;
  std::atomic<int> seen_destroyed{-1};
  std::thread reader([&] {
    set_this_thread_name("key-reader");
    s.for_each_link(ring, [&](const std::string& desc, key_serial) {
      if (desc == "t0") {
        inside.open();
        release.wait();
        seen_destroyed = destroyed.load();
      }
    });
  });
  ASSERT_TRUE(inside.wait());
  s.clear(ring);
  s.gc_request();
  // The grace period that would free the old link set waits for our reader: wait until
  // the stall detector names it, then check nothing was destroyed.
  ASSERT_TRUE(eventually([&] { return capture.count("\tkey-reader:") > 0 || destroyed > 0; }));
  EXPECT_EQ(destroyed.load(), 0);
  release.open();
  reader.join();
  EXPECT_EQ(seen_destroyed.load(), 0);
  s.gc_wait_idle();
  s.gc_request();
  s.gc_wait_idle();
  EXPECT_EQ(destroyed.load(), 10);
}

TEST(KeyStore, AFullPassRequestedMidContinuationIsHonoured) {
  gate first_execution, go_on;
  std::atomic<bool> blocked_once{false};
  store_options o;
  o.mode = gc_mode::chunked;
  o.chunk = 1;
  o.on_execution = [&](const gc_execution&) {
    if (!blocked_once.exchange(true)) {
      first_execution.open();
      go_on.wait();  // the pass is mid-way (chunk 1)
    }
  };
  key_store s(o);
  const key_serial a = s.add_keyring("a");
  const key_serial b = s.add_keyring("b");
  for (int i = 0; i < 50; ++i) {
    s.add_key("user", "a" + std::to_string(i), "v", a);
    s.add_key("user", "b" + std::to_string(i), "v", b);
  }
  s.clear(a);
  s.gc_request();
  ASSERT_TRUE(first_execution.wait());
  s.clear(b);
  rcu_barrier();  // b's keys lose their references now: a request arrives mid-pass
  go_on.open();
  s.gc_wait_idle();
  EXPECT_EQ(s.live_keys(), 3u);  // root, a, b
}

// Differential: the same random operations under every mode end in the same keys and links.
std::map<std::string, std::vector<std::string>> run_script(gc_mode mode, std::size_t chunk,
                                                           unsigned seed) {
  std::atomic<std::int64_t> now{1'000'000'000};
  store_options o;
  o.mode = mode;
  o.chunk = chunk;
  o.gc_delay = 2s;
  o.clock = [&now] { return now.load(); };
  key_store s(o);
  std::mt19937 rng(seed);
  std::vector<key_serial> rings{s.root()}, keys;
  std::map<key_serial, std::string> name;
  name[s.root()] = "root";
  for (int op = 0; op < 400; ++op) {
    const key_serial ring = rings[rng() % rings.size()];
    try {
      switch (rng() % 9) {
        case 0: {
          const std::string d = "r" + std::to_string(op);
          const key_serial r = s.add_keyring(d, ring);
          rings.push_back(r);
          name[r] = d;
          break;
        }
        case 1:
        case 2: {
          const std::string d = "k" + std::to_string(op);
          const key_serial k = s.add_key("user", d, "v", ring);
          keys.push_back(k);
          name[k] = d;
          break;
        }
        case 3:
          if (!keys.empty()) s.link(ring, keys[rng() % keys.size()]);
          break;
        case 4:
          if (!keys.empty()) s.unlink(ring, keys[rng() % keys.size()]);
          break;
        case 5:
          if (rng() % 4 == 0 && ring != s.root()) s.clear(ring);
          break;
        case 6:
          if (!keys.empty())
            s.set_timeout(keys[rng() % keys.size()], std::chrono::seconds(rng() % 5 + 1));
          break;
        case 7:
          now += 1'000'000'000;
          s.gc_check_expired();
          break;
        case 8:
          if (!keys.empty() && rng() % 3 == 0) s.revoke(keys[rng() % keys.size()]);
          s.gc_wait_idle();
          break;
      }
    } catch (const std::system_error&) {
      // ENOKEY / ENOENT / ENOTDIR on keys the collector already took: fine, same everywhere
    }
  }
  for (int i = 0; i < 4; ++i) {
    s.gc_wait_idle();
    s.gc_request();
  }
  s.gc_wait_idle();
  std::map<std::string, std::vector<std::string>> result;
  for (const auto& [serial, d] : name) {
    if (!s.exists(serial)) continue;
    std::vector<std::string> linked;
    if (s.info(serial).keyring) {
      for (key_serial l : s.links(serial))
        linked.push_back(name[l]);
      std::sort(linked.begin(), linked.end());
    }
    result[d] = linked;
  }
  return result;
}

TEST(KeyStore, ChunkedAndMonolithicEndInTheSameState) {
  for (unsigned seed : {1u, 2u, 3u}) {
    const auto reference = run_script(gc_mode::monolithic, 64, seed);
    EXPECT_GT(reference.size(), 1u);
    for (std::size_t chunk : {1u, 7u, 64u}) {
      EXPECT_EQ(run_script(gc_mode::chunked, chunk, seed), reference)
          << "seed " << seed << " chunk " << chunk;
    }
    EXPECT_EQ(run_script(gc_mode::budget, 64, seed), reference) << "seed " << seed;
  }
}

}  // namespace
}  // namespace quiesce::keys
