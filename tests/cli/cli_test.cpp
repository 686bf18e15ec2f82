// SPDX-License-Identifier: Apache-2.0
// The CLI as a user runs it: exit codes (0 ok, 1 failed, 2 bad usage), one clear line on
// stderr, and fsverity-identical output.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "child.hpp"
#include "shell.hpp"

namespace {

namespace fs = std::filesystem;

using result = quiesce::test::shell_result;
using quiesce::test::run_shell;

// Runs the CLI; `out` holds stdout and (unless stdout_only) stderr.
result run(const std::string& args, bool stdout_only = false) {
  return run_shell(std::string(QUIESCE_CLI) + " " + args +
                   (stdout_only ? " 2>/dev/null" : " 2>&1"));
}

// Runs the CLI with TMPDIR set to `tmp`, ended by `timeout` if it does not finish in 60 s
// (exit 124: whatever the test expected, that is a failure).
result run_in(const fs::path& tmp, const std::string& args) {
  return run_shell("TMPDIR=" + tmp.string() + " timeout 60 " + std::string(QUIESCE_CLI) + " " +
                   args + " 2>&1");
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
  const result version = run("--version", true);
  EXPECT_EQ(version.code, 0);
  // "quiesce X.Y.Z (commit <hash>|unknown[-dirty], <build type> build)"
  EXPECT_TRUE(std::regex_search(
      version.out,
      std::regex(R"(^quiesce [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{12}|unknown)(-dirty)?, )"
                 R"([A-Za-z]+ build\)\n$)")))
      << version.out;
  const result unknown = run("frobnicate");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.out.find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_EQ(unknown.out.find("did you mean"), std::string::npos) << unknown.out;  // nothing near
  // A typo names the nearest command, at every level.
  const result typo = run("verity digset");
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.out.find("quiesce verity: unknown command 'digset' (did you mean 'digest'?"),
            std::string::npos)
      << typo.out;
  const result top = run("reprot");
  EXPECT_EQ(top.code, 2);
  EXPECT_NE(top.out.find("unknown command 'reprot' (did you mean 'report'?"), std::string::npos)
      << top.out;
  EXPECT_EQ(run("bench peer").code, 2);
  EXPECT_EQ(run("keygc --mode sometimes").code, 2);
  EXPECT_EQ(run("keygc --keys 0").code, 2);
  EXPECT_EQ(run("keygc --also budget").code, 2);               // only with --compare
  EXPECT_EQ(run("keygc --compare --also sometimes").code, 2);  // no such mode
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
  EXPECT_EQ(run("bench peers --quick --smoke").code, 2);
  EXPECT_EQ(run("bench").code, 2);
  const fs::path bin = fs::path(QUIESCE_CLI).parent_path();
  if (!fs::exists(bin / "bench_wq") || !fs::exists(bin / "bench_rcu")) {
    const result r = run("bench peers --quick --repetitions 1");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("not found"), std::string::npos) << r.out;
    return;
  }
  const fs::path plots = dir_ / "plots";
  const result r = run("bench peers --smoke --repetitions 1 --json --plot " + plots.string(),
                       /*stdout_only=*/true);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["repetitions"], 1);
  EXPECT_EQ(j["size_divisor"], 20) << "--smoke divides bench_wq's sizes";
  ASSERT_GE(j["rows"].size(), 18u);
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["quiesce"]["median"].get<double>(), 0.0) << row["metric"];
    ASSERT_FALSE(row["peers"].empty()) << row["metric"];
    for (const auto& peer : row["peers"])
      EXPECT_GT(peer["median"].get<double>(), 0.0) << row["metric"] << " " << peer["runtime"];
    EXPECT_GT(row["ratio"].get<double>(), 0.0) << row["metric"];
  }
  EXPECT_TRUE(j["scaling"].empty());  // --smoke, as --quick: the ratio table only
  // The SHA-256 table (--smoke, as --quick): OpenSSL first, then the chosen implementation, each
  // measured; every other one this CPU runs is named as left out.
  if (!fs::exists(bin / "bench_verity")) {
    EXPECT_NE(j["hashing_skipped"].get<std::string>().find("bench_verity"), std::string::npos);
    return;
  }
  ASSERT_FALSE(j["hashing"].empty());
  EXPECT_EQ(j["hashing"][0]["sha256"], "openssl");
  const std::string chosen = j["sha256_chosen"].get<std::string>();
  ASSERT_FALSE(chosen.empty());
  const std::string chosen_name = chosen.substr(0, chosen.find(' '));
  EXPECT_EQ(j["hashing"].back()["sha256"], chosen_name);
  EXPECT_LE(j["hashing"].size(), 2u);
  const result info = run("info --json", /*stdout_only=*/true);
  ASSERT_EQ(info.code, 0) << info.out;
  EXPECT_EQ(j["hashing"].size() + j["sha256_left_out"].size() + j["sha256_not_here"].size(),
            nlohmann::json::parse(info.out)["sha256"]["variants"].size())
      << "every implementation is measured, left out or named as not runnable here";
  for (const auto& h : j["hashing"]) {
    for (const char* k : {"alone_MBps", "tree_MBps", "verify_MBps", "openssl_MBps"})
      EXPECT_GT(h[k]["median"].get<double>(), 0.0) << h["sha256"] << " " << k;
  }
  EXPECT_TRUE(fs::exists(plots / "peers-sha256.png"));
  EXPECT_TRUE(fs::exists(plots / "peers-sha256.dat"));
}

