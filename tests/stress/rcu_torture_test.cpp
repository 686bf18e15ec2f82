// SPDX-License-Identifier: Apache-2.0
// rcutorture on each domain: short in the normal suites; QUIESCE_TORTURE_SECONDS=N for a
// long run (./quiesce bench runs one), which must also reach QUIESCE_TORTURE_MIN_GPS grace
// periods per domain when that is set.
#include <gtest/gtest.h>

#include <cstdlib>

#include "rcu_torture.hpp"

namespace quiesce {
namespace {

void torture(rcu_domain& d) {
  const char* min = std::getenv("QUIESCE_TORTURE_MIN_GPS");
  const std::uint64_t min_gps = min ? std::strtoull(min, nullptr, 10) : 0;
  const test::torture_result r =
      test::rcu_torture(d, test::torture_seconds(1.0), 2, /*stop_on_failure=*/false, min_gps);
  std::cout << r.report(d.name()) << "\n";
  EXPECT_FALSE(r.failed()) << r.report(d.name());
  EXPECT_GT(r.reads, 0u);
  EXPECT_GT(r.updates, 0u);
  EXPECT_GT(r.exit_reads, 0u) << "no read ran in a thread-exit destructor";
  EXPECT_GE(r.grace_periods, min_gps) << r.report(d.name());
}

TEST(RcuTorture, DefaultDomain) {
  torture(rcu_default_domain());
}
TEST(RcuTorture, QsbrDomain) {
  torture(rcu_qsbr_domain());
}
TEST(RcuTorture, TasksDomain) {
  torture(rcu_tasks_domain());
}

}  // namespace
}  // namespace quiesce
