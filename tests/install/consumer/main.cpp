// SPDX-License-Identifier: Apache-2.0
// A program built against an installed quiesce: exits 0 only if the library works.
#include <quiesce/cpu_set.hpp>
#include <quiesce/histogram.hpp>
#include <quiesce/keys.hpp>
#include <quiesce/log.hpp>
#include <quiesce/summary.hpp>
#include <quiesce/version.hpp>

#include <cstdio>
#include <string>

int main() {
  quiesce::summary s;
  s.add(1'000'000);
  s.add(3'000'000);
  const bool summary_ok = s.count() == 2 && s.mean() == 2'000'000 && s.max() == 3'000'000;
  quiesce::histogram h;
  for (std::uint64_t v = 1; v <= 100; ++v)
    h.record(v);
  quiesce::log_capture capture;
  quiesce::log(quiesce::log_level::info, "installed");
  bool keys_ok = false;
  {
    quiesce::keys::key_store store;
    const auto ring = store.add_keyring("ring");
    const auto k = store.add_key("user", "k", "payload", ring);
    keys_ok = store.read(k) == "payload";
  }
  const bool ok = keys_ok && summary_ok && h.percentile(50) == 50 &&
                  quiesce::cpu_set::parse("0-2").size() == 3 && capture.count("installed") == 1;
  std::printf("quiesce %s: %s\n", quiesce::version_string, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