// The knobs `bench peers` passes to its benchmark programs refuse what they cannot mean,
// naming the variable (exit 2), and take both ends of their range.
TEST_F(Cli, BenchKnobsTakeTheirRangeAndRefuseTheRest) {
  const fs::path bin = fs::path(QUIESCE_CLI).parent_path();
  if (!fs::exists(bin / "bench_wq") || !fs::exists(bin / "bench_rcu"))
    GTEST_SKIP() << "the benchmark programs are not built here";
  const std::string wq = (bin / "bench_wq").string() + " --benchmark_list_tests=true";
  for (const char* bad : {"0", "1001", "-1", "x", "2.5", "20x", "''"}) {
    const result r = run_shell("QUIESCE_BENCH_DIVISOR=" + std::string(bad) + " " + wq + " 2>&1");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("QUIESCE_BENCH_DIVISOR"), std::string::npos) << bad << ": " << r.out;
  }
  for (const char* good : {"1", "1000"}) {
    const result r = run_shell("QUIESCE_BENCH_DIVISOR=" + std::string(good) + " " + wq + " 2>&1");
    EXPECT_EQ(r.code, 0) << good << ": " << r.out;
  }
  // The flood reads its length when it starts: a bad one ends the run before it floods.
  const std::string flood = (bin / "bench_rcu").string() +
                            " --benchmark_filter='^quiesce_retire_flood' --benchmark_format=json";
  for (const char* bad : {"0", "-1", "3600.5", "x", "1s", "''", "nan", "inf"}) {
    const result r = run_shell("QUIESCE_FLOOD_SECONDS=" + std::string(bad) + " " + flood + " 2>&1");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("QUIESCE_FLOOD_SECONDS"), std::string::npos) << bad << ": " << r.out;
  }
  const result r = run_shell("QUIESCE_FLOOD_SECONDS=0.01 " + flood + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["benchmarks"].size(), 1u) << r.out;
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

