// SPDX-License-Identifier: Apache-2.0
// The test programs' per-test deadline (tests/support/test_main.cpp): a test that hangs
// ends its process with a message naming it. Checked on this very program, re-run in a
// child with a one-second deadline and a test that never returns.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "wait.hpp"

extern char** environ;

namespace {

// Hangs only when the parent below asks for it; otherwise skipped.
TEST(TestMainChild, HangsWhenAsked) {
  if (!std::getenv("QUIESCE_TEST_MAIN_HANG")) GTEST_SKIP() << "run by TestMain.* only";
  for (;;)
    ::pause();
}

TEST(TestMain, AHungTestAbortsItsProgramNamingIt) {
  char out_path[] = "/tmp/quiesce-test-main-XXXXXX";
  const int fd = ::mkstemp(out_path);
  ASSERT_GE(fd, 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fd, STDERR_FILENO);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=TestMainChild.HangsWhenAsked";
  char* argv[] = {self.data(), filter.data(), nullptr};
  ::setenv("QUIESCE_TEST_MAIN_HANG", "1", 1);
  ::setenv("QUIESCE_TEST_DEADLINE_S", "1", 1);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv, environ);
  ::unsetenv("QUIESCE_TEST_MAIN_HANG");
  ::unsetenv("QUIESCE_TEST_DEADLINE_S");
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  ASSERT_EQ(rc, 0);
  int status = 0;
  // The child must end by itself; if the deadline never fires, fail loudly and kill it.
  const bool ended =
      quiesce::test::eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  std::ifstream in(out_path);
  const std::string output{std::istreambuf_iterator<char>(in), {}};
  ::unlink(out_path);
  ASSERT_TRUE(ended) << "the hung child was not ended by its deadline";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << "status " << status;
  EXPECT_NE(output.find("quiesce test: TestMainChild.HangsWhenAsked did not finish within 1 s"),
            std::string::npos)
      << output;
}

}  // namespace
