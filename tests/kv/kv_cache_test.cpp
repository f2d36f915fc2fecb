// KvCache without a model: exact states of the tiers under the retention policy (Pensieve's
// value vs LRU), the cascade device -> host -> disk -> dropped, free reclaim of chunks with a copy
// below, copies ahead of need, dropped leading chunks handed back for recompute, damaged disk
// extents never served, and the index rebuilt from the disk tier.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <type_traits>

#include "kv/kv_cache.h"
#include "kv/prefix_index.h"
#include "kv_test_support.h"

namespace mnemo::testing {
namespace {

static_assert(!std::is_copy_constructible_v<KvTable>, "a copied table would hold references it does not own");

TEST_F(KvCacheTest, ASwappedTableMovesToTheHostAndBackWithItsBytesAndReferences) {
  KvCache kv(tiny_layout(), config(4, 4));
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 6));  // 3 chunks of 2 tokens
  for (size_t b = 0; b < table.size(); ++b) fill(kv, table[b], static_cast<TokenId>(40 + 2 * b));
  ASSERT_TRUE(kv.swap_out(table));
  EXPECT_TRUE(table.on_host());
  EXPECT_EQ(table.size(), 3u);
  // Host block ids name no device block: growing a swapped table needs every block of the range.
  EXPECT_EQ(kv.blocks_needed(table, 0, 6), 3);
  EXPECT_EQ(kv.blocks_needed(table, 4, 8), 2);
  EXPECT_EQ(kv.n_free(), 4);
  EXPECT_EQ(kv.n_host_free(), 1);
  KvTable moved = std::move(table);  // the references travel with the move
  EXPECT_TRUE(table.empty());
  ASSERT_TRUE(kv.swap_in(moved));
  EXPECT_FALSE(moved.on_host());
  EXPECT_EQ(kv.n_host_free(), 4);
  EXPECT_EQ(kv.n_free(), 1);
  for (size_t b = 0; b < moved.size(); ++b) EXPECT_TRUE(holds_pattern(kv, moved[b], static_cast<TokenId>(40 + 2 * b))) << b;
  // A shared table costs no blocks until one side writes (copy-on-write).
  KvTable fork = kv.share(moved);
  EXPECT_EQ(kv.n_free(), 1);
  EXPECT_EQ(kv.blocks_needed(fork, 4, 6), 1);
  ASSERT_TRUE(kv.prepare_write(fork, 4, 6));
  EXPECT_NE(fork[2], moved[2]);
  EXPECT_EQ(fork[0], moved[0]);
  EXPECT_TRUE(holds_pattern(kv, fork[2], 44));
  kv.release(fork);
  kv.release(moved);
  EXPECT_EQ(kv.n_free(), 4);
}

TEST_F(KvCacheTest, ASwapOutWithoutHostRoomChangesNothing) {
  KvCache kv(tiny_layout(), config(4, 1));
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  const BlockId first = table[0];
  EXPECT_FALSE(kv.swap_out(table));
  EXPECT_FALSE(table.on_host());
  EXPECT_EQ(table[0], first);
  EXPECT_EQ(kv.n_host_free(), 1);
  kv.release(table);
  EXPECT_EQ(kv.n_free(), 4);
}