// Every SHA-256 implementation `quiesce info` says this CPU runs, forced with
// QUIESCE_SHA256, gives fsverity-utils' digests (a 100,000-byte file, 1 KiB and 4 KiB
// blocks, salted, and a 10 MiB file: level 0 hashed in parallel); a name it does not know
// is ignored and said so.
TEST_F(Cli, VerityDigestIsTheSameWithEverySha256Implementation) {
  const result info = run("info --json", /*stdout_only=*/true);
  ASSERT_EQ(info.code, 0) << info.out;
  const nlohmann::json facts = nlohmann::json::parse(info.out);
  const fs::path big = dir_ / "big";
  {
    std::ofstream out(big, std::ios::binary);
    for (int i = 0; i < 10 << 20; ++i)
      out.put(static_cast<char>(i * 31 + (i >> 12)));
  }
  const std::vector<std::string> cases = {
      file_.string(), file_.string() + " --block-size 1024 --salt 0a0b0c", big.string()};
  std::vector<std::string> want;
  for (const std::string& c : cases) {
    FILE* p = ::popen(("fsverity digest " + c + " 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[512] = {};
    ASSERT_NE(std::fgets(buf, sizeof buf, p), nullptr);
    ::pclose(p);
    want.emplace_back(buf);
  }
  int measured = 0;
  for (const auto& v : facts["sha256"]["variants"]) {
    if (v["mb_per_s"].get<double>() <= 0) continue;
    ++measured;
    const std::string name = v["name"].get<std::string>();
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const result r = run_shell("QUIESCE_SHA256=" + name + " " + std::string(QUIESCE_CLI) +
                                 " verity digest " + cases[i] + " 2>&1");
      EXPECT_EQ(r.code, 0) << name << ": " << r.out;
      EXPECT_EQ(r.out, want[i]) << "with " << name;
    }
  }
  EXPECT_GE(measured, 2);  // OpenSSL and the portable kernel at the least
  const result bogus = run_shell("QUIESCE_SHA256=bogus " + std::string(QUIESCE_CLI) + " info");
  EXPECT_NE(bogus.out.find("QUIESCE_SHA256=bogus ignored: no such variant"), std::string::npos)
      << bogus.out;
}

// Scripts written for fsverity-utils run unchanged: getopt_long's abbreviations, `--salt=`
// (no salt), algorithms by number, `--compact`, block sizes beyond 64 KiB - each line the
// same as `fsverity digest` prints for the same arguments.
TEST_F(Cli, VerityDigestTakesFsverityUtilsSpellings) {
  for (const char* args :
       {"--hash=sha512", "--salt=", "--hash-alg=2", "--hash-alg=1", "--compact", "--block=2048",
        "--block-size=131072", "--hash-alg=sha512 --salt=00ff --compact", "--out-desc=/dev/null"}) {
    const result ours = run("verity digest " + file_.string() + " " + args, true);
    const result theirs = run_shell("fsverity digest " + file_.string() + " " + args + " 2>&1");
    ASSERT_EQ(theirs.code, 0) << args << ": " << theirs.out;
    EXPECT_EQ(ours.code, 0) << args << ": " << ours.out;
    EXPECT_EQ(ours.out, theirs.out) << args;
  }
  // Written into, as fsverity-utils does, not replaced: until 2026-12-07 the descriptor was
  // renamed over /dev/null, which left this machine a regular file there.
  EXPECT_TRUE(fs::is_character_file("/dev/null")) << "the descriptor replaced /dev/null";
}

// Every block size fsverity-utils takes, at both ends of its range (32 .. 65536 for both
// algorithms, and 2^30): the same line, or a refusal where it refuses (below twice the
// digest size).
TEST_F(Cli, VerityDigestBlockSizesAreFsverityUtilsRange) {
  const auto same_as_fsverity = [&](const std::string& alg, std::size_t block_size) {
    const std::string args = " --hash-alg=" + alg + " --block-size=" + std::to_string(block_size);
    const result ours = run("verity digest " + file_.string() + args, true);
    const result theirs = run_shell("fsverity digest " + file_.string() + args + " 2>&1");
    if (theirs.code != 0) {
      EXPECT_EQ(ours.code, 2) << args << ": " << ours.out;
      return;
    }
    EXPECT_EQ(ours.code, 0) << args << ": " << ours.out;
    EXPECT_EQ(ours.out, theirs.out) << args;
  };
  for (const char* alg : {"sha256", "sha512"}) {
    for (std::size_t bs = 32; bs <= 65536; bs *= 2)
      same_as_fsverity(alg, bs);
  }
  // The top of the range, once: a 1 GiB block is 1 GiB hashed by each tool - in the release
  // build only (the same code; instrumented, the hashing alone took 46 s under TSan).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  same_as_fsverity("sha256", std::size_t{1} << 30);
#endif
}

// ... and refuses what fsverity-utils refuses, naming the value as given.
TEST_F(Cli, VerityDigestRefusesWhatFsverityUtilsRefuses) {
  for (const auto& [args, says] :
       std::vector<std::pair<std::string, std::string>>{{"--block-size=-4096", "'-4096'"},
                                                        {"--block-size=2147483648", "'2147483648'"},
                                                        {"--block-size=3000", "not a power of two"},
                                                        {"--hash-alg=3", "'3'"},
                                                        {"--hash-alg=0", "'0'"},
                                                        {"--h=1", "ambiguous"}}) {
    const result ours = run("verity digest " + file_.string() + " " + args);
    EXPECT_EQ(ours.code, 2) << args << ": " << ours.out;
    EXPECT_NE(ours.out.find(says), std::string::npos) << args << ": " << ours.out;
    EXPECT_EQ(std::count(ours.out.begin(), ours.out.end(), '\n'), 1) << args << ": " << ours.out;
  }
  const result dir = run("verity digest " + dir_.string());
  EXPECT_EQ(dir.code, 2) << dir.out;
  EXPECT_NE(dir.out.find("Is a directory"), std::string::npos) << dir.out;
}

TEST_F(Cli, VerityBadInputIsExit2AndWritesNothing) {
  EXPECT_EQ(run("verity digest " + (dir_ / "missing").string()).code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --salt xyz").code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --salt " + std::string(66, 'a')).code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --block-size 3000").code, 2);
  EXPECT_EQ(run("verity digest " + file_.string() + " --block-size 32").code, 2);
  EXPECT_EQ(run("verity verify " + (dir_ / "missing").string() + " --integrity-only").code, 2);
  EXPECT_EQ(run("verity verify " + dir_.string() + " --integrity-only").code, 2);  // a directory
  const fs::path tree = dir_ / "nodir" / "tree";
  EXPECT_NE(run("verity digest " + file_.string() + " --out-merkle-tree " + tree.string()).code, 0);
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_FALSE(fs::exists(tree.string() + ".tmp"));
}

TEST_F(Cli, VerityVerifyFailsWithExit1NamingTheBlock) {
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  EXPECT_EQ(run("verity verify " + file_.string() + " --integrity-only").code, 0);
  // --json: digest's array and verify's object agree on the digest.
  const result digest = run("verity digest --json " + file_.string(), true);
  ASSERT_EQ(digest.code, 0) << digest.out;
  const nlohmann::json d = nlohmann::json::parse(digest.out);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["file"], file_.string());
  EXPECT_EQ(d[0]["hash_alg"], "sha256");
  EXPECT_EQ(d[0]["block_size"], 4096);
  const result ok = run("verity verify --json " + file_.string() + " --integrity-only", true);
  ASSERT_EQ(ok.code, 0) << ok.out;
  const nlohmann::json v = nlohmann::json::parse(ok.out);
  EXPECT_EQ(v["verified"], true);
  EXPECT_EQ(v["digest"], d[0]["digest"]);
  EXPECT_EQ(v["bytes"], 100000);
  {
    std::fstream io(file_, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(3 * 4096 + 5);
    io.put('\x01');
  }
  const result bad = run("verity verify " + file_.string() + " --integrity-only");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("block 3 failed fs-verity verification"), std::string::npos) << bad.out;
  const result bad_json = run("verity verify --json " + file_.string() + " --integrity-only", true);
  EXPECT_EQ(bad_json.code, 1);
  const nlohmann::json b = nlohmann::json::parse(bad_json.out);
  EXPECT_EQ(b["verified"], false);
  EXPECT_NE(b["error"].get<std::string>().find("block 3"), std::string::npos) << bad_json.out;
  // A truncated file and a missing sidecar fail the check too (fsverity's exit 1), not usage.
  fs::resize_file(file_, 4096 * 2);
  EXPECT_EQ(run("verity verify " + file_.string() + " --integrity-only").code, 1);
  fs::remove(file_.string() + ".verity");
  const result none = run("verity verify " + file_.string() + " --integrity-only");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.out.find("no fs-verity sidecar"), std::string::npos) << none.out;
}

