// SPDX-License-Identifier: Apache-2.0
// The key store: keys, keyrings, types, references, and the operations on them.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include "../base/random.hpp"
#include "internal.hpp"
#include "quiesce/clock.hpp"

namespace quiesce::keys {

namespace detail {

store_state::store_state(const store_options& o) : opt(o) {
  if (opt.chunk == 0) throw std::invalid_argument("store_options.chunk: must be at least 1");
  if (opt.slice <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("store_options.slice: must be positive");
  }
  if (opt.gc_delay < std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("store_options.gc_delay: must not be negative");
  }
  if (!opt.clock) opt.clock = [] { return static_cast<std::int64_t>(now_ns()); };
  wq = opt.wq ? opt.wq : &system_wq();
  rng_state = now_ns() | 1;
}

void key_get(key& k) noexcept {
  k.usage.fetch_add(1, std::memory_order_relaxed);
}

void key_put(store_state& st, key& k) noexcept {
  // The last reference gone: the collector will find the key unreferenced (kernel: key_put
  // calls key_schedule_gc_work(false) - no expired-link scan for this).
  if (k.usage.fetch_sub(1, std::memory_order_acq_rel) == 1) schedule_gc(st, false);
}

void link_set_reclaim::operator()(link_set* set) const {
  std::unique_ptr<link_set> owned(set);
  for (key* k : owned->to_put)
    key_put(*owned->store, *k);
}

void publish_links(store_state& st, key& keyring, std::vector<key*> keys,
                   std::vector<key*> removed) {
  auto next = std::make_unique<link_set>();
  next->keys = std::move(keys);
  next->store = &st;
  link_set* old = keyring.links.exchange(next.release(), std::memory_order_acq_rel);
  if (old) {
    old->to_put = std::move(removed);
    old->retire();  // after a grace period: drop the references of the removed links
  }
}

}  // namespace detail

using namespace detail;

struct key_store::impl {
  explicit impl(const store_options& o) : st(o) {}
  store_state st;

  // The key of `serial`; ENOKEY if absent or dead.
  key& find_locked(key_serial serial) const QUIESCE_REQUIRES(st.serial_lock) {
    const auto it = st.tree.find(serial);
    if (it == st.tree.end() || (it->second->flags.load() & flag_dead)) {
      throw std::system_error(ENOKEY, std::generic_category(), fmt::format("key {}", serial));
    }
    return *it->second;
  }
  key& keyring_locked(key_serial serial) const QUIESCE_REQUIRES(st.serial_lock) {
    key& k = find_locked(serial == 0 ? st.root : serial);
    if (!k.keyring) {
      throw std::system_error(ENOTDIR, std::generic_category(),
                              fmt::format("key {} is not a keyring", k.serial));
    }
    return k;
  }

  key_serial new_serial_locked() QUIESCE_REQUIRES(st.serial_lock) {
    for (;;) {  // random 31-bit serials >= 3, as the kernel's key_alloc_serial
      const auto serial = static_cast<key_serial>(xorshift64(st.rng_state) & 0x7fffffff);
      if (serial >= 3 && !st.tree.count(serial)) return serial;
    }
  }

  key_serial create(std::string_view type, std::string description, std::string payload,
                    key_serial keyring_serial, bool is_keyring) {
    key* created = nullptr;
    key* keyring = nullptr;
    {
      quiesce::detail::lock_guard guard(st.serial_lock);
      const auto t = st.types.find(std::string(type));
      if (t == st.types.end() || t->second->dead) {
        throw std::system_error(EINVAL, std::generic_category(),
                                fmt::format("unknown key type '{}'", type));
      }
      if (keyring_serial != 0 || st.root != 0) keyring = &keyring_locked(keyring_serial);
      auto k = std::make_unique<key>();
      k->serial = new_serial_locked();
      k->type = t->second.get();
      k->description = std::move(description);
      k->payload = std::move(payload);
      k->keyring = is_keyring;
      k->usage.store(1, std::memory_order_relaxed);  // the link (or the root's pin)
      created = k.get();
      st.tree.emplace(k->serial, std::move(k));
    }
    if (keyring) {
      quiesce::detail::lock_guard guard(keyring->keyring_lock);
      link_set* cur = keyring->links.load(std::memory_order_acquire);
      std::vector<key*> keys = cur ? cur->keys : std::vector<key*>{};
      keys.insert(std::upper_bound(keys.begin(), keys.end(), created), created);
      publish_links(st, *keyring, std::move(keys), {});
    }
    return created->serial;
  }

