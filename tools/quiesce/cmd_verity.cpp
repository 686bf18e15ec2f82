// quiesce verity - fs-verity for any file (seed 004). `verity digest` prints what
// `fsverity digest` prints, byte for byte; level 0 is hashed in parallel on a workqueue.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
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
}}};

}  // namespace
}  // namespace quiesce::cli