// enable writes its sidecar through an unpredictable temporary: a symlink planted where
// the old fixed name (FILE.verity.tmp) was, or at FILE.verity itself, is never followed.
TEST_F(Cli, VerityEnableNeverFollowsAPlantedSymlink) {
  const fs::path victim = dir_ / "victim";
  { std::ofstream(victim) << "precious"; }
  fs::create_symlink(victim, file_.string() + ".verity.tmp");
  fs::create_symlink(victim, file_.string() + ".verity");
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  EXPECT_FALSE(fs::is_symlink(file_.string() + ".verity"));
  EXPECT_EQ(run("verity verify " + file_.string() + " --integrity-only").code, 0);
}

// ---- verity: the root of trust ----

// verify trusts nothing by default: it needs a digest, a certificate, or --integrity-only.
TEST_F(Cli, VerityVerifyNeedsSomethingToTrust) {
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  const result r = run("verity verify " + file_.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("nothing to trust"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(run("verity verify " + file_.string() + " --digest sha256:abcd").code, 2);
  EXPECT_EQ(run("verity verify " + file_.string() + " --digest md5:00").code, 2);
  EXPECT_EQ(run("verity verify " + file_.string() + " --require-signatures").code, 2);
  EXPECT_EQ(run("verity verify " + file_.string() + " --cert " + (dir_ / "none.pem").string()).code,
            2);
  const result ok = run("verity verify " + file_.string() + " --integrity-only", true);
  EXPECT_EQ(ok.code, 0);
  EXPECT_NE(ok.out.find("not authenticated"), std::string::npos) << ok.out;
}

// The attack through the CLI: rewrite the data and regenerate the sidecar. A pinned
// digest (as `fsverity digest` prints it) refuses it with exit 1.
TEST_F(Cli, VerityVerifyDigestRefusesARewrittenFile) {
  const result digest = run_shell("fsverity digest " + file_.string() + " | cut -d' ' -f1");
  ASSERT_EQ(digest.code, 0);
  const std::string d = digest.out.substr(0, digest.out.find('\n'));
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  const result ok = run("verity verify " + file_.string() + " --digest " + d, true);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("digest trusted"), std::string::npos) << ok.out;
  std::string flipped = d;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  EXPECT_EQ(run("verity verify " + file_.string() + " --digest " + flipped).code, 1);
  {
    std::fstream io(file_, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(777);
    io.put('\x55');
  }
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);  // the attacker's sidecar
  EXPECT_EQ(run("verity verify " + file_.string() + " --integrity-only").code, 0);
  const result bad = run("verity verify " + file_.string() + " --digest " + d);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("is not the trusted"), std::string::npos) << bad.out;
}

