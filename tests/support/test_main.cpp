// SPDX-License-Identifier: Apache-2.0
// The test programs' main(): GoogleTest's, plus a per-test deadline. A test that does not
// finish within the deadline - a blocking wait in the runtime that never returns, which no
// condition wait in the test can time out - ends the process with a message naming it,
// instead of hanging until an outer timeout kills the whole suite without a word.
//
// The deadline is QUIESCE_TEST_DEADLINE_S seconds (default 600: longer than CTest's
// per-test TIMEOUT, so CTest's limit governs one test per process; the mutant runs, which
// run a whole suite in one process, set a shorter one). It is an alarm(2): no thread, so
// tests that fork or count threads see none of it, and a forked child does not inherit it.
//
// --gtest_fail_fast also ends --gtest_repeat: GoogleTest (1.12) skips the rest of a failed
// iteration but starts the next one, so a mutant run repeating a test thirty times to catch
// a rare miss ran all thirty after the first caught it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Written by the main thread between tests, read by the signal handler: a fixed buffer so
// the handler only calls write(2) and abort().
char g_message[512];
std::size_t g_message_len = 0;

void on_deadline(int) {
  if (::write(STDERR_FILENO, g_message, g_message_len) < 0) {
    // nothing more can be said
  }
  std::abort();
}

unsigned deadline_seconds() {
  const char* s = std::getenv("QUIESCE_TEST_DEADLINE_S");
  if (!s || !*s) return 600;
  char* end = nullptr;
  const unsigned long v = std::strtoul(s, &end, 10);
  if (*end != '\0' || v == 0 || v > 86'400) {
    std::fprintf(stderr, "QUIESCE_TEST_DEADLINE_S=%s: expected seconds in 1..86400\n", s);
    std::exit(2);
  }
  return static_cast<unsigned>(v);
}

class deadline_listener : public testing::EmptyTestEventListener {
 public:
  explicit deadline_listener(unsigned seconds) : seconds_(seconds) {}

  void OnTestStart(const testing::TestInfo& info) override {
    const int n = std::snprintf(g_message, sizeof(g_message),
                                "\nquiesce test: %s.%s did not finish within %u s "
                                "(QUIESCE_TEST_DEADLINE_S): aborting\n",
                                info.test_suite_name(), info.name(), seconds_);
    g_message_len = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof(g_message) - 1);
    ::alarm(seconds_);
  }
  void OnTestEnd(const testing::TestInfo&) override { ::alarm(0); }

 private:
  unsigned seconds_;
};

// Ends the program at the start of an iteration when the one before it failed and
// --gtest_fail_fast was given (the printer has reported that iteration by then).
class stop_repeating_listener : public testing::EmptyTestEventListener {
 public:
  void OnTestIterationStart(const testing::UnitTest&, int iteration) override {
    if (!previous_failed_) return;
    std::printf(
        "quiesce test: iteration %d failed and --gtest_fail_fast was given: "
        "not repeating\n",
        iteration);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
  void OnTestIterationEnd(const testing::UnitTest& unit_test, int) override {
    previous_failed_ = unit_test.Failed();
  }

 private:
  bool previous_failed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const unsigned seconds = deadline_seconds();
  struct sigaction sa {};
  sa.sa_handler = on_deadline;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(SIGALRM, &sa, nullptr) != 0) {
    std::perror("sigaction(SIGALRM)");
    return 2;
  }
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  listeners.Append(new deadline_listener(seconds));
  if (GTEST_FLAG_GET(fail_fast)) listeners.Append(new stop_repeating_listener);
  return RUN_ALL_TESTS();
}
