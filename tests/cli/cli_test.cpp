// The CLI as a user runs it: exit codes (0 ok, 1 failed, 2 bad usage), one clear line on
// stderr, and fsverity-identical output.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;

struct result {
  int code;
  std::string out;  // stdout and stderr
};

// Runs the CLI; `out` holds stdout and (unless stdout_only) stderr.
result run(const std::string& args, bool stdout_only = false) {
  const std::string cmd =
      std::string(QUIESCE_CLI) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  result r{-1, {}};
  if (!p) return r;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p))
    r.out += buf;
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Cli : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quiesce-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    file_ = dir_ / "data";
    std::ofstream out(file_, std::ios::binary);
    for (int i = 0; i < 100000; ++i)
      out.put(static_cast<char>(i * 7));
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_, file_;
};

TEST_F(Cli, VersionAndBadUsage) {
  EXPECT_EQ(run("--version").code, 0);
  const result unknown = run("frobnicate");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.out.find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_EQ(run("keygc --mode sometimes").code, 2);
  EXPECT_EQ(run("keygc --keys 0").code, 2);
  EXPECT_EQ(run("sanitize --qs sometimes").code, 2);
  EXPECT_EQ(run("sanitize --fail-share 2").code, 2);
  EXPECT_EQ(run("sanitize --pages 0").code, 2);
  EXPECT_EQ(run("sweep nothing").code, 2);
  EXPECT_EQ(run("report --bogus").code, 2);
}

// bench peers runs the benchmark programs beside the CLI: where they are built, every row
// of the table has quiesce and its peers measured; where they are not (sanitizer presets),
// it fails with one line naming the missing program.
TEST_F(Cli, BenchPeersMeasuresEveryRowOrNamesWhatIsMissing) {
  EXPECT_EQ(run("bench peers --repetitions 0").code, 2);
  EXPECT_EQ(run("bench").code, 2);
  const fs::path bin = fs::path(QUIESCE_CLI).parent_path();
  if (!fs::exists(bin / "bench_wq") || !fs::exists(bin / "bench_rcu")) {
    const result r = run("bench peers --quick --repetitions 1");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("not found"), std::string::npos) << r.out;
    return;
  }
  const result r = run("bench peers --quick --repetitions 1 --json", /*stdout_only=*/true);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["repetitions"], 1);
  ASSERT_GE(j["rows"].size(), 18u);
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["quiesce"]["median"].get<double>(), 0.0) << row["metric"];
    ASSERT_FALSE(row["peers"].empty()) << row["metric"];
    for (const auto& peer : row["peers"])
      EXPECT_GT(peer["median"].get<double>(), 0.0) << row["metric"] << " " << peer["runtime"];
    EXPECT_GT(row["ratio"].get<double>(), 0.0) << row["metric"];
  }
  EXPECT_TRUE(j["scaling"].empty());  // --quick: the ratio table only
}

TEST_F(Cli, VerityDigestMatchesFsverityLineForLine) {
  const result ours = run("verity digest " + file_.string() + " --salt 0a0b --hash-alg sha512");
  ASSERT_EQ(ours.code, 0) << ours.out;
  FILE* p = ::popen(
      ("fsverity digest " + file_.string() + " --salt=0a0b --hash-alg=sha512").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512] = {};
  ASSERT_NE(std::fgets(buf, sizeof buf, p), nullptr);
  ::pclose(p);
  EXPECT_EQ(ours.out, std::string(buf));
}

TEST_F(Cli, VerityBadInputIsExit2AndWritesNothing) {
  EXPECT_EQ(run("verity digest " + (dir_ / "missing").string()).code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --salt xyz").code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --salt " + std::string(66, 'a')).code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --block-size 3000").code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --block-size 32").code, 2);
  EXPECT_EQ(run("verity verify " + file_.string()).code, 2);  // no sidecar
  const fs::path tree = dir_ / "nodir" / "tree";
  EXPECT_NE(run("verity digest " + file_.string() + " --out-merkle-tree " + tree.string()).code, 0);
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_FALSE(fs::exists(tree.string() + ".tmp"));
}

TEST_F(Cli, VerityVerifyFailsWithExit1NamingTheBlock) {
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  EXPECT_EQ(run("verity verify " + file_.string()).code, 0);
  {
    std::fstream io(file_, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(3 * 4096 + 5);
    io.put('\x01');
  }
  const result bad = run("verity verify " + file_.string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("block 3 failed fs-verity verification"), std::string::npos) << bad.out;
}

}  // namespace
