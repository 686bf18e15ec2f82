// SPDX-License-Identifier: Apache-2.0
// The verified_files `quiesce verity mount` keeps for inodes that have no handle open
// (internal to src/mount), so that a re-open does not read and allocate the inode's tree
// again: a warm re-read through the mount costs the open's round trip, not a tree read
// (8 ms for a 256 MiB file here: 2 MiB allocated and read from the sidecar).
//
// Why keeping one is safe: a verified_file holds the tree it read and checks every tree
// block against the descriptor's root hash before trusting it, and every data block it
// returns against the tree; it keeps nothing unverified. An identity whose verity changes
// drops its file (nodes.cpp), and a kept file is reused only for the same descriptor.
//
// What bounds it: at most `max_files` inodes and `max_bytes` of trees, the least recently
// closed let go first (their identity's file is dropped unless a handle opened it again).
// An identity holds its kept file only while the kernel knows one of its nodes: a file
// unlinked and forgotten is closed and its space freed, as without the cache.
//
// Protection legend (docs/DESIGN.md): L(lock_) - QUIESCE_GUARDED_BY - taken with no other
// lock held; it is never held while an identity's lock is taken (let_go runs after it is
// released).
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "../base/mutex.hpp"

namespace quiesce::mount::detail {

struct identity;

class retained_files {
 public:
  retained_files(std::size_t max_files, std::size_t max_bytes)
      : max_files_(max_files), max_bytes_(max_bytes) {}
  // `who` closed its last handle and keeps its file (`bytes` of tree): it becomes the most
  // recently closed; those over the bounds are let go (their files dropped, unlocked).
  void closed(const std::shared_ptr<identity>& who, std::size_t bytes);
  // Drops every kept file (teardown, before the verification queue goes).
  void clear();

 private:
  struct entry {
    std::weak_ptr<identity> who;
    std::size_t bytes;
  };
  using order = std::list<entry>;
  // Drops the kept file of each identity still alive with no handle open.
  static void let_go(std::vector<std::weak_ptr<identity>> gone);

  const std::size_t max_files_;
  const std::size_t max_bytes_;
  quiesce::detail::mutex lock_{"mount retained_files::lock_"};
  order lru_ QUIESCE_GUARDED_BY(lock_);  // most recently closed first
  std::map<std::weak_ptr<identity>, order::iterator, std::owner_less<>> where_
      QUIESCE_GUARDED_BY(lock_);
  std::size_t bytes_ QUIESCE_GUARDED_BY(lock_) = 0;
};

}  // namespace quiesce::mount::detail
