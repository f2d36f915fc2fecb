// KvManager without a model: exact states of the tiers under the retention policy (Pensieve's
// value vs LRU), the cascade device -> host -> disk -> dropped, free reclaim of chunks with a copy
// below, copies ahead of need, dropped leading chunks handed back for recompute, damaged disk
// extents never served, and the index rebuilt from the disk tier.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "engine/kv_manager.h"

namespace mnemo {
namespace {

// Two tokens per block, 32-byte blocks: small enough to reason about every block.
KvLayout tiny_layout() {
  KvLayout l;
  l.n_layers = 1;
  l.n_kv_heads = 1;
  l.head_dim_k = 2;
  l.head_dim_v = 2;
  l.block_size = 2;
  l.dtype = DType::F32;
  return l;
}

std::vector<TokenId> tokens_from(TokenId first, int n) {
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

class KvManagerTest : public ::testing::Test {
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
  static void run_and_cache(KvManager& kv, uint64_t ns, const std::vector<TokenId>& tokens) {
    std::vector<BlockId> table;
    PrefixMatch match = kv.match_prefix(ns, tokens, static_cast<int32_t>(tokens.size()) / kv.block_size());
    table = match.table;
    const auto n = static_cast<int32_t>(tokens.size());
    ASSERT_TRUE(kv.prepare_write(table, static_cast<int32_t>(table.size()) * kv.block_size(), n));
    for (size_t b = 0; b < table.size(); ++b) fill(kv, table[b], tokens[b * 2]);
    kv.cache_prefix(ns, tokens, n, table);
    kv.release(table);
  }
  static void fill(KvManager& kv, BlockId block, TokenId first_token) {
    auto* f = reinterpret_cast<float*>(kv.device().block(block));
    for (size_t i = 0; i < kv.layout().block_bytes() / sizeof(float); ++i) f[i] = static_cast<float>(first_token) + 0.01f * static_cast<float>(i);
  }
  static bool holds_pattern(KvManager& kv, BlockId block, TokenId first_token) {
    const auto* f = reinterpret_cast<const float*>(kv.device().block(block));
    for (size_t i = 0; i < kv.layout().block_bytes() / sizeof(float); ++i) {
      if (f[i] != static_cast<float>(first_token) + 0.01f * static_cast<float>(i)) return false;
    }
    return true;
  }
};

TEST_F(KvManagerTest, RetentionOrderDiffersBetweenPensieveAndLru) {
  // Pool of 4 blocks full with A (2 chunks, idle 10 s) and B (2 chunks, idle 12 s). Two blocks
  // are needed. LRU takes B's two chunks (older). Pensieve takes B's head (V = c0/12), then A's
  // head (V = c0/10 < B's tail c1/12, since a chunk at position 1 costs 3x one at position 0
  // here): every conversation keeps its tail, the heads are recomputed later (SPEC P5).
  const auto a = tokens_from(100, 4);
  const auto b = tokens_from(200, 4);
  const auto run = [&](RetentionPolicy policy) {
    clock_ = 1000;
    auto kv = std::make_unique<KvManager>(tiny_layout(), config(4, 0, policy));
    run_and_cache(*kv, 1, b);
    clock_ += 2;
    run_and_cache(*kv, 1, a);
    clock_ += 10;
    std::vector<BlockId> table;
    EXPECT_TRUE(kv->prepare_write(table, 0, 4));
    EXPECT_EQ(kv->counters().dropped_chunks, 2);
    kv->release(table);
    return kv;
  };
  {
    auto kv = run(RetentionPolicy::kLru);
    EXPECT_EQ(kv->n_cached_blocks(Tier::kDevice), 2u);
    EXPECT_EQ(kv->match_prefix(1, a, 2).table.size(), 2u);  // A whole
    EXPECT_TRUE(kv->match_prefix(1, b, 2).table.empty());    // B gone
  }
  {
    auto kv = run(RetentionPolicy::kPensieve);
    EXPECT_EQ(kv->n_cached_blocks(Tier::kDevice), 2u);
    EXPECT_EQ(kv->n_dropped_chunks(), 2u);  // the heads: tokens known, KV gone
    const PrefixMatch ma = kv->match_prefix(1, a, 2);
    EXPECT_EQ(ma.table.size(), 2u);
    EXPECT_EQ(ma.recompute, std::vector<int32_t>{0});
    EXPECT_EQ(ma.device_chunks, 1);
    EXPECT_TRUE(holds_pattern(*kv, ma.table[1], 102));
  }
}

TEST_F(KvManagerTest, ChunksCascadeDeviceToHostToDiskAndComeBackIntact) {
  TempDir dir;
  KvPoolConfig c = config(2, 1);
  auto opened = DiskTier::open(dir.path, 42, tiny_layout().block_bytes(), 1 << 20);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  std::shared_ptr<DiskTier> disk = std::move(*opened);
  c.disk = disk;
  KvManager kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 4);
  run_and_cache(kv, 7, a);  // written through to disk
  kv.end_background_work();
  disk->flush();
  kv.begin_background_work();  // takes the finished writes in
  kv.end_background_work();
  EXPECT_EQ(kv.counters().disk_written_chunks, 2);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDisk), 2u);
  // A new sequence needs the whole device: both chunks leave it for free (they are on disk).
  std::vector<BlockId> table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 0u);
  EXPECT_EQ(kv.counters().demoted_chunks, 0);  // no copy was needed
  EXPECT_EQ(kv.counters().dropped_chunks, 0);
  kv.release(table);
  const PrefixMatch m = kv.match_prefix(7, a, 2);
  ASSERT_EQ(m.table.size(), 2u);
  EXPECT_EQ(m.disk_chunks, 2);
  EXPECT_TRUE(m.recompute.empty());
  EXPECT_TRUE(holds_pattern(kv, m.table[0], 10));
  EXPECT_TRUE(holds_pattern(kv, m.table[1], 12));
  EXPECT_EQ(kv.counters().bytes_disk_to_device, 2 * static_cast<int64_t>(tiny_layout().block_bytes()));
}

