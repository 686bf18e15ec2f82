// SPDX-License-Identifier: Apache-2.0
// quiesce verity - fs-verity for any file (seed 004). `verity digest` prints what
// `fsverity digest` prints, byte for byte; level 0 is hashed in parallel on a workqueue.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "../../src/base/file_io.hpp"
#include "commands.hpp"
#include "number_option.hpp"
#include "plot_option.hpp"
#include "progress.hpp"
#include "quiesce/experiments/verity_bench.hpp"
#include "quiesce/experiments/verity_mount_bench.hpp"
#include "quiesce/mount/verity_fs.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "trace_session.hpp"

namespace quiesce::cli {
namespace {

namespace fs = std::filesystem;

struct digest_cli {
  std::vector<std::string> files;
  std::string hash_alg = "sha256";
  std::size_t block_size = 4096;
  std::string salt;
  std::string out_tree, out_descriptor;
  bool for_builtin_sig = false;
  bool single = false;   // --single-thread: no workqueue
  bool compact = false;  // --compact: the digest's hex alone, as fsverity-utils prints it
  bool json = false;     // --json: one array, an object per FILE
};

// A tree block of `block_size` bytes is held (and hashed) in memory: refuse sizes beyond the
// machine before allocating them.
void refuse_block_beyond_memory(std::size_t block_size) {
  refuse_beyond_memory("--block-size", std::to_string(block_size), 4 * block_size);
}

void run_digest(const digest_cli& o) {
  verity::params p;
  try {
    p.alg = verity::parse_hash_alg(o.hash_alg);
    p.block_size = o.block_size;
    p.salt = verity::from_hex(o.salt);
    p.validate();
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  refuse_block_beyond_memory(p.block_size);
  if ((!o.out_tree.empty() || !o.out_descriptor.empty()) && o.files.size() != 1) {
    throw usage_error("--out-merkle-tree/--out-descriptor: give exactly one FILE");
  }
  // Parallel level-0 hashing: an unbound queue, one running item per CPU.
  workqueue wq("verity_digest", wq_options{.unbound = true, .scope = affinity_scope::system});
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& file : o.files) {
    verity::merkle_tree t;
    try {
      t = verity::build_tree(file, p, o.single ? nullptr : &wq);
    } catch (const std::system_error& e) {
      throw usage_error(fmt::format("can't read '{}': {}", file, e.code().message()));
    }
    if (o.json) {
      all.push_back({{"file", file},
                     {"hash_alg", verity::to_string(p.alg)},
                     {"block_size", p.block_size},
                     {"salt", o.salt},
                     {"digest", verity::to_hex(verity::file_digest(t))},
                     {"builtin_sig_message", verity::to_hex(verity::builtin_sig_message(t))}});
    } else if (o.for_builtin_sig) {
      fmt::print("{} {}\n", verity::to_hex(verity::builtin_sig_message(t)), file);
    } else if (o.compact) {
      fmt::print("{}\n", verity::to_hex(verity::file_digest(t)));
    } else {
      fmt::print("{}:{} {}\n", verity::to_string(p.alg), verity::to_hex(verity::file_digest(t)),
                 file);
    }
    if (!o.out_tree.empty())
      write_output_file(o.out_tree, {std::string_view(reinterpret_cast<const char*>(t.tree.data()),
                                                      t.tree.size())});
    if (!o.out_descriptor.empty()) {
      const auto desc = verity::descriptor(t);
      write_output_file(
          o.out_descriptor,
          {std::string_view(reinterpret_cast<const char*>(desc.data()), desc.size())});
    }
  }
  if (o.json) fmt::print("{}\n", all.dump(2));
}

struct enable_cli {
  std::string file, hash_alg = "sha256", salt, sidecar;
  std::size_t block_size = 4096;
  std::string signature;  // --signature FILE: a built-in signature (`fsverity sign`)
};

verity::params params_of(const std::string& alg, std::size_t block_size, const std::string& salt) {
  try {
    verity::params p;
    p.alg = verity::parse_hash_alg(alg);
    p.block_size = block_size;
    p.salt = verity::from_hex(salt);
    p.validate();
    refuse_block_beyond_memory(p.block_size);
    return p;
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

std::optional<fs::path> sidecar_arg(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<fs::path>(s);
}

// The built-in signature in `path`, at most max_signature_size bytes of a regular file
// (enable() checks that it is a DER PKCS#7 signature); anything else is a usage error.
std::vector<std::uint8_t> read_signature(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    throw usage_error(fmt::format("--signature: '{}' is not a regular file", path));
  try {
    const std::string bytes = read_file(path, verity::max_signature_size);
    return {bytes.begin(), bytes.end()};
  } catch (const std::system_error& e) {
    throw usage_error(fmt::format("--signature: {}", e.what()));
  }
}

void run_enable(const enable_cli& o) {
  const verity::params p = params_of(o.hash_alg, o.block_size, o.salt);
  const std::vector<std::uint8_t> sig =
      o.signature.empty() ? std::vector<std::uint8_t>{} : read_signature(o.signature);
  workqueue wq("verity_enable", wq_options{.unbound = true, .scope = affinity_scope::system});
  verity::merkle_tree t;
  try {
    t = verity::enable(o.file, p, sidecar_arg(o.sidecar), &wq, sig);
  } catch (const std::system_error& e) {
    throw usage_error(fmt::format("can't enable '{}': {}", o.file, e.what()));
  }  // std::invalid_argument (a signature that is not one) names "signature": exit 2
  // A sidecar is its file's owner's (`quiesce verity mount` accepts no other): root
  // enabling another user's file gives it to them.
  const std::string side = o.sidecar.empty() ? o.file + ".verity" : o.sidecar;
  struct stat data {};
  if (::geteuid() == 0 && ::stat(o.file.c_str(), &data) == 0 &&
      ::chown(side.c_str(), data.st_uid, data.st_gid) != 0) {
    throw usage_error(fmt::format("can't give '{}' to the owner of '{}': {}", side, o.file,
                                  std::strerror(errno)));
  }
  // Root also leaves the inode's record, as an enable through the mount does: then every
  // name of the file - a hard link made later included - is a verity file to a mount.
  if (::geteuid() == 0) (void)mount::record_verity_on_inode(o.file, side);
  fmt::print("{}:{} {} (sidecar {}, tree {} bytes{})\n", verity::to_string(p.alg),
             verity::to_hex(verity::file_digest(t)), o.file,
             o.sidecar.empty() ? o.file + ".verity" : o.sidecar, t.tree.size(),
             sig.empty() ? "" : fmt::format(", signature {} bytes", sig.size()));
}

struct verify_cli {
  std::string file, sidecar;
  std::string digest;              // --digest ALG:HEX
  std::vector<std::string> certs;  // --cert FILE, repeatable
  bool require_signatures = false;
  bool integrity_only = false;
  bool json = false;  // --json: one object, {"verified": false, "error"} when the check fails
};

// The trust policy the flags ask for; a usage error if they ask for nothing.
verity::trust_policy policy_of(const verify_cli& o) {
  verity::trust_policy t;
  try {
    if (!o.digest.empty()) t.digest = verity::expected_digest::parse(o.digest);
    for (const std::string& c : o.certs)
      t.certs.add_file(c);
  } catch (const std::system_error& e) {
    throw usage_error(fmt::format("--cert: {}", e.what()));
  }  // std::invalid_argument names "digest" or "cert": exit 2
  t.require_signatures = o.require_signatures;
  t.integrity_only = o.integrity_only;
  if (t.require_signatures && t.certs.empty())
    throw usage_error("--require-signatures: give the trusted certificates with --cert FILE");
  if (!t.digest && t.certs.empty() && !t.integrity_only) {
    throw usage_error(
        "verify: nothing to trust - give --digest ALG:HEX (as `fsverity digest` prints it) or "
        "--cert FILE, or --integrity-only to check the file against its sidecar alone");
  }
  return t;
}

// A path the user named on the command line must be a readable regular file: else a
// usage error (exit 2), before anything is checked. Never blocks on a FIFO.
void require_readable_regular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw usage_error(fmt::format("{}: {}", path, std::strerror(errno)));
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0;
  ::close(fd);
  if (!ok || !S_ISREG(st.st_mode)) {
    throw usage_error(fmt::format("{}: {}, not a regular file", path,
                                  S_ISFIFO(st.st_mode)  ? "a FIFO"
                                  : S_ISDIR(st.st_mode) ? "a directory"
                                                        : "a special file"));
  }
}

// Opens FILE under the trust the flags give, then reads it all through the verified path.
// Exit codes as fsverity's: 2 when FILE (or an explicit --sidecar) cannot be read - missing,
// unreadable, not a regular file: usage or environment; 1 when the check fails - no
// sidecar, a corrupt or truncated sidecar or file, an untrusted digest or signature, a
// block that does not verify.
void verify_file(const verify_cli& o) {
  const verity::trust_policy trust = policy_of(o);
  require_readable_regular(o.file);
  if (!o.sidecar.empty()) require_readable_regular(o.sidecar);
  workqueue wq("fsverity_read_queue", wq_options{.highpri = true});
  std::optional<verity::verified_file> v;
  try {
    v.emplace(o.file, wq, trust, sidecar_arg(o.sidecar));
  } catch (const std::system_error& e) {
    throw std::runtime_error(e.what());  // the check failed: exit 1
  }
  std::vector<std::uint8_t> buf(1 << 20);
  std::uint64_t total = 0;
  while (total < v->size()) {
    try {
      total += v->read(total, buf);
    } catch (const std::system_error& e) {
      throw std::runtime_error(e.what());  // EIO: names the file and the block
    }
  }
  const verity::trust_result& r = v->trust();
  std::string how;
  if (r.digest_matched) how = "digest trusted";
  if (r.signature_verified) how += (how.empty() ? "" : ", ") + ("signed by " + r.signer);
  if (how.empty()) how = "integrity only, not authenticated";
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"file", o.file},
                                      {"verified", true},
                                      {"hash_alg", verity::to_string(v->tree().p.alg)},
                                      {"digest", verity::to_hex(v->digest())},
                                      {"bytes", total},
                                      {"digest_matched", r.digest_matched},
                                      {"signature_verified", r.signature_verified},
                                      {"signer", r.signer}}
                           .dump(2));
    return;
  }
  fmt::print("{}:{} {}: verified {} bytes ({})\n", verity::to_string(v->tree().p.alg),
             verity::to_hex(v->digest()), o.file, total, how);
}

