// KvCache for a sliding-window model, without a model: exact states of compact history (a
// chunk a window before its conversation's end keeps its global layers only) on the host, on the
// device in slots of shared blocks, on disk across a restart; which chunks a match may reuse;
// the eviction order that keeps compact history usable; and random turns through every tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "kv/kv_cache.h"
#include "kv_test_support.h"

namespace mnemo {
namespace {

using testing::tiny_layout;
using testing::tokens_from;

// A sliding-window model in miniature: 3 layers, layers 0 and 1 local with a 4-token window,
// layer 2 global; 2 tokens per block. A chunk is compactable when it ends 4 or more tokens before
// its conversation's end: of an 8-chunk conversation, chunks 0..5.
class CompactKvTest : public ::testing::Test {
 protected:
  static KvLayout layout() {
    KvLayout l = tiny_layout();
    l.n_layers = 3;
    return l;
  }
  // `on_device`: compact copies are kept on the device too, three to a block, before they leave it.
  KvPoolConfig config(int32_t device, int32_t host, int32_t compact, bool on_device = false) {
    KvPoolConfig c;
    c.device_blocks = device;
    c.host_blocks = host;
    c.host_compact_blocks = compact;
    c.sliding_window = 4;
    c.global_layers = {2};
    c.compact_on_device = on_device;
    c.swap_out_threshold = 0;
    c.clock = [this] { return clock_; };
    return c;
  }
  static size_t layer_floats() { return layout().layer_elems(); }
  static void fill(KvCache& kv, BlockId block, TokenId first) {
    auto* f = reinterpret_cast<float*>(kv.device().block(block));
    for (size_t i = 0; i < layout().block_elems(); ++i) f[i] = static_cast<float>(first) + 0.001f * static_cast<float>(i);
  }
  // Whole (all layers) or global layer only, with the local layers zero.
  static bool holds(KvCache& kv, BlockId block, TokenId first, bool whole) {
    const auto* f = reinterpret_cast<const float*>(kv.device().block(block));
    for (size_t i = 0; i < layout().block_elems(); ++i) {
      const bool global = i >= 2 * layer_floats();
      const float want = whole || global ? static_cast<float>(first) + 0.001f * static_cast<float>(i) : 0.0f;
      if (f[i] != want) return false;
    }
    return true;
  }
  static void run_and_cache(KvCache& kv, const std::vector<TokenId>& tokens) {
    KvTable table;
    ASSERT_TRUE(kv.prepare_write(table, 0, static_cast<int32_t>(tokens.size())));
    for (size_t b = 0; b < table.size(); ++b) fill(kv, table[b], tokens[b * 2]);
    kv.cache_prefix(0, tokens, static_cast<int32_t>(tokens.size()), table);
    kv.release(table);
  }
  // The conversation continues: its tokens and one more.
  static std::vector<TokenId> next_turn(std::vector<TokenId> conversation) {
    conversation.push_back(7);
    return conversation;
  }
  static void flush_disk(KvCache& kv, DiskTier& disk) {
    disk.flush();
    kv.begin_background_work();
    kv.end_background_work();
  }
  double clock_ = 1000;
};

TEST_F(CompactKvTest, HistoryAWindowBeforeTheEndKeepsOnlyItsGlobalLayersOnTheHost) {
  KvCache kv(layout(), config(8, 2, 16));
  const auto conversation = tokens_from(100, 16);  // 8 chunks
  run_and_cache(kv, conversation);
  clock_ += 10;
  KvTable other;
  ASSERT_TRUE(kv.prepare_write(other, 0, 16));  // the whole device: every chunk leaves it
  kv.release(other);
  EXPECT_EQ(kv.n_host_compact_free(), 16 - 6);  // chunks 0..5 compact
  EXPECT_EQ(kv.n_host_free(), 0);               // chunks 6 and 7 whole: the last window
  EXPECT_EQ(kv.counters().dropped_chunks, 0);
  EXPECT_EQ(kv.counters().bytes_device_to_host,
            static_cast<int64_t>(6 * kv.compact_bytes() + 2 * layout().block_bytes()));
  // The conversation continues: every chunk is reused; the old ones with their global layer only.
  const auto next = next_turn(conversation);
  PrefixMatch m = kv.match_prefix(0, next, 8);
  ASSERT_EQ(m.table.size(), 8u);
  EXPECT_TRUE(m.recompute.empty());
  EXPECT_EQ(m.partial, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(m.host_chunks, 8);
  for (int32_t p = 0; p < 8; ++p) EXPECT_TRUE(holds(kv, m.table[static_cast<size_t>(p)], 100 + 2 * p, p >= 6)) << p;
  // Offered back, the partial blocks are not adopted: the index still has no device copy of them.
  kv.cache_prefix(0, next, 16, m.table, m.partial);
  kv.release(m.table);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 2u);
}

TEST_F(CompactKvTest, HistoryAWindowBeforeTheEndShrinksOnTheDeviceFirst) {
  KvCache kv(layout(), config(10, 0, 0, /*on_device=*/true));
  const auto conversation = tokens_from(100, 16);  // 8 chunks in blocks 0..7
  run_and_cache(kv, conversation);
  EXPECT_EQ(kv.n_free(), 2);
  clock_ += 10;
  KvTable other;
  ASSERT_TRUE(kv.prepare_write(other, 0, 8));  // 4 blocks: 2 more than are free
  // Chunk 0's block became a slab holding it; chunks 1 and 2 joined it and freed their blocks.
  // Nothing left the device, and nothing was dropped.
  EXPECT_EQ(kv.counters().device_compacted_chunks, 3);
  EXPECT_EQ(kv.n_device_slabs(), 1);
  EXPECT_EQ(kv.n_device_slots_used(), 3);
  EXPECT_EQ(kv.n_free(), 0);
  EXPECT_EQ(kv.n_available(), 5 + 1);  // chunks 3..7's blocks, and the slab
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 5u);
  EXPECT_EQ(kv.counters().evicted_chunks, 0);
  EXPECT_EQ(kv.counters().bytes_device_to_host, 0);
  kv.release(other);
  // The next turn reuses all of it from the device; chunks 0..2 with their global layer only.
  const auto next = next_turn(conversation);
  PrefixMatch m = kv.match_prefix(0, next, 8);
  ASSERT_EQ(m.table.size(), 8u);
  EXPECT_TRUE(m.recompute.empty());
  EXPECT_EQ(m.partial, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.device_chunks, 8);
  for (int32_t p = 0; p < 8; ++p) EXPECT_TRUE(holds(kv, m.table[static_cast<size_t>(p)], 100 + 2 * p, p >= 3)) << p;
  kv.cache_prefix(0, next, 16, m.table, m.partial);
  kv.release(m.table);
  EXPECT_EQ(kv.n_device_slots_used(), 3);  // the partial blocks were not adopted
  // Deleting the conversation frees the slots, and the slab's block with them.
  EXPECT_EQ(kv.forget(0, next, 0), 8);
  EXPECT_EQ(kv.n_device_slabs(), 0);
  EXPECT_EQ(kv.n_free(), 10);
}

TEST_F(CompactKvTest, DeviceSlotsLeaveForTheHostAndASlabDrainsIntoAnother) {
  KvPoolConfig c = config(10, 2, 16, /*on_device=*/true);
  c.policy = RetentionPolicy::kLru;
  KvCache kv(layout(), std::move(c));
  const auto conversation = tokens_from(100, 14);  // 7 chunks; 0..4 compactable
  run_and_cache(kv, conversation);
  clock_ += 10;
  KvTable other;
  // 7 blocks. Chunks 0..4 shrink: slab A (block 0) holds 0..2, slab B (block 3) holds 3 and 4,
  // 6 blocks free. Then the oldest-leading copies leave: chunk 0's slot to the host, then chunk
  // 1's; slab A's last copy (chunk 2) fits B's free slot, and A's block goes back.
  ASSERT_TRUE(kv.prepare_write(other, 0, 14));
  EXPECT_EQ(kv.counters().device_compacted_chunks, 5);
  EXPECT_EQ(kv.counters().evicted_chunks, 2);
  EXPECT_EQ(kv.counters().dropped_chunks, 0);
  EXPECT_EQ(kv.n_device_slabs(), 1);
  EXPECT_EQ(kv.n_device_slots_used(), 3);
  EXPECT_EQ(kv.n_host_compact_free(), 16 - 2);
  EXPECT_EQ(kv.counters().bytes_device_to_host, static_cast<int64_t>(2 * kv.compact_bytes()));
  EXPECT_EQ(kv.n_free(), 0);
  kv.release(other);
  const auto next = next_turn(conversation);
  const PrefixMatch m = kv.match_prefix(0, next, 7);
  ASSERT_EQ(m.table.size(), 7u);
  EXPECT_TRUE(m.recompute.empty());
  EXPECT_EQ(m.partial, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(m.host_chunks, 2);
  EXPECT_EQ(m.device_chunks, 5);
  for (int32_t p = 0; p < 7; ++p) EXPECT_TRUE(holds(kv, m.table[static_cast<size_t>(p)], 100 + 2 * p, p >= 5)) << p;
}

// The retention value is per byte of the conversation, not of each copy: otherwise the last
// window's whole blocks (three times a slot's bytes here) would go before the compact history,
// and recomputing them would need the local layers of all that history (nothing reusable).
TEST_F(CompactKvTest, AConversationLosesItsLeadingChunksFirstNotItsLastWindow) {
  KvCache kv(layout(), config(10, 0, 0, /*on_device=*/true));  // the mnemo policy
  const auto conversation = tokens_from(100, 16);
  run_and_cache(kv, conversation);
  clock_ += 10;
  KvTable other;
  // 7 blocks: chunks 0..5 shrink into two slabs (6 free), then chunks 0..2 are dropped.
  ASSERT_TRUE(kv.prepare_write(other, 0, 14));
  EXPECT_EQ(kv.counters().dropped_chunks, 3);
  EXPECT_EQ(kv.n_device_slots_used(), 3);
  kv.release(other);
  const auto next = next_turn(conversation);
  const PrefixMatch m = kv.match_prefix(0, next, 8);
  ASSERT_EQ(m.table.size(), 8u);
  EXPECT_EQ(m.recompute, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.partial, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(m.device_chunks, 5);
}

// Random turns of random conversations through a small pool with every tier (device slabs,
// host, compact host): whatever a match hands back holds exactly that chunk's KV (whole, or its
// global layer for a partial chunk), and every device block is free, an indexed copy, or a slab.
TEST_F(CompactKvTest, RandomTurnsKeepEveryCopyIntactAndEveryBlockAccountedFor) {
  for (const RetentionPolicy policy : {RetentionPolicy::kLru, RetentionPolicy::kMnemo}) {
    KvPoolConfig c = config(24, 6, 10, /*on_device=*/true);
    c.policy = policy;
    KvCache kv(layout(), std::move(c));
    std::mt19937 rng(7);
    std::vector<int32_t> length(6, 0);  // tokens of each conversation so far
    int64_t reused = 0;
    int64_t partial = 0;
    for (int step = 0; step < 400; ++step) {
      clock_ += 1 + static_cast<double>(rng() % 20);
      const auto conv = static_cast<size_t>(rng() % length.size());
      if (rng() % 10 == 0 && length[conv] > 0) {  // the conversation is deleted
        kv.forget(0, tokens_from(1000 * static_cast<TokenId>(conv + 1), length[conv]), 0);
        length[conv] = 0;
        continue;
      }
      const int32_t total = std::min(40, length[conv] + 2 + static_cast<int32_t>(rng() % 9));
      const auto tokens = tokens_from(1000 * static_cast<TokenId>(conv + 1), total);
      PrefixMatch m = kv.match_prefix(0, tokens, (total - 1) / 2);
      for (size_t p = 0; p < m.table.size(); ++p) {
        const bool recomputed = std::find(m.recompute.begin(), m.recompute.end(), static_cast<int32_t>(p)) != m.recompute.end();
        if (recomputed) {
          fill(kv, m.table[p], tokens[p * 2]);
          continue;
        }
        const bool is_partial = std::find(m.partial.begin(), m.partial.end(), static_cast<int32_t>(p)) != m.partial.end();
        ASSERT_TRUE(holds(kv, m.table[p], tokens[p * 2], !is_partial)) << "step " << step << " chunk " << p;
        ++reused;
        partial += is_partial ? 1 : 0;
      }
      KvTable table = std::move(m.table);
      const auto begin = static_cast<int32_t>(table.size()) * 2;
      if (!kv.prepare_write(table, begin, total)) {  // no room: the turn is refused
        kv.release(table);
        continue;
      }
      for (size_t b = static_cast<size_t>(begin / 2); b < table.size(); ++b) fill(kv, table[b], tokens[b * 2]);
      kv.cache_prefix(0, tokens, total, table, m.partial);
      kv.release(table);
      length[conv] = total;
      ASSERT_EQ(kv.n_free() + static_cast<int32_t>(kv.n_cached_blocks(Tier::kDevice)) + kv.n_device_slabs(), kv.n_blocks())
          << "step " << step;
      ASSERT_LE(kv.n_device_slots_used(), 3 * kv.n_device_slabs());
      ASSERT_GT(kv.n_device_slots_used(), 3 * (kv.n_device_slabs() - 1)) << "a slab that could drain into another";
      ASSERT_EQ(kv.n_host_blocks() - kv.n_host_free() + kv.n_host_compact_used(),
                static_cast<int32_t>(kv.n_cached_blocks(Tier::kHost)));
    }
    EXPECT_GT(reused, 100);
    EXPECT_GT(partial, 10);
    EXPECT_GT(kv.counters().device_compacted_chunks, 10);
    EXPECT_GT(kv.counters().dropped_chunks, 0);
  }
}

TEST_F(CompactKvTest, AMatchEndingWithinAWindowOfCompactHistoryRecomputesIt) {
  KvCache kv(layout(), config(8, 2, 16));
  run_and_cache(kv, tokens_from(100, 16));
  KvTable other;
  ASSERT_TRUE(kv.prepare_write(other, 0, 16));
  kv.release(other);
  // Another request shares only the first 4 chunks, then diverges: its new tokens' windows
  // reach into compact chunks 2 and 3, whose recompute reaches into 0 and 1: nothing is usable.
  auto branch = tokens_from(100, 8);
  branch.push_back(1);
  EXPECT_TRUE(kv.match_prefix(0, branch, 4).table.empty());
  // Sharing 6 chunks: chunks 4 and 5 are compact and within the window of position 12: the same.
  auto longer = tokens_from(100, 12);
  longer.push_back(1);
  EXPECT_TRUE(kv.match_prefix(0, longer, 6).table.empty());
}

TEST_F(CompactKvTest, CompactExtentsOnDiskSurviveARestart) {
  char tmpl[] = "/tmp/mnemo-compact-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  KvLayout compact_layout = layout();
  compact_layout.n_layers = 1;
  const auto open = [&] {
    return std::shared_ptr<DiskTier>(
        std::move(*DiskTier::open(dir, 9, layout().block_bytes(), 1 << 20, compact_layout.block_bytes())));
  };
  const auto conversation = tokens_from(100, 16);
  {
    KvPoolConfig c = config(8, 0, 0);
    auto disk = open();
    c.disk = disk;
    KvCache kv(layout(), std::move(c));
    run_and_cache(kv, conversation);  // written through: chunks 0..5 compact, 6..7 whole
    flush_disk(kv, *disk);
    EXPECT_EQ(kv.counters().bytes_to_disk,
              static_cast<int64_t>(6 * compact_layout.block_bytes() + 2 * layout().block_bytes()));
  }
  KvPoolConfig c = config(8, 0, 0);
  c.disk = open();
  KvCache kv(layout(), std::move(c));
  EXPECT_EQ(kv.restore_from_disk(), 8u);
  const auto next = next_turn(conversation);
  const PrefixMatch m = kv.match_prefix(0, next, 8);
  ASSERT_EQ(m.table.size(), 8u);
  EXPECT_EQ(m.disk_chunks, 8);
  EXPECT_EQ(m.partial, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  for (int32_t p = 0; p < 8; ++p) EXPECT_TRUE(holds(kv, m.table[static_cast<size_t>(p)], 100 + 2 * p, p >= 6)) << p;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mnemo