TEST_F(KvCacheTest, RetentionOrderDiffersBetweenPensieveAndLru) {
  // Pool of 4 blocks full with A (2 chunks, idle 10 s) and B (2 chunks, idle 12 s). Two blocks
  // are needed. LRU takes B's two chunks (older). Pensieve takes B's head (V = c0/12), then A's
  // head (V = c0/10 < B's tail c1/12, since a chunk at position 1 costs 3x one at position 0
  // here): every conversation keeps its tail, the heads are recomputed later (SPEC P5).
  const auto a = tokens_from(100, 4);
  const auto b = tokens_from(200, 4);
  const auto run = [&](RetentionPolicy policy) {
    clock_ = 1000;
    auto kv = std::make_unique<KvCache>(tiny_layout(), config(4, 0, policy));
    run_and_cache(*kv, 1, b);
    clock_ += 2;
    run_and_cache(*kv, 1, a);
    clock_ += 10;
    KvTable table;
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

TEST_F(KvCacheTest, MnemoRetentionBeforeItHasLearntAnythingIsLru) {
  // The setup above: with no observation every conversation of a length is alike, and the
  // older one goes first, as under LRU.
  clock_ = 1000;
  KvCache kv(tiny_layout(), config(4, 0, RetentionPolicy::kMnemo));
  const auto a = tokens_from(100, 4);
  const auto b = tokens_from(200, 4);
  run_and_cache(kv, 1, b);
  clock_ += 2;
  run_and_cache(kv, 1, a);
  clock_ += 10;
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  kv.release(table);
  EXPECT_EQ(kv.counters().dropped_chunks, 2);
  EXPECT_EQ(kv.match_prefix(1, a, 2).device_chunks, 2);  // A whole
  EXPECT_TRUE(kv.match_prefix(1, b, 2).table.empty());     // B gone
}

// A and B, 3 chunks each: a shared system prompt (chunk S), then 2 of their own.
std::pair<std::vector<TokenId>, std::vector<TokenId>> two_conversations_sharing_a_prompt() {
  std::vector<TokenId> a = tokens_from(1, 2);
  std::vector<TokenId> b = a;
  for (TokenId t : tokens_from(100, 4)) a.push_back(t);
  for (TokenId t : tokens_from(200, 4)) b.push_back(t);
  return {a, b};
}

// Two conversations share a system prompt (chunk S); B, the newer, is ended by its client. Its own
// chunks are marked, the shared one is not, and under the learnt policy B's own chunks leave
// before A's older ones; under LRU the end changes nothing.
TEST_F(KvCacheTest, AnEndedConversationsOwnChunksLeaveFirst) {
  for (const RetentionPolicy policy : {RetentionPolicy::kMnemo, RetentionPolicy::kLru}) {
    clock_ = 1000;
    KvCache kv(tiny_layout(), config(5, 0, policy));
    const auto [a, b] = two_conversations_sharing_a_prompt();
    run_and_cache(kv, 1, a);
    clock_ += 2;
    run_and_cache(kv, 1, b);
    EXPECT_EQ(kv.end_conversation(1, b), 2);  // B1, B2: S has two branches below it
    EXPECT_EQ(kv.counters().ended_chunks, 2);
    EXPECT_EQ(kv.end_conversation(2, b), 0);  // another tenant's namespace holds nothing
    clock_ += 10;
    KvTable table;
    ASSERT_TRUE(kv.prepare_write(table, 0, 4));  // 2 blocks: two chunks must go
    kv.release(table);
    EXPECT_EQ(kv.counters().dropped_chunks, 2);
    const bool ended_first = policy == RetentionPolicy::kMnemo;
    EXPECT_EQ(kv.match_prefix(1, a, 3).device_chunks, ended_first ? 3 : 1) << ended_first;
    EXPECT_EQ(kv.match_prefix(1, b, 3).device_chunks, ended_first ? 1 : 3) << ended_first;
  }
}

// Two conversations share a system prompt; A, the older, is kept alive by its client (a ttl of
// 60 s): every policy that honours pins takes B's own chunks first while the pin holds, A's once
// it has run out. The pin covers A's whole path, the shared chunk included.
TEST_F(KvCacheTest, APinnedConversationIsKeptUntilItsTtlRunsOut) {
  for (const RetentionPolicy policy : {RetentionPolicy::kMnemo, RetentionPolicy::kLru, RetentionPolicy::kPensieve}) {
    for (const double wait : {10.0, 100.0}) {
      // Past the pin Pensieve's order weighs positions too; only LRU-like orders are checked there.
      if (policy == RetentionPolicy::kPensieve && wait > 60) continue;
      clock_ = 1000;
      KvCache kv(tiny_layout(), config(5, 0, policy));
      const auto [a, b] = two_conversations_sharing_a_prompt();
      run_and_cache(kv, 1, a);
      EXPECT_EQ(kv.pin_conversation(1, a, 60), 3);
      EXPECT_EQ(kv.pin_conversation(2, a, 60), 0);  // another tenant's namespace holds nothing
      EXPECT_EQ(kv.n_pinned_chunks(), 3u);
      clock_ += 2;
      run_and_cache(kv, 1, b);
      clock_ += wait;
      KvTable table;
      ASSERT_TRUE(kv.prepare_write(table, 0, 4));  // 2 blocks: two chunks must go
      kv.release(table);
      const bool pinned = wait < 60;
      EXPECT_EQ(kv.n_pinned_chunks(), pinned ? 3u : 0u);
      EXPECT_EQ(kv.match_prefix(1, a, 3).device_chunks, pinned ? 3 : 1) << static_cast<int>(policy) << " " << wait;
      EXPECT_EQ(kv.match_prefix(1, b, 3).device_chunks, pinned ? 1 : 3) << static_cast<int>(policy) << " " << wait;
    }
  }
}

// A conversation's chunks are dropped, and the conversation comes back. Without ghosts the drop
// ends their observation (censored: the model saw them leave, never return); with ghosts the
// index keeps them, and the return is what the model sees.
TEST_F(KvCacheTest, WithGhostsADroppedConversationsReturnIsObserved) {
  for (const int32_t ghosts : {0, 4}) {
    clock_ = 1000;
    KvPoolConfig c = config(4, 0, RetentionPolicy::kMnemo);
    c.ghosts_per_chunk = ghosts;
    KvCache kv(tiny_layout(), c);
    const auto a = tokens_from(100, 4);
    run_and_cache(kv, 1, a);  // A0, A1 idle from 1000: one pending group
    EXPECT_EQ(kv.retention_model().pending_groups(), 1u);
    clock_ += 10;
    KvTable table;
    ASSERT_TRUE(kv.prepare_write(table, 0, 8));  // all 4 blocks: A's 2 chunks dropped
    kv.release(table);
    EXPECT_EQ(kv.counters().dropped_chunks, 2);
    EXPECT_EQ(kv.retention_model().pending_groups(), ghosts == 0 ? 0u : 1u) << ghosts;
    clock_ += 10;
    const PrefixMatch back = kv.match_prefix(1, a, 2);
    EXPECT_TRUE(back.table.empty());  // nothing to bring back: both are recomputed
    EXPECT_EQ(kv.retention_model().pending_groups(), 0u) << ghosts;
    EXPECT_EQ(kv.n_dropped_chunks(), ghosts == 0 ? 0u : 2u) << ghosts;
  }
}

// Rounds of two conversations on a 10-block device: a short one (2 chunks) that comes back 50 s
// later, and a long one (8 chunks) that never does. Each round's conversations push out the
// previous round's. Then a short conversation idle for 40 s and a long one idle for 10 s share
// the device, and a new sequence needs 2 blocks: which conversation loses them?
std::vector<TokenId> conversation_tokens(int round, bool long_one) {
  return tokens_from(10000 * (round + 1) + (long_one ? 5000 : 0), long_one ? 16 : 4);
}

TEST_F(KvCacheTest, MnemoRetentionLearnsWhichConversationsReturnAndKeepsThem) {
  const auto run = [&](RetentionPolicy policy) {
    clock_ = 1000;
    KvPoolConfig c = config(10, 0, policy);
    // The cache acting on what the model learnt, not the model's significance gate (its own tests
    // cover it): 24 rounds without ghosts are too little evidence to pass the default gate.
    c.retention.class_split_statistic = 0;
    auto kv = std::make_unique<KvCache>(tiny_layout(), c);
    constexpr int kRounds = 24;
    for (int r = 0; r < kRounds; ++r) {
      run_and_cache(*kv, 1, conversation_tokens(r, false));
      run_and_cache(*kv, 1, conversation_tokens(r, true));
      clock_ += 50;
      PrefixMatch back = kv->match_prefix(1, conversation_tokens(r, false), 2);
      EXPECT_EQ(back.device_chunks, 2) << "round " << r;  // the short one is still there
      KvTable table = std::move(back.table);
      kv->cache_prefix(1, conversation_tokens(r, false), 4, table);
      kv->release(table);
      clock_ += 150;
    }
    run_and_cache(*kv, 1, conversation_tokens(kRounds, false));
    clock_ += 30;
    run_and_cache(*kv, 1, conversation_tokens(kRounds, true));
    clock_ += 10;
    KvTable table;
    EXPECT_TRUE(kv->prepare_write(table, 0, 4));
    kv->release(table);
    return kv;
  };
  {
    auto kv = run(RetentionPolicy::kMnemo);
    const RetentionModel& model = kv->retention_model();
    EXPECT_GT(model.return_probability(model.class_of(2)), 0.5);
    EXPECT_LT(model.return_probability(model.class_of(8)), 0.2);
    // The short conversation is kept whole; the long one loses its two leading chunks.
    EXPECT_EQ(kv->match_prefix(1, conversation_tokens(24, false), 2).device_chunks, 2);
    const PrefixMatch long_match = kv->match_prefix(1, conversation_tokens(24, true), 8);
    EXPECT_EQ(long_match.recompute, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(long_match.device_chunks, 6);
  }
  {
    auto kv = run(RetentionPolicy::kLru);  // the older conversation goes
    EXPECT_TRUE(kv->match_prefix(1, conversation_tokens(24, false), 2).table.empty());
    EXPECT_EQ(kv->match_prefix(1, conversation_tokens(24, true), 8).device_chunks, 8);
  }
}

TEST_F(KvCacheTest, AConversationIsForgottenWhenNothingOfItIsLeft) {
  // As above: two blocks needed from a pool full with A and B. LRU drops B whole, so the index
  // forgets its first chunk and the cache names B; Pensieve drops both heads and keeps both
  // tails, so both conversations are still there (their heads recomputed when they return).
  const auto a = tokens_from(100, 4);
  const auto b = tokens_from(200, 4);
  const auto named = [](const std::vector<TokenId>& t) {
    return std::vector<std::pair<uint64_t, uint64_t>>{{1, PrefixIndex::chunk_key(0, 1, std::span(t).first(2))}};
  };
  for (const RetentionPolicy policy : {RetentionPolicy::kLru, RetentionPolicy::kPensieve}) {
    clock_ = 1000;
    KvCache kv(tiny_layout(), config(4, 0, policy));
    run_and_cache(kv, 1, b);
    clock_ += 2;
    run_and_cache(kv, 1, a);
    clock_ += 10;
    EXPECT_TRUE(kv.take_forgotten_conversations().empty());
    KvTable table;
    ASSERT_TRUE(kv.prepare_write(table, 0, 4));
    kv.release(table);
    if (policy == RetentionPolicy::kLru) {
      EXPECT_EQ(kv.take_forgotten_conversations(), named(b));
    } else {
      EXPECT_TRUE(kv.take_forgotten_conversations().empty());
    }
    // A delete lets the conversation go too; each is named once.
    EXPECT_GT(kv.forget(1, a, 0), 0);
    EXPECT_EQ(kv.take_forgotten_conversations(), named(a));
    EXPECT_TRUE(kv.take_forgotten_conversations().empty());
  }
}

TEST_F(KvCacheTest, ForgetDeletesAConversationFromEveryTierButSparesSharedAndRunningChunks) {
  TempDir dir;
  KvPoolConfig c = config(16, 4);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvCache kv(tiny_layout(), std::move(c));
  // A: 4 chunks. B shares A's first two, then branches. C is another conversation.
  const auto a = tokens_from(10, 8);
  auto b = a;
  b[4] = 99;
  const auto other = tokens_from(500, 4);
  run_and_cache(kv, 1, a);
  run_and_cache(kv, 1, b);
  run_and_cache(kv, 1, other);
  kv.end_background_work();
  disk->flush();
  kv.begin_background_work();
  kv.end_background_work();
  ASSERT_EQ(kv.n_cached_blocks(Tier::kDevice), 8u);  // 4 + 2 + 2
  ASSERT_EQ(kv.n_cached_blocks(Tier::kDisk), 8u);
  // Another namespace finds nothing to delete.
  EXPECT_EQ(kv.forget(2, a, 0), 0);
  // A is deleted keeping its first chunk: its chunks 2 and 3 go (device and disk); chunk 1 stays
  // (B goes through it), chunk 0 is kept.
  EXPECT_EQ(kv.forget(1, a, 1), 2);
  EXPECT_EQ(kv.counters().forgotten_chunks, 2);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 6u);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDisk), 6u);
  EXPECT_EQ(kv.n_free(), 16 - 6);
  PrefixMatch a_again = kv.match_prefix(1, a, 4);
  EXPECT_EQ(a_again.device_chunks, 2);
  kv.release(a_again.table);
  // B while a sequence still reads it: its chunks stay.
  PrefixMatch running = kv.match_prefix(1, b, 4);
  EXPECT_EQ(running.device_chunks, 4);
  EXPECT_EQ(kv.forget(1, b, 0), 0);
  kv.release(running.table);
  // A prompt whose re-rendered tail differs from what was cached: everything below its last
  // matching chunk goes with it. B's chunks 0-1 now have no other branch, so all 4 go.
  auto rendered = b;
  rendered[6] = 77;
  EXPECT_EQ(kv.forget(1, rendered, 0), 4);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 2u);  // the other conversation's
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDisk), 2u);
  EXPECT_EQ(kv.n_free(), 14);
  // Below a branch point (two conversations continue from a shared start), a delete whose
  // tokens end at the branch takes neither branch.
  auto left = tokens_from(700, 8);
  auto right = left;
  right[5] = 1;
  run_and_cache(kv, 1, left);
  run_and_cache(kv, 1, right);
  auto diverged = left;
  diverged[4] = 2;  // matches the shared two chunks only
  EXPECT_EQ(kv.forget(1, diverged, 0), 0);
  PrefixMatch right_again = kv.match_prefix(1, right, 4);
  EXPECT_EQ(right_again.device_chunks, 4);
  kv.release(right_again.table);
  PrefixMatch other_again = kv.match_prefix(1, other, 2);
  EXPECT_EQ(other_again.device_chunks, 2);
  kv.release(other_again.table);
}

