// SPDX-License-Identifier: Apache-2.0
// Internal structures of the key store (src/keys). Not installed.
// Locks: serial_lock (the tree, key types, each key's type pointer) -> keyring_lock of one
// keyring. The collector's state is touched only by its work item (non-reentrant).
// Protection legend (docs/DESIGN.md, "Protection legend"): I, A, L(lock) - QUIESCE_GUARDED_BY
// where the lock is a member of the same object - and W (here: the collector's work item).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../base/mutex.hpp"
#include "quiesce/budget.hpp"
#include "quiesce/keys.hpp"
#include "quiesce/rcu.hpp"
#include "quiesce/workqueue.hpp"

namespace quiesce::keys::detail {

inline constexpr std::int64_t never = INT64_MAX;

// Key flags (kernel: KEY_FLAG_*).
inline constexpr std::uint32_t flag_dead = 1u << 0;
inline constexpr std::uint32_t flag_revoked = 1u << 1;
inline constexpr std::uint32_t flag_invalidated = 1u << 2;

// Collector request bits (kernel: key_gc_flags).
inline constexpr std::uint32_t gc_key_expired = 1u << 0;      // KEY_GC_KEY_EXPIRED
inline constexpr std::uint32_t gc_reap_keytype = 1u << 1;     // KEY_GC_REAP_KEYTYPE
inline constexpr std::uint32_t gc_reaping_keytype = 1u << 2;  // KEY_GC_REAPING_KEYTYPE
inline constexpr std::uint32_t gc_reap_requested = 1u << 3;   // KEY_GC_REAP_REQUESTED

// Collector pass state (kernel: gc_state).
inline constexpr unsigned st_reap_again = 0x01;
inline constexpr unsigned st_reaping_links = 0x02;
inline constexpr unsigned st_destroying = 0x04;
inline constexpr unsigned st_dead_1 = 0x10;
inline constexpr unsigned st_dead_2 = 0x20;
inline constexpr unsigned st_dead_3 = 0x40;

struct key_type_rec {
  std::string name;                           // I
  std::function<void(std::string&)> destroy;  // I
  bool dead = false;                          // L(store_state::serial_lock)
};

struct key;
struct store_state;

// A keyring's links. Immutable once published; replaced copy-on-write. Retired after a
// grace period, it drops the references of the keys that the replacement no longer links.
struct link_set;
struct link_set_reclaim {
  void operator()(link_set* set) const;
};
struct link_set : rcu_obj_base<link_set, link_set_reclaim> {
  std::vector<key*> keys;    // I: sorted by pointer
  std::vector<key*> to_put;  // set before retiring: links the successor dropped
  store_state* store = nullptr;
};

struct key {
  key_serial serial = 0;                    // I
  key_type_rec* type = nullptr;             // L(store_state::serial_lock); retyped when reaped
  std::string description;                  // I
  std::string payload;                      // L(store_state::serial_lock); the collector frees it
  bool keyring = false;                     // I
  std::atomic<std::int64_t> expiry{never};  // A
  std::atomic<std::uint32_t> flags{0};      // A
  std::atomic<int> usage{0};                // A: links and key_refs
  // Serialises link-set replacement; readers follow `links` under RCU.
  quiesce::detail::mutex keyring_lock{"keys keyring_lock"};
  // A: RCU-protected (keyrings only), written under keyring_lock.
  std::atomic<link_set*> links{nullptr};

  // Keys live in the key jar (key_jar.cpp), as the kernel's do in its key_jar cache.
  static void* operator new(std::size_t size);
  static void operator delete(void* p, std::size_t size) noexcept;
};

struct store_state {
  explicit store_state(const store_options& o);
  store_options opt;        // I (normalised)
  workqueue* wq = nullptr;  // I

  mutable quiesce::detail::mutex serial_lock{"keys serial_lock"};
  std::map<key_serial, std::unique_ptr<key>> tree QUIESCE_GUARDED_BY(serial_lock);
  std::map<std::string, std::unique_ptr<key_type_rec>> types QUIESCE_GUARDED_BY(serial_lock);
  key_type_rec dead_type{".dead", {}, true};  // I
  key_serial root = 0;                        // I after construction
  std::uint64_t rng_state QUIESCE_GUARDED_BY(serial_lock) = 0;

  // Collector requests and the type being reaped.
  std::atomic<std::uint32_t> gc_flags{0};  // A
  key_type_rec* reaping_type QUIESCE_GUARDED_BY(serial_lock) = nullptr;
  quiesce::detail::mutex unregister_lock{"keys unregister_lock"};  // one unregistration at a time
  // An unregistration waits on reap_done (under reap_lock) for gc_reaping_keytype to clear.
  quiesce::detail::mutex reap_lock{"keys reap_lock"};
  std::condition_variable reap_done;

  // Collector state: touched only by its work item (W).
  bool in_pass = false;
  std::map<key_serial, std::unique_ptr<key>>::iterator cursor;
  std::int64_t limit = 0;  // "now" at the start of the pass
  std::int64_t new_timer = never;
  unsigned state = 0;
  std::vector<std::unique_ptr<key>> graveyard;
  std::size_t destroyed_in_graveyard = 0;
  std::optional<adaptive_budget> sizer;

  std::unique_ptr<work> gc_work;              // I
  std::unique_ptr<delayed_work> gc_timer;     // I
  std::atomic<std::int64_t> timer_at{never};  // A: when the armed timer fires (store clock)

  std::atomic<std::uint64_t> executions{0}, passes{0}, destroyed{0}, grace_periods{0},
      links_dropped{0};  // A

  std::int64_t now() const { return opt.clock(); }
};

// Reference counting (key_store.cpp).
void key_get(key& k) noexcept;
void key_put(store_state& st, key& k) noexcept;

// Link-set replacement (key_store.cpp): publishes `keys` as the keyring's links and retires
// the old set, which drops `removed` references after a grace period. keyring_lock held.
void publish_links(store_state& st, key& keyring, std::vector<key*> keys, std::vector<key*> removed)
    QUIESCE_REQUIRES(keyring.keyring_lock);

// The collector (collector.cpp).
void schedule_gc(store_state& st, bool expired) noexcept;
void gc_execute(store_state& st);
void arm_gc_timer(store_state& st, std::int64_t at);

}  // namespace quiesce::keys::detail