// With --json a failed check is an object on stdout too (and still exit 1).
void run_verify(const verify_cli& o) {
  try {
    verify_file(o);
  } catch (const usage_error&) {
    throw;
  } catch (const std::runtime_error& e) {
    if (o.json) {
      fmt::print(
          "{}\n",
          nlohmann::json{{"file", o.file}, {"verified", false}, {"error", e.what()}}.dump(2));
    }
    throw;
  }
}

// ---- verity bench: seed 004's experiment (quiesce/experiments/verity_bench.hpp) ----

struct bench_cli {
  experiments::verity_bench_config config;
  bool json = false;
  std::string plot_dir;
  bool mount = false;  // --mount: the cold start through quiesce verity mount
  experiments::verity_mount_bench_config mount_config;
};

experiments::verity_mount_bench_result run_mount_bench(
    const experiments::verity_mount_bench_config& c, bool progress_wanted_here) {
  if (auto why = experiments::verity_mount_bench_unusable()) {
    throw usage_error("verity bench --mount: " + *why);
  }
  refuse_beyond_disk("--app-mib/--seq-mib", fmt::format("{}/{}", c.app_mib, c.seq_mib),
                     experiments::verity_mount_bench_disk_bytes(c),
                     fs::temp_directory_path().string());
  progress_line progress("quiesce verity bench --mount", experiments::verity_mount_bench_steps(c),
                         progress_wanted_here);
  return experiments::run_verity_mount_bench(c, [&](const std::string& s) { progress.step(s); });
}

