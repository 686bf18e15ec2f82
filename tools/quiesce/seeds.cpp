// SPDX-License-Identifier: Apache-2.0
#include "seeds.hpp"

namespace quiesce::cli {

const std::vector<seed>& seeds() {
  static const std::vector<seed> all = {
      {"000", "KEYS: key_garbage_collector(): process in chunks",
       "the key garbage collector scanned and freed every key in one work-item execution, "
       "locking up a per-CPU workqueue",
       "keygc",
       "keygcbench, execution durations in ms (var in ms^2):\n\n"
       "| phase | before: min / avg / max / var | after (chunks of 64) |\n"
       "|---|---|---|\n"
       "| unused | 798.785 / 4181.989 / 7565.193 / 11446068.927 | 0.005 / 0.125 / 79.590 / 1.088 "
       "|\n"
       "| expired | 0.003 / 2404.971 / 4111.065 / 3061018.501 | 0.002 / 0.196 / 236.207 / 8.121 |\n"
       "| combined | 0.003 / 3115.778 / 7565.193 / 7172908.943 | 0.002 / 0.154 / 236.207 / 3.912 "
       "|\n\n"
       "93% drop in the combined variance; 2.2% increase in the total task time."},
      {"003", "x86/sgx: Fix RCU Tasks stalls in EPC sanitization loop",
       "an SGX page-sanitizing loop never reported an RCU Tasks quiescent state, so a "
       "synchronize_rcu_tasks() waiter hung boot",
       "sanitize",
       "Boot time 50 s before, 10.7 s after replacing cond_resched() with cond_resched_rcu_qs() in "
       "the loop "
       "(the BPF trampoline attach no longer waits for the whole sanitization)."},
      {"004", "fsverity: Remove WQ_UNBOUND from fsverity read workqueue",
       "fs-verity read verification on an unbound workqueue suffered scheduler latency", "verity",
       "Verification-workqueue scheduler latency (time runnable) 553800 us -> 18962 us: "
       "96% less, and ~30 ms faster app cold start (ARM64/Android)."},
  };
  return all;
}

}  // namespace quiesce::cli
