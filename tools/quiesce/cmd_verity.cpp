// quiesce verity - fs-verity for any file (seed 004). `verity digest` prints what
// `fsverity digest` prints, byte for byte; level 0 is hashed in parallel on a workqueue.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"
#include "registry.hpp"

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
};

// Writes through a temporary file and a rename: never a half-written output.
void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, path);
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
  if ((!o.out_tree.empty() || !o.out_descriptor.empty()) && o.files.size() != 1) {
    throw usage_error("--out-merkle-tree/--out-descriptor: give exactly one FILE");
  }
  // Parallel level-0 hashing: an unbound queue, one running item per CPU.
  workqueue wq("verity_digest", wq_options{.unbound = true, .scope = affinity_scope::system});
  for (const std::string& file : o.files) {
    verity::merkle_tree t;
    try {
      t = verity::build_tree(file, p, &wq);
    } catch (const std::system_error& e) {
      throw std::runtime_error(fmt::format("can't read '{}': {}", file, e.code().message()));
    }
    if (o.for_builtin_sig) {
      fmt::print("{} {}\n", verity::to_hex(verity::builtin_sig_message(t)), file);
    } else {
      fmt::print("{}:{} {}\n", verity::to_string(p.alg), verity::to_hex(verity::file_digest(t)),
                 file);
    }
    if (!o.out_tree.empty()) write_file(o.out_tree, t.tree.data(), t.tree.size());
    if (!o.out_descriptor.empty()) {
      const auto desc = verity::descriptor(t);
      write_file(o.out_descriptor, desc.data(), desc.size());
    }
  }
}

struct enable_cli {
  std::string file, hash_alg = "sha256", salt, sidecar;
  std::size_t block_size = 4096;
};

verity::params params_of(const std::string& alg, std::size_t block_size, const std::string& salt) {
  try {
    verity::params p;
    p.alg = verity::parse_hash_alg(alg);
    p.block_size = block_size;
    p.salt = verity::from_hex(salt);
    p.validate();
    return p;
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

std::optional<fs::path> sidecar_arg(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<fs::path>(s);
}

void run_enable(const enable_cli& o) {
  const verity::params p = params_of(o.hash_alg, o.block_size, o.salt);
  workqueue wq("verity_enable", wq_options{.unbound = true, .scope = affinity_scope::system});
  verity::merkle_tree t;
  try {
    t = verity::enable(o.file, p, sidecar_arg(o.sidecar), &wq);
  } catch (const std::system_error& e) {
    throw std::runtime_error(fmt::format("can't enable '{}': {}", o.file, e.what()));
  }
  fmt::print("{}:{} {} (sidecar {}, tree {} bytes)\n", verity::to_string(p.alg),
             verity::to_hex(verity::file_digest(t)), o.file,
             o.sidecar.empty() ? o.file + ".verity" : o.sidecar, t.tree.size());
}

// Reads the whole file through the verified path; exit 1 with the error on a mismatch.
void run_verify(const std::string& file, const std::string& sidecar) {
  workqueue wq("fsverity_read_queue", wq_options{.highpri = true});
  std::optional<verity::verified_file> v;
  try {
    v.emplace(file, wq, sidecar_arg(sidecar));
  } catch (const std::system_error& e) {
    throw std::runtime_error(e.what());
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
  fmt::print("{}:{} {}: verified {} bytes\n", verity::to_string(v->tree().p.alg),
             verity::to_hex(v->digest()), file, total);
}

const command_registrar verity_command{{"verity", [](CLI::App& app) {
  auto* sub = app.add_subcommand(
      "verity", "Seed 004: fs-verity Merkle trees and digests (byte-identical to fsverity)");
  sub->require_subcommand(1);
  auto o = std::make_shared<digest_cli>();
  auto* digest = sub->add_subcommand("digest", "Print the fs-verity digest of each FILE");
  digest->add_option("FILE", o->files, "Files to digest")->required();
  digest->add_option("--hash-alg", o->hash_alg, "sha256 | sha512")->capture_default_str();
  digest->add_option("--block-size", o->block_size, "Merkle tree block size")
      ->capture_default_str();
  digest->add_option("--salt", o->salt, "Salt, as hex (up to 32 bytes)");
  digest->add_option("--out-merkle-tree", o->out_tree, "Write the Merkle tree here");
  digest->add_option("--out-descriptor", o->out_descriptor, "Write the descriptor here");
  digest->add_flag("--for-builtin-sig", o->for_builtin_sig,
                   "Print the message a built-in signature signs, as hex");
  digest->callback([o] { run_digest(*o); });

  auto e = std::make_shared<enable_cli>();
  auto* enable = sub->add_subcommand("enable", "Build FILE's Merkle tree into a sidecar (FILE.verity)");
  enable->add_option("FILE", e->file, "The file")->required();
  enable->add_option("--hash-alg", e->hash_alg, "sha256 | sha512")->capture_default_str();
  enable->add_option("--block-size", e->block_size, "Merkle tree block size")->capture_default_str();
  enable->add_option("--salt", e->salt, "Salt, as hex (up to 32 bytes)");
  enable->add_option("--sidecar", e->sidecar, "Where to write it (default FILE.verity)");
  enable->callback([e] { run_enable(*e); });

  auto v = std::make_shared<std::pair<std::string, std::string>>();
  auto* verify = sub->add_subcommand(
      "verify", "Read FILE through the verified path; exit 1 naming the first bad block");
  verify->add_option("FILE", v->first, "The file")->required();
  verify->add_option("--sidecar", v->second, "Its sidecar (default FILE.verity)");
  verify->callback([v] { run_verify(v->first, v->second); });
}}};

}  // namespace
}  // namespace quiesce::cli
