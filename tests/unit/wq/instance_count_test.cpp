// SPDX-License-Identifier: Apache-2.0
// The per-CPU instance count that drain() reads (src/wq/instance_count.hpp): its zero test
// must never report "nothing exists" while an instance does - also when an instance is
// created on a CPU whose slot was already read while the one that created it ends on a
// slot not read yet (a chained item hopping between CPUs during a drain).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <functional>
#include <thread>

#include "instance_count.hpp"
#include "quiesce/topology.hpp"

namespace {

using quiesce::detail::instance_count;

// Runs `op` on a thread pinned to `cpu`, so that it counts in that CPU's slot.
void on_cpu(int cpu, const std::function<void()>& op) {
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
    ASSERT_EQ(sched_getcpu(), cpu);
    op();
  });
  t.join();
}

struct two_cpus {
  int a = -1;
  int b = -1;
};

two_cpus first_two_cpus() {
  two_cpus c;
  for (int cpu : quiesce::system_topology().cpus()) {
    if (c.a < 0) {
      c.a = cpu;
    } else if (c.b < 0) {
      c.b = cpu;
    }
  }
  return c;
}

TEST(InstanceCount, CountsAcrossCpus) {
  const two_cpus c = first_two_cpus();
  if (c.b < 0) GTEST_SKIP() << "needs two usable CPUs";
  instance_count n(static_cast<std::size_t>(c.b) + 1);
  EXPECT_TRUE(n.zero());
  on_cpu(c.a, [&] { n.created(); });
  EXPECT_FALSE(n.zero());
  on_cpu(c.b, [&] { n.ended(); });  // ended on another CPU than it was created on
  EXPECT_TRUE(n.zero());
}

// An instance R exists (created on CPU b). While zero() reads, after the slot of the lower
// CPU a has been read, R creates a chained instance C on CPU a and then ends on CPU b:
// at every moment one instance existed, so zero() must say false.
TEST(InstanceCount, ZeroNeverMissesAnInstanceCreatedBehindTheReader) {
  const two_cpus c = first_two_cpus();
  if (c.b < 0) GTEST_SKIP() << "needs two usable CPUs";
  instance_count n(static_cast<std::size_t>(c.b) + 1);
  on_cpu(c.b, [&] { n.created(); });  // R
  struct context {
    instance_count* n;
    two_cpus c;
    bool done = false;
  } ctx{&n, c};
  const bool zero = n.zero(
      [](void* p, std::size_t slot) {
        auto& x = *static_cast<context*>(p);
        if (x.done || slot != static_cast<std::size_t>(x.c.a)) return;
        x.done = true;
        on_cpu(x.c.a, [&] { x.n->created(); });  // C, on a slot already read
        on_cpu(x.c.b, [&] { x.n->ended(); });    // R ends, on a slot not read yet
      },
      &ctx);
  ASSERT_TRUE(ctx.done);
  EXPECT_FALSE(zero) << "zero() reported no instance while C existed";
  on_cpu(c.a, [&] { n.ended(); });  // C ends
  EXPECT_TRUE(n.zero());
}

}  // namespace