TEST_F(KvCacheTest, ForgetWhileExtentsAreStillBeingWrittenDeletesThemOnceWritten) {
  TempDir dir;
  KvPoolConfig c = config(8, 0);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvCache kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 6);  // 3 chunks, written through; not yet taken in as durable
  run_and_cache(kv, 1, a);
  EXPECT_EQ(kv.forget(1, a, 0), 3);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 0u);
  EXPECT_EQ(kv.n_free(), 8);
  EXPECT_TRUE(kv.match_prefix(1, a, 3).table.empty());  // nothing readable is left
  disk->flush();
  kv.begin_background_work();  // takes the finished writes in: their extents are deleted
  kv.end_background_work();
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDisk), 0u);
  EXPECT_EQ(disk->used_bytes(), 0);
  disk->flush();  // the deletes themselves run on the writer thread
  EXPECT_EQ(disk->scan().size(), 0u);
}

TEST_F(KvCacheTest, ChunksCascadeDeviceToHostToDiskAndComeBackIntact) {
  TempDir dir;
  KvPoolConfig c = config(2, 1);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvCache kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 4);
  run_and_cache(kv, 7, a);  // written through to disk
  kv.end_background_work();
  disk->flush();
  kv.begin_background_work();  // takes the finished writes in
  kv.end_background_work();
  EXPECT_EQ(kv.counters().disk_written_chunks, 2);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDisk), 2u);
  // A new sequence needs the whole device: both chunks leave it, and the host, whose one block is
  // free, takes a copy of the first; the second is worth more (the leading chunk goes first), so
  // the first's host copy, which leaves for free (it is on disk), gives way to it.
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  EXPECT_EQ(kv.n_cached_blocks(Tier::kDevice), 0u);
  EXPECT_EQ(kv.n_cached_blocks(Tier::kHost), 1u);
  EXPECT_EQ(kv.counters().demoted_chunks, 2);
  EXPECT_EQ(kv.counters().evicted_host_copies, 1);
  EXPECT_EQ(kv.counters().dropped_chunks, 0);
  kv.release(table);
  const PrefixMatch m = kv.match_prefix(7, a, 2);
  ASSERT_EQ(m.table.size(), 2u);
  EXPECT_EQ(m.disk_chunks, 1);
  EXPECT_EQ(m.host_chunks, 1);
  EXPECT_TRUE(m.recompute.empty());
  EXPECT_TRUE(holds_pattern(kv, m.table[0], 10));
  EXPECT_TRUE(holds_pattern(kv, m.table[1], 12));
  EXPECT_EQ(kv.counters().bytes_disk_to_device, static_cast<int64_t>(tiny_layout().block_bytes()));
}