// Interoperability: `fsverity sign` makes the signature, `enable --signature` stores it,
// `verify --cert` checks it; another key's certificate, or a file that changed, is refused.
TEST_F(Cli, VerityBuiltinSignaturesFromFsveritySign) {
  for (const char* name : {"trusted", "other"}) {
    const std::string k = (dir_ / name).string();
    ASSERT_EQ(
        run_shell("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=cli-" +
                  std::string(name) + " -keyout " + k + ".key -out " + k + ".pem >/dev/null 2>&1")
            .code,
        0);
  }
  const std::string key = (dir_ / "trusted.key").string(), cert = (dir_ / "trusted.pem").string();
  const std::string other = (dir_ / "other.pem").string(), sig = (dir_ / "sig").string();
  ASSERT_EQ(run_shell("fsverity sign " + file_.string() + " " + sig + " --key=" + key +
                      " --cert=" + cert + " >/dev/null 2>&1")
                .code,
            0);
  EXPECT_EQ(run("verity enable " + file_.string() + " --signature " + cert).code, 2);  // not one
  EXPECT_EQ(run("verity enable " + file_.string() + " --signature " + dir_.string()).code, 2);
  EXPECT_FALSE(fs::exists(file_.string() + ".verity"));
  const result en = run("verity enable " + file_.string() + " --signature " + sig, true);
  ASSERT_EQ(en.code, 0) << en.out;
  EXPECT_NE(en.out.find("signature"), std::string::npos) << en.out;
  const result ok =
      run("verity verify " + file_.string() + " --cert " + cert + " --require-signatures", true);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("signed by /CN=cli-trusted"), std::string::npos) << ok.out;
  // Repeatable: either certificate may be the signer's.
  EXPECT_EQ(run("verity verify " + file_.string() + " --cert " + other + " --cert " + cert).code,
            0);
  const result wrong = run("verity verify " + file_.string() + " --cert " + other);
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.out.find("not a trusted one"), std::string::npos) << wrong.out;
  // The data changed and the tree rebuilt with the old signature: the signature no longer
  // signs the file's digest.
  {
    std::fstream io(file_, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(5);
    io.put('\x42');
  }
  ASSERT_EQ(run("verity enable " + file_.string() + " --signature " + sig).code, 0);
  const result rejected = run("verity verify " + file_.string() + " --cert " + cert);
  EXPECT_EQ(rejected.code, 1);
  EXPECT_NE(rejected.out.find("incorrect file signature"), std::string::npos) << rejected.out;
  // Unsigned, under --require-signatures: refused.
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  EXPECT_EQ(
      run("verity verify " + file_.string() + " --cert " + cert + " --require-signatures").code, 1);
}

// Hostile inputs: a FIFO sidecar or file is refused at once (exit 2), never waited on.
TEST_F(Cli, VerityRefusesFifosWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  ASSERT_EQ(run("verity enable " + file_.string()).code, 0);
  const result r = run_in(dir_, "verity verify " + file_.string() + " --integrity-only --sidecar " +
                                    (dir_ / "fifo").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("a FIFO"), std::string::npos) << r.out;
  EXPECT_EQ(run_in(dir_, "verity digest " + (dir_ / "fifo").string()).code, 2);
  EXPECT_EQ(run_in(dir_, "verity enable " + (dir_ / "fifo").string()).code, 2);
  EXPECT_EQ(
      run_in(dir_, "verity enable " + file_.string() + " --signature " + (dir_ / "fifo").string())
          .code,
      2);
}