TEST_F(KvManagerTest, WithoutLowerTiersTheLeastValuableChunksAreDroppedAndRecomputed) {
  KvManager kv(tiny_layout(), config(3, 1));
  const auto a = tokens_from(10, 6);  // 3 chunks fill the device
  run_and_cache(kv, 7, a);
  clock_ += 5;
  std::vector<BlockId> table;
  // Two blocks: the head (lowest value) moves to the host; then chunk 1 must leave too, and with
  // the host full, the head's host copy (still the lowest value) makes way for it: the head is
  // dropped, its tokens kept in the index.
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  EXPECT_EQ(kv.counters().demoted_chunks, 2);
  EXPECT_EQ(kv.counters().dropped_chunks, 1);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kHost), 1u);
  EXPECT_EQ(kv.n_dropped_chunks(), 1u);
  kv.release(table);
  // The next match recomputes the head and reuses the rest from host and device.
  const PrefixMatch m = kv.match_prefix(7, a, 3);
  ASSERT_EQ(m.table.size(), 3u);
  EXPECT_EQ(m.recompute, std::vector<int32_t>{0});
  EXPECT_EQ(m.host_chunks, 1);
  EXPECT_EQ(m.device_chunks, 1);
  EXPECT_TRUE(holds_pattern(kv, m.table[1], 12));
  EXPECT_TRUE(holds_pattern(kv, m.table[2], 14));
}

TEST_F(KvManagerTest, ChunksWithAHostCopyLeaveTheDeviceWithoutACopy) {
  KvManager kv(tiny_layout(), config(2, 4));
  const auto a = tokens_from(10, 4);
  run_and_cache(kv, 7, a);
  std::vector<BlockId> table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));  // both demoted (copied)
  EXPECT_EQ(kv.counters().demoted_chunks, 2);
  kv.release(table);
  PrefixMatch m = kv.match_prefix(7, a, 2);  // back from the host; the host copies stay
  EXPECT_EQ(m.host_chunks, 2);
  kv.release(m.table);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kHost), 2u);
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  EXPECT_EQ(kv.counters().demoted_chunks, 2);  // unchanged: reclaimed for free
  EXPECT_EQ(kv.counters().evicted_chunks, 4);
}

