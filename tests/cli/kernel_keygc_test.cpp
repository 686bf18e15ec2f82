// SPDX-License-Identifier: Apache-2.0
// `quiesce keygc --kernel` against the host kernel's keyring: the quota check creates
// nothing, everything created is removed (also after SIGINT), gc_delay comes back. These
// tests change kernel state, so CTest runs them under one RESOURCE_LOCK. Where the
// keyring cannot be used (no CONFIG_KEYS, a seccomp filter) they skip, saying why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "quiesce/clock.hpp"
#include "quiesce/experiments/kernel_keygc.hpp"
#include "quiesce/experiments/keygcbench_format.hpp"
#include "quiesce/host/cyclictest.hpp"
#include "quiesce/host/kernel_trace.hpp"
#include "quiesce/host/keyring.hpp"
#include "quiesce/host/kworker_time.hpp"
#include "quiesce/host/sysctl_override.hpp"
#include "quiesce/thread.hpp"
#include "shell.hpp"
#include "wait.hpp"

namespace quiesce::experiments {
using namespace quiesce::host;
namespace {

namespace fs = std::filesystem;
constexpr const char* gc_delay_sysctl = "/proc/sys/kernel/keys/gc_delay";

// Skips (saying why) unless `keys` keys fit this user's quota in a usable keyring.
#define SKIP_UNLESS_KEYRING_FITS(keys)                                       \
  do {                                                                       \
    if (auto why = kernel_keyring_unusable(keys, 100)) GTEST_SKIP() << *why; \
  } while (0)

bool none_left(const std::string& needle) {
  return test::eventually([&] { return proc_keys_matching(needle).empty(); });
}

TEST(KeyUsers, ParsesTheLineOfTheUser) {
  const std::string text =
      "    0:     9 8/8 3/1000000 40/25000000\n"
      " 1000:  1011 1010/1009 1005/200 11945/20000\n";
  const auto root = parse_key_users(text, 0);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->usage, 9u);
  EXPECT_EQ(root->nkeys, 8u);
  EXPECT_EQ(root->qnkeys, 3u);
  EXPECT_EQ(root->maxkeys, 1000000u);
  EXPECT_EQ(root->qnbytes, 40u);
  EXPECT_EQ(root->maxbytes, 25000000u);
  const auto user = parse_key_users(text, 1000);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->nikeys, 1009u);
  EXPECT_EQ(user->maxkeys, 200u);
  EXPECT_FALSE(parse_key_users(text, 42));  // no keys yet
  EXPECT_THROW(parse_key_users("  42: 1 2/2\n", 42), std::runtime_error);
}

