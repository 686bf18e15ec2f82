// SPDX-License-Identifier: Apache-2.0
// The torture test against a deliberately broken RCU must FAIL for every domain: proof
// that the checker catches the bug it guards against. Linked against two broken builds:
// QUIESCE_RCU_BROKEN_FOR_TESTS (grace periods do not wait for readers) and
// QUIESCE_RCU_EARLY_FOR_TESTS (a grace period already in progress counts: it ends one
// period early).
#include <gtest/gtest.h>

#include "rcu_torture.hpp"

namespace quiesce {
namespace {

void must_fail(rcu_domain& d) {
  const test::torture_result r =
      test::rcu_torture(d, /*seconds=*/60, /*readers=*/2, /*stop_on_failure=*/true);
  std::cout << r.report(d.name()) << "\n";
  EXPECT_TRUE(r.failed()) << "the torture test did not notice a broken " << d.name();
}

TEST(RcuTortureBroken, DefaultDomainFailureIsDetected) {
  must_fail(rcu_default_domain());
}
TEST(RcuTortureBroken, QsbrDomainFailureIsDetected) {
  must_fail(rcu_qsbr_domain());
}
TEST(RcuTortureBroken, TasksDomainFailureIsDetected) {
  must_fail(rcu_tasks_domain());
}

}  // namespace
}  // namespace quiesce
