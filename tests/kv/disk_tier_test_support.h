// Helpers shared by the DiskTier tests: a fresh directory per test, payload patterns, headers,
// and the on-disk layout's offsets for damaging extents on purpose.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "kv/disk_tier.h"

namespace mnemo::disk_tier_testing {

constexpr uint64_t kFingerprint = 0x1234'5678'9abc'def0ULL;
constexpr size_t kPayload = 96;
constexpr int kTokens = 4;
// The on-disk layout (disk_tier.cpp): a 48-byte prefix (magic 8, fingerprint 8, ns 8, key 8,
// parent key 8, position 4, token count 4), the tokens, then a 24-byte trailer (payload bytes 8,
// payload hash 8, header hash 8); then the payload.
constexpr size_t kPrefixBytes = 48;
constexpr size_t kTrailerBytes = 24;
constexpr size_t kFingerprintOffset = 8;
constexpr size_t header_size(size_t n_tokens) { return kPrefixBytes + 4 * n_tokens + kTrailerBytes; }

// A fresh directory per test, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mnemo-disk-tier-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    if (made == nullptr) std::abort();
    path = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

inline ExtentHeader make_header(uint64_t key, uint64_t parent_key, int32_t position, int n_tokens = kTokens,
                                uint64_t ns = 7) {
  ExtentHeader h;
  h.ns = ns;
  h.key = key;
  h.parent_key = parent_key;
  h.position = position;
  h.tokens.resize(static_cast<size_t>(n_tokens));
  std::iota(h.tokens.begin(), h.tokens.end(), position * 10 + static_cast<int32_t>(key));
  return h;
}

inline void expect_same_header(const ExtentHeader& got, const ExtentHeader& want) {
  EXPECT_EQ(got.ns, want.ns);
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.parent_key, want.parent_key);
  EXPECT_EQ(got.position, want.position);
  EXPECT_EQ(got.tokens, want.tokens);
}

// The names in a directory, sorted.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// An extent's file name: the key in 16 hex digits.
inline std::string name_of(uint64_t key) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.kv", static_cast<unsigned long long>(key));
  return name;
}

// The fixture of the DiskTier tests: a temporary directory and a tier opened in it.
class DiskTierTest : public ::testing::Test {
 protected:
  TempDir dir_;

  std::unique_ptr<DiskTier> open(uint64_t fingerprint = kFingerprint, size_t payload = kPayload,
                                 int64_t capacity = int64_t{1} << 20) {
    auto tier = DiskTier::open(dir_.path, fingerprint, payload, capacity);
    EXPECT_TRUE(tier.ok()) << tier.error().message();
    return tier.ok() ? std::move(*tier) : nullptr;
  }

  // Writes one extent and waits for it: it must be reported durable.
  static void write_durably(DiskTier& tier, const ExtentHeader& h, const std::vector<uint8_t>& payload) {
    ASSERT_TRUE(tier.write(h, payload));
    tier.flush();
    const auto done = tier.take_completed();
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].first, h.key);
    EXPECT_TRUE(done[0].second);
  }

  std::string path(uint64_t key) const { return dir_.path + "/" + name_of(key); }
};

}  // namespace mnemo::disk_tier_testing