TEST(KeyQuota, APopulationThatDoesNotFitIsRefusedNamingTheKnob) {
  population_shape shape{100'000, 100, 8, "t"};
  EXPECT_EQ(shape.keyrings(), 1000u);
  EXPECT_EQ(shape.quota_keys(), 101'003u);
  key_quota user{0, 0, 0, 0, 200, 0, 20'000};
  const auto refusal = quota_refusal(shape, user, 1000);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("/proc/sys/kernel/keys/maxkeys"), std::string::npos) << *refusal;
  key_quota root{0, 0, 0, 5, 1'000'000, 40, 2'000'000};
  const auto bytes = quota_refusal(shape, root, 0);  // keys fit, ~2.2 MB of bytes do not
  ASSERT_TRUE(bytes);
  EXPECT_NE(bytes->find("root_maxbytes"), std::string::npos) << *bytes;
  root.maxbytes = 25'000'000;
  EXPECT_FALSE(quota_refusal(shape, root, 0));
  root.qnkeys = 1'000'000 - shape.quota_keys() + 1;  // one key short
  EXPECT_TRUE(quota_refusal(shape, root, 0));
}

TEST(KernelPopulation, TheQuotaCheckRefusesBeforeCreatingAnything) {
  SKIP_UNLESS_KEYRING_FITS(10);
  const key_quota q = read_key_quota();
  const std::string tag = "refused" + std::to_string(::getpid());
  // One key more than the quota has room for.
  population_shape shape{static_cast<std::size_t>(q.maxkeys - q.qnkeys), 100, 8, tag};
  try {
    kernel_population pop(shape);
    FAIL() << "a population over the quota was created";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit the kernel's key quota"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(proc_keys_matching(tag).empty());  // not even the top keyring
}

TEST(KernelPopulation, EverythingCreatedIsRemovedOnDestructionAndOnFailure) {
  SKIP_UNLESS_KEYRING_FITS(1000);
  const std::string tag = "gone" + std::to_string(::getpid());
  {
    kernel_population pop({1000, 100, 8, tag});
    EXPECT_EQ(pop.keys().size(), 1000u);
    EXPECT_EQ(pop.keyrings().size(), 10u);
    EXPECT_EQ(proc_keys_matching(tag).size(), 1011u);  // keys, keyrings, the top
  }
  EXPECT_TRUE(none_left(tag)) << proc_keys_matching(tag).size() << " keys left";

  // A payload over the user type's 32767 bytes: the kernel refuses the first key after the
  // top keyring and a keyring exist; both go.
  const std::string failed = "fail" + std::to_string(::getpid());
  EXPECT_THROW(kernel_population({10, 10, 40'000, failed}), std::system_error);
  EXPECT_TRUE(none_left(failed)) << proc_keys_matching(failed).size() << " keys left";
}

TEST(KernelPopulation, ClearAndTimeoutsReachEveryKey) {
  SKIP_UNLESS_KEYRING_FITS(250);
  const std::string tag = "phases" + std::to_string(::getpid());
  kernel_population pop({250, 100, 8, tag});
  const std::int64_t expiry = pop.set_timeouts(3600);
  EXPECT_GE(expiry, static_cast<std::int64_t>(std::time(nullptr)) + 3599);
  // /proc/keys shows a timeout as "59m" or "60m" in the expiry column, "perm" without one.
  std::size_t with_timeout = 0;
  for (const std::string& line : proc_keys_matching("qk." + tag + "."))
    with_timeout += line.find(" perm ") == std::string::npos;
  EXPECT_EQ(with_timeout, 250u);  // the 3 keyrings match the needle too, without a timeout
  pop.clear_keyrings();
  EXPECT_TRUE(test::eventually([&] {
    return proc_keys_matching("qk." + tag + ".").size() == 3;  // the keyrings stay
  }));
}

// Every key of the expired phase expires in the same second (so the kernel's collector
// unlinks them in one pass): /proc/keys shows their time left within one second.
TEST(KernelPopulation, EveryKeyExpiresInTheSameSecond) {
  SKIP_UNLESS_KEYRING_FITS(1000);
  const std::string tag = "same" + std::to_string(::getpid());
  kernel_population pop({1000, 100, 8, tag});
  const std::int64_t expiry = pop.set_timeouts(50);
  EXPECT_LE(expiry, static_cast<std::int64_t>(std::time(nullptr)) + 51);
  long least = 1 << 30, most = -1;
  for (const std::string& line : proc_keys_matching("qk." + tag + ".")) {
    std::istringstream f(line);
    std::string serial, flags, usage, timeout;
    ASSERT_TRUE(f >> serial >> flags >> usage >> timeout) << line;
    if (timeout == "perm") continue;  // a keyring
    ASSERT_EQ(timeout.back(), 's') << line;
    const long left = std::stol(timeout);
    least = std::min(least, left);
    most = std::max(most, left);
  }
  ASSERT_GE(most, 0) << "no key with a timeout";
  EXPECT_LE(most - least, 1) << "keys expire " << least << " to " << most << " s from now";
  pop.clear_keyrings();
  EXPECT_TRUE(test::eventually([&] {
    return proc_keys_matching("qk." + tag + ".").size() == 10;  // the keyrings stay
  }));
}

TEST(Kworkers, NamesMapToTheirCpu) {
  EXPECT_EQ(kworker_cpu("kworker/1:2"), 1);
  EXPECT_EQ(kworker_cpu("kworker/0:1H-kblockd"), 0);
  EXPECT_EQ(kworker_cpu("kworker/13:0-events"), 13);
  EXPECT_FALSE(kworker_cpu("kworker/u8:3-events_unbound"));
  EXPECT_FALSE(kworker_cpu("kworker/R-mm_percpu_wq"));
  EXPECT_FALSE(kworker_cpu("ksoftirqd/0"));
  kworker_sample before, after;
  before.threads[10] = {0, 100};
  before.threads[11] = {1, 50};
  after.threads[10] = {0, 160};
  after.threads[11] = {1, 50};
  after.threads[12] = {1, 30};  // born in between
  const auto gain = kworker_gain_per_cpu(before, after);
  EXPECT_EQ(gain.at(0), 60u);
  EXPECT_EQ(gain.at(1), 30u);
}

TEST(SysctlOverride, RestoresOnDestruction) {
  if (::access(gc_delay_sysctl, W_OK) != 0)
    GTEST_SKIP() << gc_delay_sysctl << " is not writable here";
  const std::string old = read_sysctl(gc_delay_sysctl);
  const std::string other = old == "7" ? "8" : "7";
  {
    sysctl_override o(gc_delay_sysctl, other);
    EXPECT_EQ(o.old_value(), old);
    EXPECT_EQ(read_sysctl(gc_delay_sysctl), other);
    EXPECT_THROW(sysctl_override(gc_delay_sysctl, "9"), std::logic_error);  // one at a time
    EXPECT_EQ(read_sysctl(gc_delay_sysctl), other);
  }
  EXPECT_EQ(read_sysctl(gc_delay_sysctl), old);
  EXPECT_THROW(sysctl_override(gc_delay_sysctl, "not a number"), std::runtime_error);
  EXPECT_EQ(read_sysctl(gc_delay_sysctl), old);
  EXPECT_THROW(sysctl_override("/proc/sys/kernel/keys/no_such_knob", "1"), std::runtime_error);
}

// The CLI under test: QUIESCE_KEYGC_CLI if set (a CLI built against a host mutant,
// tests/mutants), else this build's.
const char* cli_path() {
  const char* mutant = std::getenv("QUIESCE_KEYGC_CLI");
  return mutant && *mutant ? mutant : QUIESCE_CLI;
}

// The CLI, run as a user would: fork + exec, output to a file.
struct child {
  pid_t pid = -1;
  fs::path out;
};

child spawn(const std::vector<std::string>& args) {
  child c;
  c.out = fs::temp_directory_path() /
          ("quiesce-kernel-test-" + std::to_string(::getpid()) + "-" + std::to_string(args.size()));
  const char* const cli = cli_path();
  std::vector<char*> argv{const_cast<char*>(cli)};
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  c.pid = ::fork();
  if (c.pid == 0) {
    const int fd = ::open(c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(cli, argv.data());
    ::_exit(127);
  }
  return c;
}

using quiesce::test::slurp;

// How the child ended, and what it wrote (its output file is removed).
struct ended {
  int status = -1;
  std::string out;
};

ended wait_for(const child& c) {
  ended e;
  EXPECT_EQ(::waitpid(c.pid, &e.status, 0), c.pid) << std::strerror(errno);
  e.out = slurp(c.out);
  fs::remove(c.out);
  return e;
}

// A user's ^C: the child must die of SIGINT (after its cleanup ran).
ended interrupt(const child& c) {
  if (::kill(c.pid, SIGINT) != 0) {
    ADD_FAILURE() << "kill: " << std::strerror(errno);
    ::kill(c.pid, SIGKILL);
  }
  ended e = wait_for(c);
  EXPECT_TRUE(WIFSIGNALED(e.status) && WTERMSIG(e.status) == SIGINT)
      << "status " << e.status << ": " << e.out;
  return e;
}

TEST(KeygcKernelCli, ARunReportsBothPhasesAndLeavesNothingBehind) {
  SKIP_UNLESS_KEYRING_FITS(2000);
  if (::access(gc_delay_sysctl, W_OK) != 0)
    GTEST_SKIP() << gc_delay_sysctl << " is not writable here";
  const std::string old = read_sysctl(gc_delay_sysctl);
  child c = spawn({"keygc", "--kernel", "--keys", "2000", "--set-gc-delay", "1", "--json"});
  const auto [status, out] = wait_for(c);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["mode"], "kernel");
  for (const char* phase : {"unused", "expired"}) {
    EXPECT_EQ(j[phase]["reclaim"]["n"], 1) << phase;
    EXPECT_GE(j[phase]["collector_cpu"].get<int>(), 0) << phase;
    EXPECT_GT(j[phase]["probe"]["on_collector_cpu"]["n"].get<int>(), 0) << phase;
  }
  EXPECT_EQ(read_sysctl(gc_delay_sysctl), old);
  EXPECT_TRUE(none_left("." + std::to_string(c.pid) + "."));
}

TEST(KeygcKernelCli, SigintRestoresGcDelayAndTheKeysGo) {
  SKIP_UNLESS_KEYRING_FITS(200000);
  if (::access(gc_delay_sysctl, W_OK) != 0)
    GTEST_SKIP() << gc_delay_sysctl << " is not writable here";
  const std::string old = read_sysctl(gc_delay_sysctl);
  ASSERT_NE(old, "1");
  // Enough keys that the run is still going when the signal comes; the signal is sent as
  // soon as the run has changed gc_delay.
  child c = spawn({"keygc", "--kernel", "--keys", "200000", "--runs", "50", "--set-gc-delay", "1"});
  ASSERT_TRUE(test::eventually([&] { return read_sysctl(gc_delay_sysctl) == "1"; }))
      << "the run never changed gc_delay: " << slurp(c.out);
  interrupt(c);
  EXPECT_EQ(read_sysctl(gc_delay_sysctl), old);
  // The process keyring died with the process: the kernel collects the rest.
  EXPECT_TRUE(none_left("." + std::to_string(c.pid) + "."));
}

// keygcbench from the kernel's events: pairing on a recorded event list (two CPUs, one
// end whose start came before tracing, one start whose end has not come), and the lines
// computed from it, by hand: durations 2000, 500 and 6000 ns.
TEST(KernelTrace, PairsARecordedEventListIntoExecutions) {
  const std::vector<workqueue_event> events = {
      {false, 1, 100, 0xc},  // an end whose start came before tracing
      {true, 1, 1000, 0xa}, {true, 0, 2000, 0xb},   {false, 0, 2500, 0xb}, {false, 1, 3000, 0xa},
      {true, 1, 5000, 0xa}, {false, 1, 11000, 0xa}, {true, 0, 20000, 0xa},  // still running
  };
  std::size_t unpaired = 0;
  std::vector<workqueue_event> open;
  const auto ex = pair_executions(events, &unpaired, &open);
  ASSERT_EQ(ex.size(), 3u);
  EXPECT_EQ(unpaired, 1u);
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].ts_ns, 20000u);
  EXPECT_EQ(ex[0].cpu, 1);
  EXPECT_EQ(ex[0].duration_ns(), 2000u);
  EXPECT_EQ(ex[1].cpu, 0);
  EXPECT_EQ(ex[1].duration_ns(), 500u);
  EXPECT_EQ(ex[2].duration_ns(), 6000u);
  summary s;
  for (const auto& e : ex)
    s.add(static_cast<double>(e.duration_ns()));
  // mean 2833.33 ns; squared deviations 694444.4 + 5444444.4 + 10027777.8 over 3.
  EXPECT_EQ(keygcbench_line("unused", s), "unused:   min=0.001 avg=0.003 max=0.006 var=0.000");
  EXPECT_NEAR(s.variance(), 5388888.89, 0.01);
  EXPECT_NEAR(s.mean(), 2833.333, 0.001);
}

// Where tracefs is mounted (fstype tracefs in the calling thread's mounts), and the kernel's
// ftrace instances - read through a private mount of tracefs, since an instance outlives
// every mount (one left behind under an unmounted tracefs is still there).
struct tracefs_state {
  std::vector<std::string> mounts;
  std::vector<std::string> instances;
  bool operator==(const tracefs_state&) const = default;
};
// "mounts: A B; instances: C" - what a failure prints.
std::ostream& operator<<(std::ostream& os, const tracefs_state& s) {
  os << "mounts:";
  for (const auto& m : s.mounts)
    os << " " << m;
  os << "; instances:";
  for (const auto& i : s.instances)
    os << " " << i;
  return os;
}

// Runs `command` on tracefs' instances directory, reached through a tracefs view mounted in
// a mount namespace of its own: a view in this one would be seen by a traced run's libtracefs
// as tracefs mounted (the first tracefs mount in /proc/mounts), used for its instance, and
// gone under it - the instance was then left behind, and tracefs mounted, in 8 runs of 30 of
// the SIGINT test below. The command run is `command`, the directory's path, then `suffix`.
quiesce::test::shell_result in_instances_dir(const std::string& command,
                                             const std::string& suffix = "") {
  const fs::path view =
      fs::temp_directory_path() / ("quiesce-tracefs-" + std::to_string(::getpid()));
  fs::create_directories(view);
  const quiesce::test::shell_result r = quiesce::test::run_shell(
      "unshare --mount --propagation private sh -c 'mount -t tracefs nodev " + view.string() +
      " && " + command + " " + view.string() + "/instances" + suffix + "' 2>&1");
  fs::remove(view);
  return r;
}

tracefs_state read_tracefs_state() {
  tracefs_state s;
  std::ifstream in("/proc/thread-self/mounts");  // this thread's: see the test below
  std::string dev, dir, type, rest;
  while (in >> dev >> dir >> type && std::getline(in, rest)) {
    if (type == "tracefs") s.mounts.push_back(dir);
  }
  const quiesce::test::shell_result r = in_instances_dir("ls -1");
  if (r.code != 0) {
    ADD_FAILURE() << "cannot look at tracefs' instances: " << r.out;
  } else {
    std::istringstream lines(r.out);
    for (std::string name; std::getline(lines, name);)
      if (!name.empty()) s.instances.push_back(name);
  }
  std::sort(s.instances.begin(), s.instances.end());
  return s;
}

// Removes the kernel's ftrace instance `name`.
void remove_tracefs_instance(const std::string& name) {
  const quiesce::test::shell_result r = in_instances_dir("rmdir", "/" + name);
  EXPECT_EQ(r.code, 0) << "cannot remove the instance " << name << ": " << r.out;
}

// Skips unless this process could trace the kernel's workqueue (root, tracefs).
#define SKIP_UNLESS_TRACING()                                                  \
  do {                                                                         \
    try {                                                                      \
      workqueue_trace probe_trace("key_garbage_collector");                    \
    } catch (const std::exception& e) {                                        \
      GTEST_SKIP() << "the kernel's tracepoints are not usable: " << e.what(); \
    }                                                                          \
  } while (0)

TEST(KeygcKernelCli, TracedRunRecordsTheCollectorAndLeavesNoInstance) {
  SKIP_UNLESS_KEYRING_FITS(3000);
  SKIP_UNLESS_TRACING();
  const tracefs_state before = read_tracefs_state();
  child c = spawn({"keygc", "--kernel", "--keys", "3000", "--json"});
  const auto [status, out] = wait_for(c);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["tracing"], "tracepoints") << out;
  const auto& unused = j["unused"];
  ASSERT_TRUE(unused.contains("executions")) << out;
  EXPECT_GE(unused["executions"]["n"].get<int>(), 1) << out;
  EXPECT_GT(unused["executions"]["max_ms"].get<double>(), 0) << out;
  EXPECT_EQ(unused["collector_cpu_from"], "tracepoints");
  EXPECT_GE(unused["collector_cpu"].get<int>(), 0);
  EXPECT_LT(unused["collector_cpu"].get<long>(), ::sysconf(_SC_NPROCESSORS_CONF));
  EXPECT_EQ(unused["executions_ms"].size(), unused["executions"]["n"].get<std::size_t>());
  EXPECT_EQ(read_tracefs_state(), before) << "a tracefs mount or instance was left behind";
}

TEST(KeygcKernelCli, SigintDuringATracedRunLeavesNoInstanceNorMount) {
  SKIP_UNLESS_KEYRING_FITS(200000);
  SKIP_UNLESS_TRACING();
  const tracefs_state before = read_tracefs_state();
  child c = spawn({"keygc", "--kernel", "--keys", "200000", "--runs", "50"});
  // The signal comes once the run's instance exists.
  ASSERT_TRUE(test::eventually([&] {
    const tracefs_state now = read_tracefs_state();
    return std::any_of(now.instances.begin(), now.instances.end(), [&](const std::string& i) {
      return i == "quiesce-" + std::to_string(c.pid);
    });
  })) << "the run never created its instance: "
      << slurp(c.out);
  interrupt(c);
  EXPECT_EQ(read_tracefs_state(), before) << "a tracefs mount or instance was left behind";
  EXPECT_TRUE(none_left("." + std::to_string(c.pid) + "."));
}

// Another process's passing tracefs mount is not the run's: mounted before the run starts,
// with /sys/kernel/tracing not mounted, it is the first tracefs in /proc/mounts - the one
// libtracefs would take - and it goes while the run goes on; the run's instance and mount are
// the run's own, which it removes when interrupted. The test runs on a thread in a mount
// namespace of its own (mount namespaces are per task, and the CLI forked from the thread
// inherits it), private, where /sys/kernel/tracing is not mounted whatever the machine has
// there: with it mounted, it is the first tracefs and the test told nothing apart (it passed
// against mutant host_trace_takes_first_tracefs).
TEST(KeygcKernelCli, AnotherProcesssTracefsMountIsNotTheRuns) {
  SKIP_UNLESS_KEYRING_FITS(200000);
  SKIP_UNLESS_TRACING();
  std::string no_namespace;
  std::thread([&] {
    if (::unshare(CLONE_NEWNS) != 0) {
      no_namespace = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
      return;
    }
    // Private first: an unmount here must not reach the machine's mount table.
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
        << std::strerror(errno);
    // Every tracefs mount out of this namespace (/sys/kernel/tracing, debugfs' tracing,
    // perhaps stacked): the test's own is then the only one.
    for (int round = 0; round < 8 && !read_tracefs_state().mounts.empty(); ++round) {
      for (const std::string& dir : read_tracefs_state().mounts)
        ::umount2(dir.c_str(), MNT_DETACH);
    }
    const tracefs_state before = read_tracefs_state();
    ASSERT_TRUE(before.mounts.empty())
        << "tracefs still mounted in the test's namespace: " << before;
    const fs::path other =
        fs::temp_directory_path() / ("quiesce-other-tracefs-" + std::to_string(::getpid()));
    fs::create_directories(other);
    ASSERT_EQ(::mount("nodev", other.c_str(), "tracefs", 0, nullptr), 0) << std::strerror(errno);
    child c = spawn({"keygc", "--kernel", "--keys", "200000", "--runs", "50"});
    const std::string instance = "quiesce-" + std::to_string(c.pid);
    const bool started =
        test::eventually([&] { return fs::exists(other / "instances" / instance); });
    EXPECT_EQ(::umount2(other.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    fs::remove(other);
    if (!started) {
      ADD_FAILURE() << "the run never created its instance: " << slurp(c.out);
      ::kill(c.pid, SIGKILL);
      wait_for(c);
      return;
    }
    const ended e = interrupt(c);
    const tracefs_state after = read_tracefs_state();
    EXPECT_EQ(after, before) << "a tracefs mount or instance was left behind: " << e.out;
    EXPECT_TRUE(none_left("." + std::to_string(c.pid) + "."));
    // What a failure left, the machine does not keep: the run's instance goes.
    if (std::find(after.instances.begin(), after.instances.end(), instance) !=
        after.instances.end()) {
      remove_tracefs_instance(instance);
    }
  }).join();
  if (!no_namespace.empty()) GTEST_SKIP() << "no mount namespace of its own: " << no_namespace;
}

TEST(Cyclictest, ParsesTheLargestMaxOfItsSummary) {
  EXPECT_EQ(parse_cyclictest_max("# /dev/cpu_dma_latency set to 0us\n"
                                 "T: 0 (25936) P: 1 I:1000 C:    996 Min:     55 Act:   59 Avg:   "
                                 "66 Max:     227\n"
                                 "T: 1 (25937) P: 1 I:1500 C:    664 Min:     50 Act:   60 Avg:   "
                                 "61 Max:    1227\n"),
            std::optional<std::uint64_t>(1227));
  EXPECT_FALSE(parse_cyclictest_max("cyclictest: unknown option\n"));
}

// The field's ruler sees what quiesce's probe sees (cyclic_probe_test.cpp): a SCHED_FIFO
// busy loop holding cyclictest's CPU shows as at least its length, less one interval.
TEST(Cyclictest, ABusyLoopHoldingTheCpuIsSeenAsAtLeastItsLength) {
  if (auto why = cyclictest_unavailable()) GTEST_SKIP() << *why;
  const int cpu = cpu_set::current_affinity().cpus().back();
  cyclictest_run run(cpu, 0);  // SCHED_OTHER: the FIFO loop keeps it off the CPU
  ASSERT_TRUE(test::eventually([&] { return run.measuring(); })) << "cyclictest never started";
  constexpr std::uint64_t hold_ns = 30'000'000, interval_ns = 1'000'000;
  int fifo_error = 0;
  {
    named_thread blocker("blocker", cpu_set{cpu}, [&] {
      sched_param sp{};
      sp.sched_priority = 1;
      fifo_error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
      if (fifo_error != 0) return;
      const std::uint64_t start = now_ns();
      while (now_ns() - start < hold_ns) {
      }
    });
  }
  if (fifo_error == EPERM) GTEST_SKIP() << "SCHED_FIFO not permitted here";
  ASSERT_EQ(fifo_error, 0) << std::strerror(fifo_error);
  // cyclictest records the late wake-up when it runs again: let it wake a few times.
  const std::uint64_t resumed = now_ns();
  while (now_ns() - resumed < 5 * interval_ns) {
    std::this_thread::yield();
  }
  EXPECT_GE(run.stop(), hold_ns - interval_ns);
}

TEST(KeygcKernelCli, AQuotaRefusalIsOneClearLine) {
  SKIP_UNLESS_KEYRING_FITS(10);
  const key_quota q = read_key_quota();
  child c = spawn({"keygc", "--kernel", "--keys", std::to_string(q.maxkeys + 1)});
  const auto [status, out] = wait_for(c);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
  EXPECT_NE(out.find("do not fit the kernel's key quota"), std::string::npos) << out;
}

}  // namespace
}  // namespace quiesce::experiments