TEST_F(KvCacheTest, WithoutLowerTiersTheLeastValuableChunksAreDroppedAndRecomputed) {
  KvCache kv(tiny_layout(), config(3, 1));
  const auto a = tokens_from(10, 6);  // 3 chunks fill the device
  run_and_cache(kv, 7, a);
  clock_ += 5;
  KvTable table;
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

TEST_F(KvCacheTest, ChunksWithAHostCopyLeaveTheDeviceWithoutACopy) {
  KvCache kv(tiny_layout(), config(2, 4));
  const auto a = tokens_from(10, 4);
  run_and_cache(kv, 7, a);
  KvTable table;
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

TEST_F(KvCacheTest, CopiesAheadOfNeedKeepAQuarterOfTheDeviceReclaimable) {
  KvPoolConfig c = config(8, 8);
  c.swap_out_threshold = 0.25f;  // 2 of 8 blocks
  KvCache kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 14);  // 7 chunks: 1 block free
  run_and_cache(kv, 7, a);
  EXPECT_EQ(kv.n_free(), 1);
  kv.begin_background_work();
  kv.end_background_work();
  EXPECT_EQ(kv.counters().ahead_copied_chunks, 1);  // 1 free + 1 clean = 2
  EXPECT_EQ(kv.n_cached_blocks(Tier::kHost), 1u);
  EXPECT_EQ(kv.n_free(), 1);  // reclaimed lazily, not now
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  EXPECT_EQ(kv.counters().demoted_chunks, 0);  // the clean chunk left for free
  kv.release(table);
  // The copy is the head chunk's (lowest value) and it comes back intact.
  const PrefixMatch m = kv.match_prefix(7, a, 7);
  EXPECT_EQ(m.host_chunks, 1);
  EXPECT_TRUE(holds_pattern(kv, m.table[0], 10));
}

TEST_F(KvCacheTest, HostChunksAreCopiedLayerByLayerBesideTheForwardPass) {
  KvLayout layout = tiny_layout();
  layout.n_layers = 4;
  KvPoolConfig c = config(2, 4);
  c.layerwise_swap_in = true;
  KvCache kv(layout, std::move(c));
  const auto a = tokens_from(10, 4);
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  for (size_t b = 0; b < table.size(); ++b) {
    auto* f = reinterpret_cast<float*>(kv.device().block(table[b]));
    for (size_t i = 0; i < layout.block_elems(); ++i) f[i] = static_cast<float>(b * 1000 + i);
  }
  kv.cache_prefix(7, a, 4, table);
  kv.release(table);
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));  // both chunks to the host
  for (BlockId id : table) std::memset(kv.device().block(id), 0, layout.block_bytes());
  kv.release(table);
  const int32_t host_free = kv.n_host_free();
  const PrefixMatch m = kv.match_prefix(7, a, 2);
  ASSERT_EQ(m.host_chunks, 2);
  EXPECT_TRUE(kv.has_pending_loads());
  EXPECT_EQ(kv.n_host_free(), host_free);  // the host copies stay (and are pinned) meanwhile
  const auto layer_ok = [&](int32_t layer) {
    for (size_t b = 0; b < 2; ++b) {
      const auto* f = reinterpret_cast<const float*>(kv.device().block(m.table[b]));
      for (size_t i = layer * layout.layer_elems(); i < (layer + 1) * layout.layer_elems(); ++i) {
        if (f[i] != static_cast<float>(b * 1000 + i)) return false;
      }
    }
    return true;
  };
  EXPECT_FALSE(layer_ok(0));  // nothing copied before the pass starts
  kv.begin_background_work();
  for (int32_t layer = 0; layer < 4; ++layer) {
    kv.wait_for_layer(layer);
    EXPECT_TRUE(layer_ok(layer)) << layer;
  }
  kv.end_background_work();
  EXPECT_FALSE(kv.has_pending_loads());
  EXPECT_EQ(kv.counters().bytes_host_to_device, 2 * static_cast<int64_t>(layout.block_bytes()));
}