experiments::verity_bench_result run_bench(const experiments::verity_bench_config& c,
                                           bool progress_wanted_here) {
  refuse_beyond_disk("--file-mib", std::to_string(c.file_mib),
                     experiments::verity_bench_disk_bytes(c), fs::temp_directory_path().string());
  progress_line progress("quiesce verity bench", 2 * static_cast<std::size_t>(c.runs),
                         progress_wanted_here);
  return experiments::run_verity_bench(c, [&](const std::string& s) { progress.step(s); });
}

// ---- verity mount: fs-verity through the kernel (quiesce/mount/verity_fs.hpp) ----

struct mount_cli {
  std::string source, mountpoint;
  mount::verity_mount_options options;
  std::vector<std::string> certs;
  std::vector<std::string> o_lists;  // each -o
  bool foreground = false;
};

void run_mount(const mount_cli& m) {
  mount::verity_mount_options o = m.options;
  o.foreground = m.foreground || o.debug;
  for (const std::string& c : m.certs)
    o.certs.emplace_back(c);
  try {
    for (const std::string& list : m.o_lists)
      mount::parse_mount_options(list, o);
    mount::serve_verity_mount(m.source, m.mountpoint, o, [&] {
      fmt::print(stderr,
                 "quiesce verity mount: {} on {} ({} queue); unmount with fusermount3 -u {}\n",
                 m.source, m.mountpoint, o.unbound ? "unbound" : "per-CPU highpri", m.mountpoint);
    });
  } catch (const mount::mount_error& e) {
    if (e.exit_code == 2) throw usage_error(std::string("verity mount: ") + e.what());
    throw std::runtime_error(std::string("verity mount: ") + e.what());
  }
}

}  // namespace

