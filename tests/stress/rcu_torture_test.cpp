// rcutorture on each domain: short in the normal suites; QUIESCE_TORTURE_SECONDS=N for a
// long run (./quiesce bench runs one).
#include <gtest/gtest.h>

#include "rcu_torture.hpp"

namespace quiesce {
namespace {

void torture(rcu_domain& d) {
  const test::torture_result r = test::rcu_torture(d, test::torture_seconds(1.0));
  std::cout << r.report(d.name()) << "\n";
  EXPECT_FALSE(r.failed()) << r.report(d.name());
  EXPECT_GT(r.reads, 0u);
  EXPECT_GT(r.updates, 0u);
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
