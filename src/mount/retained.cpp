// SPDX-License-Identifier: Apache-2.0
// The verified_files kept for inodes with no handle open (retained.hpp).
#include "retained.hpp"

#include <utility>

#include "fs.hpp"

namespace quiesce::mount::detail {

void retained_files::closed(const std::shared_ptr<identity>& who, std::size_t bytes) {
  std::vector<std::weak_ptr<identity>> gone;
  {
    quiesce::detail::lock_guard g(lock_);
    const std::weak_ptr<identity> key = who;
    if (const auto it = where_.find(key); it != where_.end()) {
      bytes_ -= it->second->bytes;
      lru_.erase(it->second);
      where_.erase(it);
    }
    lru_.push_front({key, bytes});
    where_[key] = lru_.begin();
    bytes_ += bytes;
    if (lru_.size() > max_files_ || bytes_ > max_bytes_) {
      // Identities the kernel forgot hold nothing any more: not counted against the others.
      for (auto it = lru_.begin(); it != lru_.end();) {
        if (!it->who.expired()) {
          ++it;
          continue;
        }
        bytes_ -= it->bytes;
        where_.erase(it->who);
        it = lru_.erase(it);
      }
    }
    while (lru_.size() > max_files_ || bytes_ > max_bytes_) {
      entry& last = lru_.back();
      bytes_ -= last.bytes;
      where_.erase(last.who);
      gone.push_back(std::move(last.who));
      lru_.pop_back();
    }
  }
  let_go(std::move(gone));
}

void retained_files::clear() {
  std::vector<std::weak_ptr<identity>> gone;
  {
    quiesce::detail::lock_guard g(lock_);
    for (entry& e : lru_)
      gone.push_back(std::move(e.who));
    lru_.clear();
    where_.clear();
    bytes_ = 0;
  }
  let_go(std::move(gone));
}

void retained_files::let_go(std::vector<std::weak_ptr<identity>> gone) {
  for (const auto& w : gone) {
    const std::shared_ptr<identity> who = w.lock();
    if (!who) continue;
    std::shared_ptr<verified_file> file;  // freed unlocked
    quiesce::detail::lock_guard v(who->lock);
    if (who->opens == 0) file = std::move(who->file);
  }
}

}  // namespace quiesce::mount::detail