TEST_F(KvCacheTest, DamagedDiskExtentsAreRecomputedNeverServed) {
  TempDir dir;
  KvPoolConfig c = config(2, 0);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvCache kv(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 4);
  run_and_cache(kv, 7, a);
  disk->flush();
  kv.begin_background_work();
  kv.end_background_work();
  KvTable table;
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

TEST_F(KvCacheTest, TheIndexIsRebuiltFromTheDiskTierAfterARestart) {
  TempDir dir;
  const auto a = tokens_from(10, 6);
  const auto b = tokens_from(10, 4);  // a's first 2 chunks, but cached under another namespace
  {
    KvPoolConfig c = config(4, 0);
    c.disk = open_disk(dir);
    KvCache kv(tiny_layout(), std::move(c));
    run_and_cache(kv, 7, a);
    run_and_cache(kv, 8, b);  // another namespace: its own chunks
  }  // destroyed without a clean index save: only the extents remain
  KvPoolConfig c = config(4, 0);
  c.disk = open_disk(dir);
  KvCache kv(tiny_layout(), std::move(c));
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
  other.disk = open_disk(dir, 43);
  KvCache foreign(tiny_layout(), std::move(other));
  EXPECT_EQ(foreign.restore_from_disk(), 0u);
}

}  // namespace
}  // namespace mnemo::testing