// Runs the CLI on a pseudo-terminal (stdin, stdout and stderr all on it, as in an
// interactive shell); returns everything it printed.
result run_on_pty(const std::vector<std::string>& args) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return {-1, "forkpty failed"};
  if (pid == 0) {
    std::vector<char*> argv;
    std::string cli = QUIESCE_CLI;
    argv.push_back(cli.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(cli.c_str(), argv.data());
    ::_exit(127);
  }
  result r{-1, {}};
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child has closed the terminal
    r.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A long run shows a progress line on a terminal, and nothing of it in a pipe or with
// --json.
TEST_F(Cli, ProgressOnlyOnATerminal) {
  const std::vector<std::string> sweep = {"sweep", "keygc",    "--keys", "2000", "--runs",
                                          "1",     "--chunks", "1",      "64"};
  const result tty = run_on_pty(sweep);
  ASSERT_EQ(tty.code, 0) << tty.out;
  EXPECT_NE(tty.out.find("quiesce sweep keygc: chunk 1 run 1 (1/2) 0%"), std::string::npos)
      << tty.out;
  EXPECT_NE(tty.out.find("quiesce sweep keygc: chunk 64 run 1 (2/2) 50% ~"), std::string::npos)
      << tty.out;
  EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos);  // redrawn in place, then cleared

  const result pipe = run("sweep keygc --keys 2000 --runs 1 --chunks 1 64");
  ASSERT_EQ(pipe.code, 0) << pipe.out;
  EXPECT_EQ(pipe.out.find("(1/2)"), std::string::npos) << pipe.out;
  EXPECT_EQ(pipe.out.find('\r'), std::string::npos);

  std::vector<std::string> json = sweep;
  json.push_back("--json");
  const result tty_json = run_on_pty(json);
  ASSERT_EQ(tty_json.code, 0) << tty_json.out;
  EXPECT_EQ(tty_json.out.find("(1/2)"), std::string::npos) << tty_json.out;
}

// sweep keygc's choice follows its stated rule from the data it reports: candidates within
// the throughput budget, the lowest median variance among them, chosen only if its spread
// across runs overlaps no other candidate's (else 0: the data cannot separate them).
TEST_F(Cli, SweepChoosesByItsStatedRuleOrSaysItCannot) {
  for (const char* within : {"1000", "0"}) {
    const result r =
        run(std::string("sweep keygc --keys 2000 --runs 3 --chunks 1 16 256 --within ") + within +
                " --json",
            /*stdout_only=*/true);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    const double pct = j["within_pct"].get<double>();
    double best = INFINITY;
    for (const auto& row : j["rows"]) {
      auto runs = row["var_ms2_runs"].get<std::vector<double>>();
      ASSERT_EQ(runs.size(), 3u);
      std::sort(runs.begin(), runs.end());
      EXPECT_DOUBLE_EQ(row["var_ms2"].get<double>(), runs[1]);  // the median of three
      EXPECT_DOUBLE_EQ(row["var_ms2_min"].get<double>(), runs[0]);
      EXPECT_DOUBLE_EQ(row["var_ms2_max"].get<double>(), runs[2]);
      best = std::min(best, row["total_ms"].get<double>());
    }
    std::vector<std::size_t> candidates;
    const nlohmann::json* lowest = nullptr;
    for (const auto& row : j["rows"]) {
      if (row["total_ms"].get<double>() > best * (1 + pct / 100)) continue;
      candidates.push_back(row["chunk"].get<std::size_t>());
      if (!lowest || row["var_ms2"].get<double>() < (*lowest)["var_ms2"].get<double>())
        lowest = &row;
    }
    ASSERT_NE(lowest, nullptr);
    std::vector<std::size_t> overlapping;
    for (const auto& row : j["rows"]) {
      if (&row == lowest || row["total_ms"].get<double>() > best * (1 + pct / 100)) continue;
      if (row["var_ms2_max"].get<double>() >= (*lowest)["var_ms2_min"].get<double>() &&
          (*lowest)["var_ms2_max"].get<double>() >= row["var_ms2_min"].get<double>())
        overlapping.push_back(row["chunk"].get<std::size_t>());
    }
    SCOPED_TRACE(r.out);
    EXPECT_EQ(j["candidates"].get<std::vector<std::size_t>>(), candidates);
    EXPECT_EQ(j["lowest_variance_chunk"].get<std::size_t>(), (*lowest)["chunk"].get<std::size_t>());
    EXPECT_EQ(j["overlapping"].get<std::vector<std::size_t>>(), overlapping);
    EXPECT_EQ(j["separable"].get<bool>(), overlapping.empty());
    EXPECT_EQ(j["chosen_chunk"].get<std::size_t>(),
              overlapping.empty() ? (*lowest)["chunk"].get<std::size_t>() : 0u);
    if (std::string(within) == "0") {
      EXPECT_EQ(candidates.size(), 1u);  // only the best total time itself
    }
  }
}

