// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the verity test files: a scratch directory, files of known bytes, a
// pinned-digest policy, and the errno of a throwing expression.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "quiesce/verity.hpp"

namespace quiesce::verity::test {

namespace fs = std::filesystem;

// A fresh directory per test, removed after it.
class scratch_dir : public testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> serial{0};
    dir_ = fs::temp_directory_path() /
           ("quiesce-verity-t" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  static std::vector<std::uint8_t> random_bytes(std::size_t size, unsigned seed) {
    std::vector<std::uint8_t> v(size);
    std::mt19937 rng(seed);
    for (auto& b : v)
      b = static_cast<std::uint8_t>(rng());
    return v;
  }
  static std::vector<std::uint8_t> read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // Overwrites bytes of `p` at `at`.
  static void patch(const fs::path& p, std::uint64_t at, const std::vector<std::uint8_t>& bytes) {
    std::fstream io(p, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(at));
    io.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  }
  static void flip_bit(const fs::path& p, std::uint64_t at) {
    std::vector<std::uint8_t> all = read_all(p);
    patch(p, at, {static_cast<std::uint8_t>(all.at(at) ^ 1)});
  }

  fs::path dir_;
};

// Trusts exactly the digest of `t`.
inline trust_policy pin(const merkle_tree& t) {
  return trust_policy::pinned({t.p.alg, file_digest(t)});
}

// The errno of the std::system_error `f` throws (its message in `what`); 0 if it returns;
// -1 for any other exception.
inline int error_of(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const std::system_error& e) {
    if (what) *what = e.what();
    return e.code().value();
  } catch (const std::exception& e) {
    if (what) *what = e.what();
    return -1;
  }
  return 0;
}

}  // namespace quiesce::verity::test
