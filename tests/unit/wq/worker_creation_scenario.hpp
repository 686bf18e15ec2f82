// SPDX-License-Identifier: Apache-2.0
// What the two worker-creation scenarios share (wq_exit_child's thread limit, wq_alloc_child's
// out-of-memory): the runtime's own threads started first, and the check that the creation
// under test did fail - the item waits in an unbound pool that has no worker.
#pragma once

#include "quiesce/workqueue.hpp"

namespace quiesce::test {

// Starts the runtime's threads (the watchdog's, a per-CPU worker), so that nothing after
// this needs a thread but the worker under test. False: the warm-up item was refused.
inline bool start_runtime_threads() {
  quiesce::workqueue warm("warm");
  quiesce::work warm_item("warm", [](quiesce::work&) {});
  if (!warm.queue(warm_item)) return false;
  warm_item.flush();
  return true;
}

// True when an unbound pool holds one pending item and no worker: the creation failed.
inline bool item_waits_in_a_pool_without_workers() {
  for (const quiesce::pool_info& p : quiesce::worker_pools()) {
    if (!p.bound && p.nr_pending == 1 && p.nr_workers == 0) return true;
  }
  return false;
}

}  // namespace quiesce::test