// verity bench's headline is the seed's metric - the workers' time runnable - per run,
// and the median it quotes is the median of the per-run drops it reports.
TEST_F(Cli, VerityBenchQuotesTheSeedsMetricPerRun) {
  const result r = run("verity bench --file-mib 4 --seconds 0.1 --runs 3 --json",
                       /*stdout_only=*/true);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].get<int>(), 3);
  const auto u = j["run_delay_ms"]["unbound"]["runs"].get<std::vector<double>>();
  const auto b = j["run_delay_ms"]["bound"]["runs"].get<std::vector<double>>();
  ASSERT_EQ(u.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  std::vector<double> drops;
  for (std::size_t i = 0; i < 3; ++i)
    drops.push_back(u[i] == 0 ? 0.0 : (u[i] - b[i]) / u[i] * 100.0);
  std::sort(drops.begin(), drops.end());
  EXPECT_NEAR(j["run_delay_drop_pct"].get<double>(), drops[1], 1e-6);
  EXPECT_NEAR(j["run_delay_drop_pct_spread"]["min"].get<double>(), drops[0], 1e-6);
  EXPECT_NEAR(j["run_delay_drop_pct_spread"]["max"].get<double>(), drops[2], 1e-6);
  EXPECT_TRUE(j.contains("sched_latency_drop_pct"));  // the keys scripts read stay
  EXPECT_TRUE(j["bound"].contains("queue_to_start_us"));
}

// --trace FILE writes a Chrome trace that Perfetto opens: known event names, valid phases,
// begin/end matched on each thread, timestamps that never go back on a thread, every
// thread named.
TEST_F(Cli, TraceFilesAreWellFormed) {
  const fs::path trace = dir_ / "keygc.trace.json";
  ASSERT_EQ(run("keygc --keys 2000 --trace " + trace.string(), true).code, 0);
  std::ifstream in(trace);
  const auto j = nlohmann::json::parse(in);
  const auto& events = j.at("traceEvents");
  ASSERT_GT(events.size(), 10u);
  const std::set<std::string> names = {"workqueue_queue_work",
                                       "workqueue_activate_work",
                                       "workqueue_execute_start",
                                       "workqueue_execute_end",
                                       "rcu_grace_period_start",
                                       "rcu_grace_period_end",
                                       "console",
                                       "keygc probe: queue->start (us)",
                                       "thread_name"};
  std::map<int, int> depth;
  std::map<int, double> last_ts;
  std::set<int> named, used;
  std::set<std::string> seen;
  for (const auto& e : events) {
    const std::string name = e.at("name");
    const std::string ph = e.at("ph");
    const int tid = e.at("tid");
    EXPECT_TRUE(names.count(name)) << name;
    seen.insert(name);
    if (ph == "M") {
      named.insert(tid);
      continue;
    }
    used.insert(tid);
    EXPECT_TRUE(ph == "B" || ph == "E" || ph == "i" || ph == "X" || ph == "C") << ph;
    const double ts = e.at("ts");
    if (last_ts.count(tid)) {
      EXPECT_GE(ts, last_ts[tid]) << "time went back on thread " << tid;
    }
    last_ts[tid] = ts;
    if (ph == "B") ++depth[tid];
    if (ph == "E") {
      EXPECT_GE(--depth[tid], 0) << "an end without a begin on thread " << tid;
    }
  }
  for (const auto& [tid, d] : depth)
    EXPECT_EQ(d, 0) << "a begin without an end on thread " << tid;
  for (int tid : used)
    EXPECT_TRUE(named.count(tid)) << "thread " << tid << " has no name";
  EXPECT_TRUE(seen.count("workqueue_execute_start"));
  EXPECT_TRUE(seen.count("rcu_grace_period_end"));
}

