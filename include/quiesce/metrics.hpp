// SPDX-License-Identifier: Apache-2.0
// quiesce/metrics.hpp - the runtime's counters as a Prometheus scrape: every workqueue's
// stats (the columns of the kernel's tools/workqueue/wq_monitor.py - total, in flight, CPU
// time, CPU hogs - and quiesce's latency histograms), every worker pool, the memory behind
// posted items, the watchdog's findings, and every RCU domain's grace periods and callbacks.
//
// The text is OpenMetrics 1.0 (application/openmetrics-text; version=1.0.0): one
// "# HELP" and "# TYPE" per family, counters as NAME_total, histograms as cumulative
// NAME_bucket{le="..."} lines ending with le="+Inf", then NAME_count and NAME_sum, times in
// seconds, label values escaped, "# EOF" last. Families and their labels:
//   quiesce_workqueue_*{workqueue="NAME",kind="bound"|"unbound"}
//   quiesce_pool_*{pool="ID",cpus="CPULIST",kind="bound"|"unbound",nice="N"}
//   quiesce_posted_*                         (process-wide: get_posted_memory())
//   quiesce_watchdog_*                       (process-wide)
//   quiesce_rcu_*{domain="default"|"qsbr"|"tasks"}
// A histogram bucket counts the samples whose recorded bucket (quiesce/histogram.hpp, at
// most 1/64 of its value wide) lies wholly at or below `le`: a sample within 1.6% below a
// bound may be counted in the next bucket up, never in a lower one.
//
// Cost: takes each pool's lock briefly and reads each worker's schedstat file (a few
// microseconds per worker); call it per scrape, not per item. Two queues may share a name:
// their series then share labels, as the kernel's do. Throws std::logic_error in a forked
// child of a process that used workqueues (as every workqueue call does there).
#pragma once

#include <ostream>

namespace quiesce {

// Writes one scrape to `out` (the caller sets the HTTP Content-Type above, if any).
void write_openmetrics(std::ostream& out);

// The Content-Type a scrape is served with.
inline constexpr const char* openmetrics_content_type =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

}  // namespace quiesce
