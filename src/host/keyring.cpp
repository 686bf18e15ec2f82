// SPDX-License-Identifier: Apache-2.0
#include "quiesce/host/keyring.hpp"

#include <fmt/format.h>
#include <keyutils.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "../base/file_io.hpp"

namespace quiesce::host {

namespace {

std::uint64_t read_number(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("{}: not a number: '{}'", path, text));
  }
}

std::string key_description(const population_shape& s, std::size_t i) {
  return fmt::format("qk.{}.{}", s.tag, i);
}
std::string ring_description(const population_shape& s, std::size_t i) {
  return fmt::format("qk.{}.r{}", s.tag, i);
}
std::string top_description(const population_shape& s) {
  return fmt::format("quiesce-keygc.{}", s.tag);
}

[[noreturn]] void kernel_refused(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

std::optional<key_quota> parse_key_users(std::string_view text, uid_t uid) {
  // "  uid:  usage nkeys/nikeys qnkeys/maxkeys qnbytes/maxbytes"
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long u = 0;
    key_quota q;
    unsigned long long f[7];
    const int n = std::sscanf(line.c_str(), " %llu: %llu %llu/%llu %llu/%llu %llu/%llu", &u, &f[0],
                              &f[1], &f[2], &f[3], &f[4], &f[5], &f[6]);
    if (n < 1 || u != uid) continue;
    if (n != 8) throw std::runtime_error("/proc/key-users: malformed line: '" + line + "'");
    q = {f[0], f[1], f[2], f[3], f[4], f[5], f[6]};
    return q;
  }
  return std::nullopt;
}

key_quota read_key_quota() {
  const uid_t uid = ::getuid();
  if (::access("/proc/key-users", F_OK) != 0) {
    throw std::runtime_error("the kernel has no keyring support (no /proc/key-users)");
  }
  if (auto q = parse_key_users(read_file("/proc/key-users"), uid)) return *q;
  key_quota q;
  const std::string dir = "/proc/sys/kernel/keys/";
  q.maxkeys = read_number(dir + (uid == 0 ? "root_maxkeys" : "maxkeys"));
  q.maxbytes = read_number(dir + (uid == 0 ? "root_maxbytes" : "maxbytes"));
  return q;
}

std::uint64_t population_shape::quota_keys() const {
  return keys + keyrings() + 3;  // + the top, the process and a thread keyring
}

std::uint64_t population_shape::quota_bytes() const {
  constexpr std::uint64_t extra = 4;  // per key, as measured (see the header)
  std::uint64_t bytes =
      2 * (4 + 1 + extra) + top_description(*this).size() + 1 + extra;  // "_pid", "_tid"
  for (std::size_t i = 0; i < keyrings(); ++i)
    bytes += ring_description(*this, i).size() + 1 + extra;
  for (std::size_t i = 0; i < keys; ++i)
    bytes += key_description(*this, i).size() + 1 + payload + extra;
  return bytes;
}

std::optional<std::string> quota_refusal(const population_shape& shape, const key_quota& now,
                                         uid_t uid) {
  const std::string keys_knob = uid == 0 ? "root_maxkeys" : "maxkeys";
  const std::string bytes_knob = uid == 0 ? "root_maxbytes" : "maxbytes";
  if (now.qnkeys + shape.quota_keys() > now.maxkeys) {
    return fmt::format(
        "{} keys and {} keyrings do not fit the kernel's key quota for uid {}: {} of {} "
        "keys in use, {} more needed (raise /proc/sys/kernel/keys/{} or use fewer --keys)",
        shape.keys, shape.keyrings() + 1, uid, now.qnkeys, now.maxkeys, shape.quota_keys(),
        keys_knob);
  }
  if (now.qnbytes + shape.quota_bytes() > now.maxbytes) {
    return fmt::format(
        "{} keys do not fit the kernel's byte quota for uid {}: {} of {} bytes in use, {} "
        "more needed (raise /proc/sys/kernel/keys/{} or use fewer --keys)",
        shape.keys, uid, now.qnbytes, now.maxbytes, shape.quota_bytes(), bytes_knob);
  }
  return std::nullopt;
}

void check_keyring_usable() {
  const key_serial_t id = keyctl_get_keyring_ID(KEY_SPEC_PROCESS_KEYRING, 1);
  if (id >= 0) return;
  const int err = errno;
  switch (err) {
    case ENOSYS:
      throw std::runtime_error("the kernel has no keyring support (keyctl: ENOSYS)");
    case EPERM:
    case EACCES:
      throw std::runtime_error(
          fmt::format("the kernel keyring is not permitted here (keyctl: {}; a container's seccomp "
                      "filter blocks keyctl/add_key)",
                      std::strerror(err)));
    case EDQUOT:
      throw std::runtime_error("no key quota left to make the process keyring (EDQUOT)");
    default:
      throw std::runtime_error(
          fmt::format("the process keyring cannot be made: {}", std::strerror(err)));
  }
}

