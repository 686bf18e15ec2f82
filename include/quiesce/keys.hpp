// SPDX-License-Identifier: Apache-2.0
// quiesce/keys.hpp - an in-memory key store after the kernel's key subsystem
// (security/keys), with its garbage collector on a quiesce workqueue (seed 000).
//
// Keys have a random serial, a type, a description, a payload, an expiry and a usage count.
// Keyrings are keys whose payload is a set of links; each link holds a reference on the
// key it links. Link sets are read under RCU and replaced copy-on-write: the old set is
// retired, and its references are dropped after a grace period - so a key whose last link
// goes becomes unreferenced only then, and the collector reaps it in a later pass.
//
// The collector is one work item (kernel: key_gc_work) on a bound workqueue, in one of three
// modes:
//   monolithic  the pre-patch collector: one execution scans every key, waits one grace
//               period and destroys the whole graveyard;
//   chunked     the patch: at most `chunk` keys scanned and `chunk` destroyed per execution,
//               then it re-queues itself, keeping cursor, expiry window and state (a
//               DESTROYING state resumes destruction without a second grace period;
//               full-pass requests arriving meanwhile are kept);
//   budget      each execution stops after about `slice` (an adaptive item budget from
//               quiesce/budget.hpp sized from the measured cost per key).
// All the kernel's phases: unreferenced keys, links to expired/revoked/dead keys (after
// expiry + gc_delay), and the three-pass reaping of an unregistered key type.
//
// Errors are the kernel's, as std::system_error with std::generic_category():
//   ENOKEY unknown or dead serial, EKEYREVOKED, EKEYEXPIRED, ENOTDIR (keyring operation on
//   a key that is not a keyring), EINVAL (bad argument, e.g. a negative timeout or an
//   unknown type), EEXIST (type already registered).
// Thread-safe: every member may be called from any thread (not from the store's own
// collector callbacks). Permissions and quotas are not modelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quiesce/workqueue.hpp"

namespace quiesce::keys {

using key_serial = std::int32_t;

enum class gc_mode { monolithic, chunked, budget };
const char* to_string(gc_mode mode) noexcept;
// "monolithic", "chunked" or "budget"; throws std::invalid_argument naming the text.
gc_mode parse_gc_mode(std::string_view text);

// One execution of the collector's work item, as the experiment records it.
struct gc_execution {
  std::uint64_t start_ns = 0;     // CLOCK_MONOTONIC
  std::uint64_t duration_ns = 0;  // wall time of the execution
  std::size_t scanned = 0;        // keys looked at
  std::size_t destroyed = 0;      // keys destroyed
  bool synchronized = false;      // it waited for a grace period
  bool pass_ended = false;        // a full pass finished in it
};

struct store_options {
  gc_mode mode = gc_mode::chunked;
  std::size_t chunk = 64;  // KEY_GC_CHUNK_SIZE (chunked mode)
  std::chrono::nanoseconds slice = std::chrono::microseconds(100);  // budget mode
  std::chrono::nanoseconds gc_delay = std::chrono::seconds(300);    // key_gc_delay
  // The collector's queue (default: system_wq) and CPU (-1: the queueing thread's).
  workqueue* wq = nullptr;
  int cpu = -1;
  // Time in nanoseconds for expiry (default: CLOCK_MONOTONIC). Tests inject their own and
  // call gc_check_expired() instead of waiting for the timer.
  std::function<std::int64_t()> clock = {};
  // Called on the worker after every collector execution (keep it short).
  std::function<void(const gc_execution&)> on_execution = {};
};

struct key_info {
  key_serial serial = 0;
  std::string type;
  std::string description;
  bool keyring = false;
  bool revoked = false;
  bool invalidated = false;
  bool dead = false;           // its type was unregistered
  int usage = 0;               // references (links and handles)
  std::int64_t expiry_ns = 0;  // 0 = never
};

struct gc_stats {
  std::uint64_t executions = 0;
  std::uint64_t passes = 0;
  std::uint64_t keys_destroyed = 0;
  std::uint64_t grace_periods = 0;
  std::uint64_t links_dropped = 0;  // by the expired/dead link phases
};

class key_store;

// A reference on a key (kernel: key_ref_t / key_get): the key stays alive while held.
class key_ref {
 public:
  key_ref() = default;
  key_ref(key_ref&& other) noexcept;
  key_ref& operator=(key_ref&& other) noexcept;
  key_ref(const key_ref&) = delete;
  key_ref& operator=(const key_ref&) = delete;
  ~key_ref();
  key_serial serial() const noexcept;
  explicit operator bool() const noexcept { return key_ != nullptr; }

 private:
  friend class key_store;
  key_ref(key_store* store, void* key) : store_(store), key_(key) {}
  key_store* store_ = nullptr;
  void* key_ = nullptr;
};

class key_store {
 public:
  // Registers the types "user" and "keyring" and creates the root keyring.
  // Throws std::invalid_argument naming a bad option (chunk 0, slice <= 0, negative delay).
  explicit key_store(store_options options = {});
  // Drops everything and runs the collector until no key is left.
  ~key_store();
  key_store(const key_store&) = delete;
  key_store& operator=(const key_store&) = delete;

  key_serial root() const noexcept;

  // Creates a key of `type` linked into `keyring` (which then holds its only reference).
  key_serial add_key(std::string_view type, std::string description, std::string payload,
                     key_serial keyring);
  // Creates a keyring linked into `parent` (default: the root keyring).
  key_serial add_keyring(std::string description, key_serial parent = 0);

  void link(key_serial keyring, key_serial key);
  void unlink(key_serial keyring, key_serial key);  // ENOENT if not linked
  void clear(key_serial keyring);                   // drops every link
  void revoke(key_serial key);      // reads fail with EKEYREVOKED; reaped after gc_delay
  void invalidate(key_serial key);  // unlinked by the next collector pass
  // Expires `key` after `timeout` (0 = never expires). EINVAL if negative.
  void set_timeout(key_serial key, std::chrono::nanoseconds timeout);

  std::string read(key_serial key) const;
  std::vector<key_serial> links(key_serial keyring) const;
  key_info info(key_serial key) const;
  bool exists(key_serial key) const;
  std::size_t live_keys() const;  // keys in the serial tree (including the root keyring)
  key_ref get(key_serial key);    // ENOKEY if absent or dead

  // Runs fn(description, serial) for each key linked in `keyring`, inside one RCU read-side
  // critical section: the keys cannot be destroyed until fn returns for the last of them.
  void for_each_link(key_serial keyring,
                     const std::function<void(const std::string&, key_serial)>& fn) const;

  // Key types. A destroy function (optional) runs on a payload when its key is destroyed.
  void register_type(std::string name, std::function<void(std::string&)> destroy = {});
  // Marks the type dead and blocks until the collector's three passes reaped it: its keys
  // are dead, unlinked, and their payloads destroyed. EINVAL for unknown or built-in types.
  void unregister_type(std::string_view name);

  // Requests a full collector pass (kernel: key_schedule_gc_work).
  void gc_request();
  // What the expiry timer does (tests with an injected clock call it).
  void gc_check_expired();
  // Waits until the collector is idle with nothing queued, requested or pending in RCU.
  void gc_wait_idle();
  gc_stats stats() const;
  const store_options& options() const noexcept;

 private:
  friend class key_ref;
  struct impl;
  void mark(key_serial key, std::uint32_t flag, bool schedule_now);
  std::unique_ptr<impl> impl_;
};

}  // namespace quiesce::keys
