// Helpers shared by the KvCache tests: a tiny KV layout to reason about every block, consecutive
// token runs, a temporary disk tier, and the fixture that fills and checks blocks.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kv/disk_tier.h"
#include "kv/kv_cache.h"
#include "kv/kv_layout.h"
#include "kv/prefix_index.h"

namespace mnemo::testing {

// Two tokens per block, 32-byte blocks: small enough to reason about every block.
inline KvLayout tiny_layout() {
  KvLayout l;
  l.n_layers = 1;
  l.n_kv_heads = 1;
  l.head_dim_k = 2;
  l.head_dim_v = 2;
  l.block_size = 2;
  l.dtype = DType::F32;
  return l;
}

inline std::vector<TokenId> tokens_from(TokenId first, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mnemo-kvm-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// The disk tier of the tiny layout in `dir` (1 MiB); null, with the reason as a test failure, if
// it cannot be opened.
inline std::shared_ptr<DiskTier> open_disk(const TempDir& dir, uint64_t fingerprint = 42) {
  auto opened = DiskTier::open(dir.path, fingerprint, tiny_layout().block_bytes(), 1 << 20);
  if (!opened.ok()) {
    ADD_FAILURE() << opened.error().message();
    return nullptr;
  }
  return std::move(*opened);
}

class KvCacheTest : public ::testing::Test {
 protected:
  double clock_ = 1000;

  KvPoolConfig config(int32_t device, int32_t host, RetentionPolicy policy = RetentionPolicy::kPensieve) {
    KvPoolConfig c;
    c.device_blocks = device;
    c.host_blocks = host;
    c.policy = policy;
    c.swap_out_threshold = 0;  // copies ahead of need only where a test asks for them
    c.cost.per_token_seconds = 1e-3;
    c.cost.per_context_token_seconds = 1e-3;  // steep, so position matters in these tiny sizes
    c.clock = [this] { return clock_; };
    return c;
  }

  // Computes (fills with a pattern derived from the tokens) and caches a sequence's chunks, then
  // lets the sequence go: its blocks are held by the index alone.
  static void run_and_cache(KvCache& kv, uint64_t ns, const std::vector<TokenId>& tokens) {
    KvTable table;
    PrefixMatch match = kv.match_prefix(ns, tokens, static_cast<int32_t>(tokens.size()) / kv.block_size());
    table = std::move(match.table);
    const auto n = static_cast<int32_t>(tokens.size());
    ASSERT_TRUE(kv.prepare_write(table, static_cast<int32_t>(table.size()) * kv.block_size(), n));
    for (size_t b = 0; b < table.size(); ++b) fill(kv, table[b], tokens[b * 2]);
    kv.cache_prefix(ns, tokens, n, table);
    kv.release(table);
  }
  static void fill(KvCache& kv, BlockId block, TokenId first_token) {
    auto* f = reinterpret_cast<float*>(kv.device().block(block));
    for (size_t i = 0; i < kv.layout().block_bytes() / sizeof(float); ++i) f[i] = static_cast<float>(first_token) + 0.01f * static_cast<float>(i);
  }
  static bool holds_pattern(KvCache& kv, BlockId block, TokenId first_token) {
    const auto* f = reinterpret_cast<const float*>(kv.device().block(block));
    for (size_t i = 0; i < kv.layout().block_bytes() / sizeof(float); ++i) {
      if (f[i] != static_cast<float>(first_token) + 0.01f * static_cast<float>(i)) return false;
    }
    return true;
  }
};

}  // namespace mnemo::testing