kernel_population::kernel_population(population_shape shape) : shape_(std::move(shape)) {
  if (shape_.tag.empty()) shape_.tag = std::to_string(::getpid());
  if (shape_.per_keyring == 0) throw std::invalid_argument("population: per_keyring must be >= 1");
  if (shape_.payload == 0) throw std::invalid_argument("population: payload must be >= 1");
  // The quota first: a population that does not fit creates nothing, not even the
  // process keyring.
  if (auto why = quota_refusal(shape_, read_key_quota(), ::getuid()))
    throw std::runtime_error(*why);
  check_keyring_usable();
  try {
    // The thread keyring set_timeouts() uses, made now so that the population's key count
    // does not change later.
    if (keyctl_get_keyring_ID(KEY_SPEC_THREAD_KEYRING, 1) < 0)
      kernel_refused(errno, "the thread keyring");
    const std::string top = top_description(shape_);
    top_ = add_key("keyring", top.c_str(), nullptr, 0, KEY_SPEC_PROCESS_KEYRING);
    if (top_ < 0) kernel_refused(errno, "add_key(keyring " + top + ")");
    const std::string payload(shape_.payload, 'k');
    rings_.reserve(shape_.keyrings());
    keys_.reserve(shape_.keys);
    for (std::size_t i = 0; i < shape_.keys; ++i) {
      if (i % shape_.per_keyring == 0) {
        const std::string d = ring_description(shape_, rings_.size());
        const key_serial_t r = add_key("keyring", d.c_str(), nullptr, 0, top_);
        if (r < 0) kernel_refused(errno, "add_key(keyring " + d + ")");
        rings_.push_back(r);
      }
      const std::string d = key_description(shape_, i);
      const key_serial_t k =
          add_key("user", d.c_str(), payload.data(), payload.size(), rings_.back());
      if (k < 0) kernel_refused(errno, "add_key(user " + d + ")");
      keys_.push_back(k);
    }
  } catch (...) {
    remove();
    throw;
  }
}

kernel_population::~kernel_population() {
  remove();
}

void kernel_population::remove() noexcept {
  if (top_ <= 0) return;
  // Clearing the top keyring drops the keyrings' last references; unlinking it from the
  // process keyring drops its own. The kernel's collector destroys the rest.
  keyctl_clear(top_);
  keyctl_unlink(top_, KEY_SPEC_PROCESS_KEYRING);
  top_ = 0;
}

void kernel_population::clear_keyrings() {
  for (key_serial_t r : rings_) {
    if (keyctl_clear(r) != 0) kernel_refused(errno, fmt::format("keyctl_clear({})", r));
  }
}

std::int64_t kernel_population::set_timeouts(unsigned seconds) {
  // keyctl_set_timeout() looks its key up and searches this process's keyrings to see
  // whether the caller possesses it: through the top keyring that walks every keyring of
  // the population (O(keyrings) per key - 100,000 keys took ~40 s on 6.18). The thread
  // keyring is searched first, so each keyring is linked there while its keys are set.
  const key_serial_t thread_ring = keyctl_get_keyring_ID(KEY_SPEC_THREAD_KEYRING, 0);
  if (thread_ring < 0)
    kernel_refused(errno, "the thread keyring (call from the constructing thread)");
  // Every key expires in the same wall-clock second: the kernel's collector then unlinks
  // them all in one pass. Spread over several seconds, a pass over a large population can
  // outlast the gap to the next expiry, and the kernel re-queues its collector without the
  // flag that makes it unlink expired keys - they then stay (docs/keygc-kernel.md).
  const std::int64_t expiry = static_cast<std::int64_t>(std::time(nullptr)) + seconds;
  std::int64_t latest = 0;
  std::size_t next = 0;
  for (key_serial_t r : rings_) {
    if (keyctl_link(r, thread_ring) != 0) kernel_refused(errno, fmt::format("keyctl_link({})", r));
    const std::size_t end = std::min(next + shape_.per_keyring, keys_.size());
    for (; next < end; ++next) {
      const std::int64_t now = std::time(nullptr);
      const auto left = static_cast<unsigned>(expiry > now ? expiry - now : 1);
      if (keyctl_set_timeout(keys_[next], left) != 0) {
        const int err = errno;
        keyctl_unlink(r, thread_ring);
        kernel_refused(err, fmt::format("keyctl_set_timeout({})", keys_[next]));
      }
      // The kernel's "now" may have ticked past ours: its expiry is at most one later.
      latest = std::max<std::int64_t>(latest, std::time(nullptr) + left);
    }
    keyctl_unlink(r, thread_ring);
  }
  return latest;
}

std::uint64_t kernel_keys_of_user() {
  const auto q = parse_key_users(read_file("/proc/key-users"), ::getuid());
  return q ? q->nkeys : 0;
}

std::vector<std::string> proc_keys_matching(std::string_view needle) {
  std::vector<std::string> out;
  std::istringstream in(read_file("/proc/keys"));
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

}  // namespace quiesce::host