// Every numeric option of every command, given a hostile value: exit 2, one line naming
// the option and the value as typed, a bounded run (a `timeout` that fails the check
// rather than hangs), and nothing created in the temporary directory. Every option goes
// through one parser per number type (number_option.hpp): each option gets a negative, a
// word, an overflow (and 0 where 0 is invalid) - its wiring - and one option of each type
// (unsigned, signed, floating point) every hostile value.
TEST_F(Cli, HostileNumbersAreOneLineExit2AndCreateNothing) {
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  const std::string file = file_.string();
  struct option_case {
    std::string command;  // the command line before the option
    std::string option;
    bool zero_is_valid;
    bool every_value = false;  // every hostile value, not only the wiring's three
  };
  const std::vector<option_case> options = {
      {"keygc", "--keys", false, true},
      {"keygc", "--per-keyring", false},
      {"keygc", "--chunk", false},
      {"keygc", "--slice-us", false},
      {"keygc", "--runs", false},
      {"keygc", "--probe-priority", true, true},
      {"keygc", "--cpu", true},
      {"keygc --kernel", "--set-gc-delay", false},
      {"sweep keygc", "--chunks", false},
      {"sweep keygc", "--runs", false},
      {"sweep keygc", "--keys", false},
      {"sweep keygc", "--within", true},
      {"sanitize", "--pages", false},
      {"sanitize", "--seconds", false, true},
      {"sanitize", "--fail-share", true, true},
      {"sanitize --compare", "--runs", false},
      {"verity digest " + file, "--block-size", false},
      {"verity enable " + file, "--block-size", false},
      {"verity bench", "--file-mib", false},
      {"verity bench", "--readers", false},
      {"verity bench", "--seconds", false},
      {"verity bench", "--read-kib", false},
      {"verity bench", "--runs", false},
      {"verity bench --mount", "--apps", false},
      {"verity bench --mount", "--load", true},
      {"verity bench --mount", "--app-mib", false},
      {"verity bench --mount", "--seq-mib", true},
      {"bench peers", "--repetitions", false},
      {"report", "--set-gc-delay", false},
  };
  const std::vector<std::string> hostile = {"-5",    "-1",  "abc",   "",  "99999999999999999999",
                                            "1e999", "nan", "12abc", " 7"};
  const std::vector<std::string> wiring = {"-1", "abc", "99999999999999999999"};
  for (const option_case& c : options) {
    std::vector<std::string> values = c.every_value ? hostile : wiring;
    if (!c.zero_is_valid) values.push_back("0");
    for (const std::string& v : values) {
      const std::string args = c.command + " " + c.option + " '" + v + "'";
      const result r = run_in(tmp, args);
      SCOPED_TRACE(args);
      EXPECT_EQ(r.code, 2) << r.out;
      EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
      EXPECT_NE(r.out.find(c.option), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("'" + v + "'"), std::string::npos) << r.out;
      EXPECT_TRUE(fs::is_empty(tmp)) << "left behind in " << tmp;
    }
  }
}

// Sizes the machine cannot hold are refused before anything is allocated or written.
TEST_F(Cli, SizesBeyondTheMachineAreRefusedUpFront) {
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  for (const std::string args : {"keygc --keys 100000000", "sweep keygc --keys 100000000",
                                 "sanitize --pages 268435456", "verity bench --file-mib 1048576"}) {
    const result r = run_in(tmp, args);
    SCOPED_TRACE(args);
    // 2 with one line - unless this machine really has the memory or disk (then it would
    // start the run, which the timeout ends: a failure that names the case).
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("needs"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::is_empty(tmp));
  }
}

// A verity bench interrupted while it runs leaves nothing in the temporary directory.
TEST_F(Cli, InterruptedVerityBenchLeavesNothingBehind) {
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  for (int sig : {SIGINT, SIGTERM}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("TMPDIR", tmp.c_str(), 1);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      ::execl(QUIESCE_CLI, QUIESCE_CLI, "verity", "bench", "--file-mib", "16", "--seconds", "600",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Wait until the bench has created its directory and the sidecar (the run is going).
    bool running = false;
    for (int i = 0; i < 6000 && !running; ++i) {
      for (const auto& e : fs::directory_iterator(tmp)) {
        if (fs::exists(e.path() / "data.verity")) running = true;
      }
      if (!running) ::usleep(10'000);
    }
    ::kill(pid, sig);
    // It ends within a few seconds (8 s in a TSan build beside a busy machine); a hang fails
    // saying where each thread was, instead of holding the test to CTest's limit.
    std::string hang;
    const std::optional<int> status =
        quiesce::test::wait_child(pid, std::chrono::seconds(120), hang);
    ASSERT_TRUE(status.has_value())
        << "signal " << sig << (running ? "" : " (it never got going)") << ": " << hang;
    ASSERT_TRUE(running) << "the bench never got going";
    EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == sig) << "status " << *status;
    EXPECT_TRUE(fs::is_empty(tmp)) << "left behind in " << tmp << " after signal " << sig;
  }
}

}  // namespace
