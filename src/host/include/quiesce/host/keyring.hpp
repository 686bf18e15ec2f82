// SPDX-License-Identifier: Apache-2.0
// The host kernel's keyring, as `quiesce keygc --kernel` uses it (libkeyutils): the quota
// the kernel keeps per user (/proc/key-users), the check that a population fits it, and a
// population of `user` keys in a private keyring of the process that removes itself.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quiesce::host {

// One line of /proc/key-users, with the limits that apply to that user.
struct key_quota {
  std::uint64_t usage = 0;    // references to the user's key_user record
  std::uint64_t nkeys = 0;    // keys the user owns, live or dying
  std::uint64_t nikeys = 0;   // of which instantiated
  std::uint64_t qnkeys = 0;   // keys charged to the quota
  std::uint64_t maxkeys = 0;  // the limit on qnkeys
  std::uint64_t qnbytes = 0;  // bytes charged to the quota
  std::uint64_t maxbytes = 0;
};

// Parses /proc/key-users text for `uid`. A user with no line has no keys yet: nullopt.
// Throws std::runtime_error on a malformed line for that uid.
std::optional<key_quota> parse_key_users(std::string_view text, uid_t uid);

// The calling user's quota now: its /proc/key-users line, or (no line yet) zero usage and
// the limits from /proc/sys/kernel/keys (root_maxkeys/root_maxbytes for root, maxkeys/
// maxbytes otherwise). Throws std::runtime_error naming the file if it cannot be read
// (a kernel without CONFIG_KEYS has neither).
key_quota read_key_quota();

// The shape of a population: `keys` user keys in keyrings of `per_keyring`, under one top
// keyring, each key with a `payload`-byte payload. Descriptions are "qk.<tag>.<n>" for keys
// and "qk.<tag>.r<n>" for keyrings, the top keyring is "quiesce-keygc.<tag>".
struct population_shape {
  std::size_t keys = 0;
  std::size_t per_keyring = 100;
  std::size_t payload = 8;
  std::string tag;  // unique per run: the pid by default
  std::size_t keyrings() const { return (keys + per_keyring - 1) / per_keyring; }
  // What the population charges to the quota: one key per key and keyring (and the top,
  // the process keyring and a thread keyring, which may not exist yet),
  // and per key desclen + 1 + payload + 4 bytes, per keyring desclen + 1 + 4 (measured on
  // 6.18: key_alloc charges the description and its NUL, the type's data, and 4 bytes more).
  std::uint64_t quota_keys() const;
  std::uint64_t quota_bytes() const;
};

// Why `shape` cannot be created on top of `now`, in words a user can act on; nullopt if it
// fits.
std::optional<std::string> quota_refusal(const population_shape& shape, const key_quota& now,
                                         uid_t uid);

// Throws std::runtime_error saying why the kernel keyring cannot be used by this process
// (no keyring support, a seccomp filter, permissions), after trying to make the process
// keyring; returns quietly if it can.
void check_keyring_usable();

// A population of user keys in the kernel, created by the constructor in a private keyring
// of this process (a keyring linked from the process keyring), removed by the destructor
// (the top keyring cleared and unlinked: the kernel's collector then destroys it all).
// The constructor checks the quota first and creates nothing if the shape does not fit
// (std::runtime_error with the quota_refusal() text); if the kernel refuses a key midway,
// what was created is removed before the std::system_error leaves.
class kernel_population {
 public:
  explicit kernel_population(population_shape shape);
  ~kernel_population();
  kernel_population(const kernel_population&) = delete;
  kernel_population& operator=(const kernel_population&) = delete;

  const population_shape& shape() const noexcept { return shape_; }
  std::int32_t top() const noexcept { return top_; }
  const std::vector<std::int32_t>& keyrings() const noexcept { return rings_; }
  const std::vector<std::int32_t>& keys() const noexcept { return keys_; }

  // Phase "unused": clears every keyring of the population, so each key loses its last
  // reference. The keyrings themselves stay.
  void clear_keyrings();
  // Phase "expired": gives every key the same expiry, `seconds` from now (each key's timeout
  // is what is left of them when it is set; at least 1). Call it from the thread that
  // constructed the population (it made that thread's keyring, which this uses). Returns the
  // latest expiry the kernel may have recorded (CLOCK_REALTIME seconds: the kernel's expiry
  // is wall-clock seconds).
  std::int64_t set_timeouts(unsigned seconds);

 private:
  void remove() noexcept;

  population_shape shape_;
  std::int32_t top_ = 0;
  std::vector<std::int32_t> rings_, keys_;
};

// Keys of the calling user the kernel still holds (live or awaiting the collector): the
// nkeys field of /proc/key-users (0 without a line).
std::uint64_t kernel_keys_of_user();

// Lines of /proc/keys whose description contains `needle` (keys this process may view).
std::vector<std::string> proc_keys_matching(std::string_view needle);

}  // namespace quiesce::host