void add_verity_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "verity", "Seed 004: fs-verity Merkle trees and digests (byte-identical to fsverity)");
  sub->require_subcommand(1);
  auto o = std::make_shared<digest_cli>();
  auto* digest = sub->add_subcommand("digest", "Print the fs-verity digest of each FILE");
  digest->add_option("FILE", o->files, "Files to digest")->required();
  digest->add_option("--hash-alg", o->hash_alg, "sha256 | sha512 (or 1 | 2)")
      ->capture_default_str();
  // fsverity-utils' range: any power of two from twice the digest size (validate())
  // up to 2^30; `enable` keeps the kernel's lower bound.
  add_number(digest, "--block-size", o->block_size, "Merkle tree block size (a power of two)",
             number_range<std::size_t>{1, verity::max_block_size});
  digest->add_option("--salt", o->salt, "Salt, as hex (up to 32 bytes; empty: none)")
      ->expected(0, 1);
  digest->add_option("--out-merkle-tree", o->out_tree, "Write the Merkle tree here");
  digest->add_option("--out-descriptor", o->out_descriptor, "Write the descriptor here");
  digest->add_flag("--for-builtin-sig", o->for_builtin_sig,
                   "Print the message a built-in signature signs, as hex");
  digest->add_flag("--compact", o->compact,
                   "Print only the digest's hex, as `fsverity digest --compact`");
  digest->add_flag("--single-thread", o->single,
                   "Hash on this thread only (default: level 0 in parallel on a workqueue)");
  digest->add_flag("--json", o->json,
                   "One JSON array on stdout: per FILE its digest, parameters and the message "
                   "a built-in signature signs");
  digest->callback([o] { run_digest(*o); });

  auto e = std::make_shared<enable_cli>();
  auto* enable =
      sub->add_subcommand("enable", "Build FILE's Merkle tree into a sidecar (FILE.verity)");
  enable->add_option("FILE", e->file, "The file")->required();
  enable->add_option("--hash-alg", e->hash_alg, "sha256 | sha512")->capture_default_str();
  add_number(enable, "--block-size", e->block_size, "Merkle tree block size (a power of two)",
             number_range<std::size_t>{1024, verity::max_block_size});
  enable->add_option("--salt", e->salt, "Salt, as hex (up to 32 bytes; empty: none)")
      ->expected(0, 1);
  enable->add_option("--sidecar", e->sidecar, "Where to write it (default FILE.verity)");
  enable->add_option("--signature", e->signature,
                     "Store this built-in signature (from `fsverity sign`) in the sidecar");
  enable->callback([e] { run_enable(*e); });

  auto v = std::make_shared<verify_cli>();
  auto* verify = sub->add_subcommand(
      "verify",
      "Check FILE against a trusted digest or signature, then read it all through the "
      "verified path; exit 1 if it is not trusted, or naming the first bad block");
  verify->add_option("FILE", v->file, "The file")->required();
  verify->add_option("--sidecar", v->sidecar, "Its sidecar (default FILE.verity)");
  verify->add_option("--digest", v->digest,
                     "The trusted file digest, ALG:HEX (as `fsverity digest` prints it)");
  verify
      ->add_option("--cert", v->certs,
                   "A trusted certificate (PEM or DER) for built-in signatures; repeatable")
      ->allow_extra_args(false);
  verify->add_flag("--require-signatures", v->require_signatures,
                   "Refuse a file without a valid signature by a --cert certificate");
  verify->add_flag("--integrity-only", v->integrity_only,
                   "Trust nothing: check FILE against its own sidecar (detects corruption, "
                   "not tampering)");
  verify->add_flag("--json", v->json,
                   "One JSON object on stdout: what was verified and how it was trusted, or "
                   "\"verified\": false and the error (exit 1 still)");
  verify->callback([v] { run_verify(*v); });

  auto m = std::make_shared<mount_cli>();
  auto* mnt = sub->add_subcommand(
      "mount",
      "Show SOURCE at MOUNTPOINT through FUSE with fs-verity: files with a sidecar read "
      "only verified bytes, and fsverity-utils (measure, enable) and lsattr work on them; "
      "returns once mounted and serves in the background until unmounted (-f: in the "
      "foreground, until unmounted or interrupted)");
  mnt->add_option("SOURCE", m->source, "The directory to show")->required();
  mnt->add_option("MOUNTPOINT", m->mountpoint, "An empty directory")->required();
  mnt->add_flag("--unbound", m->options.unbound,
                "Verify on the pre-patch queue (unbound, highpri) instead of the patch's "
                "(per-CPU, highpri)");
  mnt->add_option("--cert", m->certs, "A trusted certificate for built-in signatures; repeatable")
      ->allow_extra_args(false);
  mnt->add_flag("--require-signatures", m->options.require_signatures,
                "A verity file without a valid signature by a --cert certificate cannot be "
                "opened, nor can one be enabled without a signature");
  mnt->add_flag("-f,--foreground", m->foreground,
                "Stay in the foreground (default: return once the mount is ready and serve "
                "it in the background, as sshfs does)");
  mnt->add_option("-o", m->o_lists,
                  "Mount options, comma-separated, as mount(8) and fstab pass them: ro, "
                  "allow_other, cert=FILE, require_signatures, unbound, read_ahead_kb=N, "
                  "tree_memory_mb=N, stats=FILE, "
                  "auto_unmount, noauto_unmount, nosuid, nodev, noexec, noatime, ...; repeatable")
      ->allow_extra_args(false);
  mnt->add_option("--stats", m->options.stats_file,
                  "Write the mount's counters (per file verified reads, bytes and EIO replies; "
                  "the verification queue's queue->start percentiles) as JSON to this file, "
                  "every second and at the end (also -o stats=FILE)");
  mnt->add_flag("--debug", m->options.debug, "libfuse's request log on stderr");
  mnt->callback([m] { run_mount(*m); });

  auto b = std::make_shared<bench_cli>();
  auto* bench = sub->add_subcommand(
      "bench", "Seed 004: verification on a per-CPU highpri queue vs an unbound one");
  add_number(bench, "--file-mib", b->config.file_mib, "Size of the generated file (MiB)",
             number_range<std::size_t>{1, std::size_t{1} << 20});
  add_number(bench, "--readers", b->config.readers,
             "Reader threads (even: random, odd: sequential)", number_range<int>{1, 1024});
  add_number(bench, "--seconds", b->config.seconds, "Seconds per queue",
             number_range<double>{0.001, 3600});
  add_number(bench, "--read-kib", b->config.read_kib, "Bytes per read (KiB)",
             number_range<std::size_t>{1, 64 * 1024});
  add_number(bench, "--runs", b->config.runs,
             "Runs of both queues (medians and spreads are quoted)", number_range<int>{1, 100});
  bench->add_flag("--json", b->json, "One JSON object on stdout");
  add_plot_option(bench, b->plot_dir);
  bench->add_flag("--mount", b->mount,
                  "The app cold start through quiesce verity mount (root, /dev/fuse): "
                  "processes read the app's files, page cache dropped before each start");
  add_number(bench, "--apps", b->mount_config.apps, "--mount: app processes per start",
             number_range<int>{1, 256});
  add_number(bench, "--load", b->mount_config.load, "--mount: CPU-bound background threads",
             number_range<int>{0, 1024});
  add_number(bench, "--app-mib", b->mount_config.app_mib, "--mount: the app's files (MiB)",
             number_range<std::size_t>{1, std::size_t{1} << 16});
  b->mount_config.seq_mib = 1024;
  add_number(bench, "--seq-mib", b->mount_config.seq_mib,
             "--mount: the file read sequentially, cold and warm, direct and through the "
             "mount without and with verification (MiB; 0: no sequential row)",
             number_range<std::size_t>{0, std::size_t{1} << 20});
  add_number(bench, "--read-ahead-kb", b->mount_config.read_ahead_kb,
             "--mount: the mounts' readahead window (KiB; 0: the kernel's 128)",
             number_range<unsigned>{0, mount::max_read_ahead_kb});
  bench->callback(traced(bench, [b] {
    if (b->mount) {
      experiments::verity_mount_bench_config c = b->mount_config;
      c.runs = b->config.runs;
      const experiments::verity_mount_bench_result r = run_mount_bench(c, progress_wanted(b->json));
      fmt::print("{}", b->json ? r.to_json().dump(2) + "\n" : r.markdown());
      write_plots(b->plot_dir, r.plots());
      return;
    }
    const experiments::verity_bench_result r = run_bench(b->config, progress_wanted(b->json));
    fmt::print("{}", b->json ? r.to_json().dump(2) + "\n" : r.markdown());
    write_plots(b->plot_dir, r.plots());
  }));
}

}  // namespace quiesce::cli
