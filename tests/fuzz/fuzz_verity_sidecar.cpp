// verified_file against hostile sidecars (FILE.verity is untrusted input). The input is
// [u16 little-endian data length][data][sidecar]. Properties:
//  - opening either throws std::system_error or succeeds;
//  - each read either returns exactly the file's bytes or throws std::system_error(EIO);
//  - if every block of a non-empty file was read successfully, the sidecar's root hash is
//    the true one for that data under the sidecar's parameters: no wrong tree verifies.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "fuzz_check.hpp"
#include "quiesce/verity.hpp"
#include "quiesce/workqueue.hpp"

namespace {

namespace fs = std::filesystem;
namespace verity = quiesce::verity;

void write_file(const fs::path& p, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* input, std::size_t size) {
  static const fs::path dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("quiesce-fuzz-verity-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  static quiesce::workqueue wq("fuzz_verity", quiesce::wq_options{.highpri = true});
  if (size < 2) return 0;
  const std::size_t data_len =
      std::min<std::size_t>(input[0] | (std::size_t{input[1]} << 8), size - 2);
  const std::uint8_t* data = input + 2;
  const std::uint8_t* sidecar = data + data_len;
  const std::size_t sidecar_len = size - 2 - data_len;
  const fs::path file = dir / "data", side = dir / "data.verity";
  write_file(file, data, data_len);
  write_file(side, sidecar, sidecar_len);

  std::optional<verity::verified_file> v;
  try {
    v.emplace(file, wq, verity::trust_policy::integrity(), side);
  } catch (const std::system_error&) {
    return 0;
  }
  FUZZ_CHECK(v->size() == data_len, "size %llu for %zu bytes",
             static_cast<unsigned long long>(v->size()), data_len);
  bool all_verified = true;
  std::vector<std::uint8_t> buf(3000);  // not a block multiple: reads straddle blocks
  for (std::uint64_t off = 0; off < data_len; off += buf.size()) {
    try {
      const std::size_t n = v->read(off, buf);
      FUZZ_CHECK(n == std::min<std::uint64_t>(buf.size(), data_len - off), "short read");
      FUZZ_CHECK(std::memcmp(buf.data(), data + off, n) == 0, "read returned other bytes");
    } catch (const std::system_error& e) {
      FUZZ_CHECK(e.code().value() == EIO, "read failed with %s", e.what());
      all_verified = false;
    }
  }
  if (all_verified && data_len > 0) {
    const verity::merkle_tree truth = verity::build_tree(data, data_len, v->tree().p);
    FUZZ_CHECK(truth.root_hash == v->tree().root_hash,
               "a sidecar whose root hash is not the data's verified every read");
  }
  return 0;
}