  // Finds two keys under the serial lock; their lifetime is then kept by a reference.
  std::pair<key*, key*> pin(key_serial keyring_serial, key_serial key_serial_) {
    quiesce::detail::lock_guard guard(st.serial_lock);
    key& r = keyring_locked(keyring_serial);
    key& k = find_locked(key_serial_);
    key_get(r);
    key_get(k);
    return {&r, &k};
  }
};

key_store::key_store(store_options options) : impl_(std::make_unique<impl>(options)) {
  store_state& st = impl_->st;
  register_type("user");
  register_type("keyring");
  st.gc_work = std::make_unique<work>("key_garbage_collector", [&st](work&) { gc_execute(st); });
  st.gc_timer = std::make_unique<delayed_work>("key_gc_timer", [&st](work&) {
    st.timer_at.store(never, std::memory_order_relaxed);
    schedule_gc(st, true);
  });
  if (st.opt.mode == gc_mode::budget) st.sizer.emplace(st.opt.slice);
  st.root = impl_->create("keyring", "_root", "", 0, true);
}

key_store::~key_store() {
  store_state& st = impl_->st;
  {
    quiesce::detail::lock_guard guard(st.serial_lock);
    key& root = impl_->find_locked(st.root);
    quiesce::detail::lock_guard kg(root.keyring_lock);
    link_set* cur = root.links.load();
    std::vector<key*> removed = cur ? cur->keys : std::vector<key*>{};
    publish_links(st, root, {}, std::move(removed));
    key_put(st, root);  // the store's pin on its root keyring
  }
  // Run the collector until every key is gone (each pass may free more links).
  for (;;) {
    gc_wait_idle();
    {
      quiesce::detail::lock_guard guard(st.serial_lock);
      if (st.tree.empty()) break;
    }
    gc_request();
  }
  st.gc_timer->cancel_sync();
  st.gc_work->cancel_sync();
  rcu_barrier();
}

key_serial key_store::root() const noexcept {
  return impl_->st.root;
}
const store_options& key_store::options() const noexcept {
  return impl_->st.opt;
}

key_serial key_store::add_key(std::string_view type, std::string description, std::string payload,
                              key_serial keyring) {
  if (type == "keyring") return add_keyring(std::move(description), keyring);
  return impl_->create(type, std::move(description), std::move(payload), keyring, false);
}

key_serial key_store::add_keyring(std::string description, key_serial parent) {
  return impl_->create("keyring", std::move(description), "", parent, true);
}

void key_store::link(key_serial keyring_serial, key_serial key_serial_) {
  auto [r, k] = impl_->pin(keyring_serial, key_serial_);
  {
    quiesce::detail::lock_guard guard(r->keyring_lock);
    link_set* cur = r->links.load(std::memory_order_acquire);
    std::vector<key*> keys = cur ? cur->keys : std::vector<key*>{};
    const auto at = std::lower_bound(keys.begin(), keys.end(), k);
    if (at == keys.end() || *at != k) {
      keys.insert(at, k);
      key_get(*k);  // the new link's reference
      publish_links(impl_->st, *r, std::move(keys), {});
    }
  }
  key_put(impl_->st, *k);
  key_put(impl_->st, *r);
}

void key_store::unlink(key_serial keyring_serial, key_serial key_serial_) {
  auto [r, k] = impl_->pin(keyring_serial, key_serial_);
  bool found = false;
  {
    quiesce::detail::lock_guard guard(r->keyring_lock);
    link_set* cur = r->links.load(std::memory_order_acquire);
    std::vector<key*> keys = cur ? cur->keys : std::vector<key*>{};
    const auto at = std::lower_bound(keys.begin(), keys.end(), k);
    if (at != keys.end() && *at == k) {
      keys.erase(at);
      publish_links(impl_->st, *r, std::move(keys), {k});
      found = true;
    }
  }
  key_put(impl_->st, *k);
  key_put(impl_->st, *r);
  if (!found) {
    throw std::system_error(ENOENT, std::generic_category(),
                            fmt::format("key {} is not linked in {}", key_serial_, keyring_serial));
  }
}

void key_store::clear(key_serial keyring_serial) {
  key* r = nullptr;
  {
    quiesce::detail::lock_guard guard(impl_->st.serial_lock);
    r = &impl_->keyring_locked(keyring_serial);
    key_get(*r);
  }
  {
    quiesce::detail::lock_guard guard(r->keyring_lock);
    link_set* cur = r->links.load(std::memory_order_acquire);
    if (cur && !cur->keys.empty()) publish_links(impl_->st, *r, {}, cur->keys);
  }
  key_put(impl_->st, *r);
}

void key_store::mark(key_serial serial, std::uint32_t flag, bool schedule_now) {
  impl& im = *impl_;
  quiesce::detail::lock_guard guard(im.st.serial_lock);
  key& k = im.find_locked(serial);
  k.flags.fetch_or(flag);
  if (flag == flag_revoked) {
    // Reaped after gc_delay from now (kernel: revoked_at + key_gc_delay).
    const std::int64_t at = im.st.now();
    std::int64_t cur = k.expiry.load();
    while ((cur == never || cur > at) && !k.expiry.compare_exchange_weak(cur, at)) {
    }
    arm_gc_timer(im.st, at + im.st.opt.gc_delay.count());
  }
  if (schedule_now) schedule_gc(im.st, true);
}

void key_store::revoke(key_serial key) {
  mark(key, flag_revoked, false);
}
void key_store::invalidate(key_serial key) {
  mark(key, flag_invalidated, true);
}

void key_store::set_timeout(key_serial serial, std::chrono::nanoseconds timeout) {
  if (timeout < std::chrono::nanoseconds::zero()) {
    throw std::system_error(EINVAL, std::generic_category(), "timeout: negative");
  }
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  key& k = impl_->find_locked(serial);
  if (timeout == std::chrono::nanoseconds::zero()) {
    k.expiry.store(never);
    return;
  }
  const std::int64_t expiry = impl_->st.now() + timeout.count();
  k.expiry.store(expiry);
  // kernel: key_schedule_gc(expiry + key_gc_delay)
  arm_gc_timer(impl_->st, expiry + impl_->st.opt.gc_delay.count());
}

std::string key_store::read(key_serial serial) const {
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  key& k = impl_->find_locked(serial);
  if (k.flags.load() & flag_revoked) {
    throw std::system_error(EKEYREVOKED, std::generic_category(), fmt::format("key {}", serial));
  }
  const std::int64_t e = k.expiry.load();
  if (e != never && e <= impl_->st.now()) {
    throw std::system_error(EKEYEXPIRED, std::generic_category(), fmt::format("key {}", serial));
  }
  return k.payload;
}

std::vector<key_serial> key_store::links(key_serial keyring) const {
  std::vector<key_serial> out;
  for_each_link(keyring, [&out](const std::string&, key_serial s) { out.push_back(s); });
  std::sort(out.begin(), out.end());
  return out;
}

void key_store::for_each_link(key_serial keyring_serial,
                              const std::function<void(const std::string&, key_serial)>& fn) const {
  key* r = nullptr;
  {
    quiesce::detail::lock_guard guard(impl_->st.serial_lock);
    r = &impl_->keyring_locked(keyring_serial);
    key_get(*r);
  }
  {
    std::scoped_lock reading(rcu_default_domain());
    if (const link_set* set = r->links.load(std::memory_order_acquire)) {
      for (const key* k : set->keys)
        fn(k->description, k->serial);
    }
  }
  key_put(impl_->st, *r);
}

key_info key_store::info(key_serial serial) const {
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  const auto it = impl_->st.tree.find(serial);
  if (it == impl_->st.tree.end()) {
    throw std::system_error(ENOKEY, std::generic_category(), fmt::format("key {}", serial));
  }
  const key& k = *it->second;
  const std::uint32_t f = k.flags.load();
  const std::int64_t e = k.expiry.load();
  return {k.serial,
          k.type->name,
          k.description,
          k.keyring,
          (f & flag_revoked) != 0,
          (f & flag_invalidated) != 0,
          (f & flag_dead) != 0,
          k.usage.load(),
          e == never ? 0 : e};
}

bool key_store::exists(key_serial serial) const {
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  return impl_->st.tree.count(serial) != 0;
}

std::size_t key_store::live_keys() const {
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  return impl_->st.tree.size();
}

key_ref key_store::get(key_serial serial) {
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  key& k = impl_->find_locked(serial);
  key_get(k);
  return key_ref(this, &k);
}

void key_store::register_type(std::string name, std::function<void(std::string&)> destroy) {
  quiesce::detail::lock_guard guard(impl_->st.serial_lock);
  if (impl_->st.types.count(name)) {
    throw std::system_error(EEXIST, std::generic_category(), "key type '" + name + "'");
  }
  auto rec = std::make_unique<key_type_rec>();
  rec->name = name;
  rec->destroy = std::move(destroy);
  impl_->st.types.emplace(std::move(name), std::move(rec));
}

void key_store::unregister_type(std::string_view name) {
  store_state& st = impl_->st;
  quiesce::detail::lock_guard one_at_a_time(st.unregister_lock);
  {
    quiesce::detail::lock_guard guard(st.serial_lock);
    const auto t = st.types.find(std::string(name));
    if (name == "keyring" || name == "user" || t == st.types.end() || t->second->dead) {
      throw std::system_error(EINVAL, std::generic_category(),
                              fmt::format("key type '{}' cannot be unregistered", name));
    }
    t->second->dead = true;
    st.reaping_type = t->second.get();
  }
  // kernel: set REAP_KEYTYPE and REAPING_KEYTYPE, queue the collector, wait for it to clear
  // REAPING_KEYTYPE after the third pass.
  st.gc_flags.fetch_or(gc_reap_keytype | gc_reaping_keytype);
  schedule_gc(st, false);
  {
    may_block blocking;
    quiesce::detail::unique_lock lk(st.reap_lock);
    while (st.gc_flags.load() & gc_reaping_keytype)
      lk.wait(st.reap_done);
  }
}

void key_store::gc_request() {
  schedule_gc(impl_->st, false);
}

void key_store::gc_check_expired() {
  impl_->st.timer_at.store(never);
  schedule_gc(impl_->st, true);
}

void key_store::gc_wait_idle() {
  store_state& st = impl_->st;
  for (;;) {
    // Quiescent once a whole round - wait for the collector, let retired link sets drop
    // their references (which may request a pass), wait again - saw no execution.
    const std::uint64_t before = st.executions.load(std::memory_order_acquire);
    st.gc_work->flush();
    rcu_barrier();
    st.gc_work->flush();
    if (st.executions.load(std::memory_order_acquire) == before && !st.gc_work->pending()) break;
  }
}

gc_stats key_store::stats() const {
  const store_state& st = impl_->st;
  return {st.executions.load(), st.passes.load(), st.destroyed.load(), st.grace_periods.load(),
          st.links_dropped.load()};
}

// ---- key_ref ----

key_ref::key_ref(key_ref&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), key_(std::exchange(other.key_, nullptr)) {}

key_ref& key_ref::operator=(key_ref&& other) noexcept {
  if (this != &other) {
    if (key_) key_put(store_->impl_->st, *static_cast<key*>(key_));
    store_ = std::exchange(other.store_, nullptr);
    key_ = std::exchange(other.key_, nullptr);
  }
  return *this;
}

key_ref::~key_ref() {
  if (key_) key_put(store_->impl_->st, *static_cast<key*>(key_));
}

key_serial key_ref::serial() const noexcept {
  return key_ ? static_cast<key*>(key_)->serial : 0;
}

const char* to_string(gc_mode mode) noexcept {
  switch (mode) {
    case gc_mode::monolithic:
      return "monolithic";
    case gc_mode::chunked:
      return "chunked";
    case gc_mode::budget:
      return "budget";
  }
  return "?";
}

gc_mode parse_gc_mode(std::string_view text) {
  if (text == "monolithic") return gc_mode::monolithic;
  if (text == "chunked") return gc_mode::chunked;
  if (text == "budget") return gc_mode::budget;
  throw std::invalid_argument("mode: '" + std::string(text) +
                              "' is not one of monolithic, chunked, budget");
}

}  // namespace quiesce::keys