TEST_F(KvManagerTest, CopiesAheadOfNeedKeepAQuarterOfTheDeviceReclaimable) {
  KvPoolConfig c = config(8, 8);
  c.swap_out_threshold = 0.25f;  // 2 of 8 blocks
  KvManager kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 14);  // 7 chunks: 1 block free
  run_and_cache(kv, 7, a);
  EXPECT_EQ(kv.n_free(), 1);
  kv.begin_background_work();
  kv.end_background_work();
  EXPECT_EQ(kv.counters().ahead_copied_chunks, 1);  // 1 free + 1 clean = 2
  EXPECT_EQ(kv.n_cached_blocks(Tier::kHost), 1u);
  EXPECT_EQ(kv.n_free(), 1);  // reclaimed lazily, not now
  std::vector<BlockId> table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  EXPECT_EQ(kv.counters().demoted_chunks, 0);  // the clean chunk left for free
  kv.release(table);
  // The copy is the head chunk's (lowest value) and it comes back intact.
  const PrefixMatch m = kv.match_prefix(7, a, 7);
  EXPECT_EQ(m.host_chunks, 1);
  EXPECT_TRUE(holds_pattern(kv, m.table[0], 10));
}

TEST_F(KvManagerTest, DamagedDiskExtentsAreRecomputedNeverServed) {
  TempDir dir;
  KvPoolConfig c = config(2, 0);
  std::shared_ptr<DiskTier> disk = std::move(*DiskTier::open(dir.path, 42, tiny_layout().block_bytes(), 1 << 20));
  c.disk = disk;
  KvManager kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 4);
  run_and_cache(kv, 7, a);
  disk->flush();
  kv.begin_background_work();
  kv.end_background_work();
  std::vector<BlockId> table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));  // both leave the device (they are on disk)
  kv.release(table);
  // Flip one payload byte of every extent.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    std::FILE* f = std::fopen(entry.path().c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -1, SEEK_END);
    const int byte = std::fgetc(f);
    std::fseek(f, -1, SEEK_END);
    std::fputc(byte ^ 0x5a, f);
    std::fclose(f);
  }
  const PrefixMatch m = kv.match_prefix(7, a, 2);
  EXPECT_EQ(kv.counters().disk_corrupt_chunks, 2);
  EXPECT_EQ(m.disk_chunks, 0);
  EXPECT_TRUE(m.table.empty());  // both to recompute, at the end of the match: plain new tokens
}

TEST_F(KvManagerTest, TheIndexIsRebuiltFromTheDiskTierAfterARestart) {
  TempDir dir;
  const auto a = tokens_from(10, 6);
  const auto b = tokens_from(10, 4);  // a's first 2 chunks, but cached under another namespace
  {
    KvPoolConfig c = config(4, 0);
    c.disk = std::move(*DiskTier::open(dir.path, 42, tiny_layout().block_bytes(), 1 << 20));
    KvManager kv(tiny_layout(), std::move(c));
    run_and_cache(kv, 7, a);
    run_and_cache(kv, 8, b);  // another namespace: its own chunks
  }  // destroyed without a clean index save: only the extents remain
  KvPoolConfig c = config(4, 0);
  c.disk = std::move(*DiskTier::open(dir.path, 42, tiny_layout().block_bytes(), 1 << 20));
  KvManager kv(tiny_layout(), std::move(c));
  EXPECT_EQ(kv.restore_from_disk(), 5u);
  PrefixMatch m = kv.match_prefix(7, a, 3);
  ASSERT_EQ(m.table.size(), 3u);
  EXPECT_EQ(m.disk_chunks, 3);
  EXPECT_TRUE(holds_pattern(kv, m.table[2], 14));
  kv.release(m.table);
  EXPECT_EQ(kv.match_prefix(8, b, 2).disk_chunks, 2);
  EXPECT_TRUE(kv.match_prefix(9, b, 2).table.empty());  // no namespace leaks
  // Another model's layout (fingerprint) sees nothing.
  KvPoolConfig other = config(4, 0);
  other.disk = std::move(*DiskTier::open(dir.path, 43, tiny_layout().block_bytes(), 1 << 20));
  KvManager foreign(tiny_layout(), std::move(other));
  EXPECT_EQ(foreign.restore_from_disk(), 0u);
}

}  // namespace
}  // namespace mnemo
