// KvManager without a model: exact states of the tiers under the retention policy (Pensieve's
// value vs LRU), the cascade device -> host -> disk -> dropped, free reclaim of chunks with a copy
// below, copies ahead of need, dropped leading chunks handed back for recompute, damaged disk
// extents never served, and the index rebuilt from the disk tier.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/kv_manager.h"
#include "kv/prefix_index.h"
#include "kv_test_support.h"

namespace mnemo {
namespace {

using testing::tiny_layout;
using testing::tokens_from;

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
std::shared_ptr<DiskTier> open_disk(const TempDir& dir, uint64_t fingerprint = 42) {
  auto opened = DiskTier::open(dir.path, fingerprint, tiny_layout().block_bytes(), 1 << 20);
  if (!opened.ok()) {
    ADD_FAILURE() << opened.error().message();
    return nullptr;
  }
  return std::move(*opened);
}

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

TEST_F(KvManagerTest, MnemoRetentionBeforeItHasLearntAnythingIsLru) {
  // The setup above: with no observation every conversation of a length is alike, and the
  // older one goes first, as under LRU.
  clock_ = 1000;
  KvManager kv(tiny_layout(), config(4, 0, RetentionPolicy::kMnemo));
  const auto a = tokens_from(100, 4);
  const auto b = tokens_from(200, 4);
  run_and_cache(kv, 1, b);
  clock_ += 2;
  run_and_cache(kv, 1, a);
  clock_ += 10;
  std::vector<BlockId> table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 4));
  kv.release(table);
  EXPECT_EQ(kv.counters().dropped_chunks, 2);
  EXPECT_EQ(kv.match_prefix(1, a, 2).device_chunks, 2);  // A whole
  EXPECT_TRUE(kv.match_prefix(1, b, 2).table.empty());     // B gone
}

// Rounds of two conversations on a 10-block device: a short one (2 chunks) that comes back 50 s
// later, and a long one (8 chunks) that never does. Each round's conversations push out the
// previous round's. Then a short conversation idle for 40 s and a long one idle for 10 s share
// the device, and a new sequence needs 2 blocks: which conversation loses them?
std::vector<TokenId> conversation_tokens(int round, bool long_one) {
  return tokens_from(10000 * (round + 1) + (long_one ? 5000 : 0), long_one ? 16 : 4);
}

TEST_F(KvManagerTest, MnemoRetentionLearnsWhichConversationsReturnAndKeepsThem) {
  const auto run = [&](RetentionPolicy policy) {
    clock_ = 1000;
    KvPoolConfig c = config(10, 0, policy);
    // The cache acting on what the model learnt, not the model's significance gate (its own tests
    // cover it): 24 rounds without ghosts are too little evidence to pass the default gate.
    c.retention.class_split_statistic = 0;
    auto kv = std::make_unique<KvManager>(tiny_layout(), c);
    constexpr int kRounds = 24;
    for (int r = 0; r < kRounds; ++r) {
      run_and_cache(*kv, 1, conversation_tokens(r, false));
      run_and_cache(*kv, 1, conversation_tokens(r, true));
      clock_ += 50;
      const PrefixMatch back = kv->match_prefix(1, conversation_tokens(r, false), 2);
      EXPECT_EQ(back.device_chunks, 2) << "round " << r;  // the short one is still there
      std::vector<BlockId> table = back.table;
      kv->cache_prefix(1, conversation_tokens(r, false), 4, table);
      kv->release(table);
      clock_ += 150;
    }
    run_and_cache(*kv, 1, conversation_tokens(kRounds, false));
    clock_ += 30;
    run_and_cache(*kv, 1, conversation_tokens(kRounds, true));
    clock_ += 10;
    std::vector<BlockId> table;
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

TEST_F(KvManagerTest, ForgetDeletesAConversationFromEveryTierButSparesSharedAndRunningChunks) {
  TempDir dir;
  KvPoolConfig c = config(16, 4);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvManager kv(tiny_layout(), std::move(c));
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

TEST_F(KvManagerTest, ForgetWhileExtentsAreStillBeingWrittenDeletesThemOnceWritten) {
  TempDir dir;
  KvPoolConfig c = config(8, 0);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvManager kv(tiny_layout(), std::move(c));
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

TEST_F(KvManagerTest, APrefixExportedByOneInstanceIsImportedIntoAnothersHostTierAndServed) {
  KvManager source(tiny_layout(), config(4, 4));
  KvManager target(tiny_layout(), config(8, 4));
  const auto a = tokens_from(10, 8);  // 4 chunks
  run_and_cache(source, 1, a);
  const KvManager::ExportedPrefix from_device = source.export_prefix(1, a, 4);
  ASSERT_EQ(from_device.chunks, 4);
  EXPECT_EQ(from_device.tokens, a);
  ASSERT_EQ(from_device.payload.size(), 4 * tiny_layout().block_bytes());
  EXPECT_EQ(source.export_prefix(1, a, 3).chunks, 3);
  EXPECT_EQ(source.export_prefix(2, a, 4).chunks, 0);  // another tenant's namespace
  {
    // A sender's staging buffer: the export gathers into its storage, with the same bytes.
    std::vector<uint8_t> staging;
    staging.reserve(4 * tiny_layout().block_bytes());
    staging.push_back(99);  // leftover contents are discarded
    const uint8_t* storage = staging.data();
    const KvManager::ExportedPrefix staged = source.export_prefix(1, a, 4, 0, std::move(staging));
    EXPECT_EQ(staged.payload.data(), storage);
    EXPECT_EQ(staged.payload, from_device.payload);
  }
  // A new sequence takes the whole device: the chunks move to the host. Exports read any tier.
  std::vector<BlockId> table;
  ASSERT_TRUE(source.prepare_write(table, 0, 8));
  source.release(table);
  ASSERT_EQ(source.n_cached_blocks(Tier::kHost), 4u);
  const KvManager::ExportedPrefix exported = source.export_prefix(1, a, 4);
  ASSERT_EQ(exported.chunks, 4);
  EXPECT_EQ(exported.payload, from_device.payload);
  EXPECT_EQ(source.counters().exported_chunks, 4 + 3 + 4 + 4);

  auto imported = target.import_prefix(1, exported.tokens, exported.payload);
  ASSERT_TRUE(imported.ok()) << imported.error().message();
  EXPECT_EQ(*imported, exported.chunks);
  EXPECT_EQ(target.n_cached_blocks(Tier::kHost), static_cast<size_t>(exported.chunks));
  EXPECT_EQ(target.counters().imported_chunks, exported.chunks);
  // Imported again: nothing new.
  EXPECT_EQ(*target.import_prefix(1, exported.tokens, exported.payload), 0);
  // The next request finds them on the host and gets the source's bytes.
  const PrefixMatch m = target.match_prefix(1, a, 4);
  ASSERT_EQ(m.host_chunks, exported.chunks);
  for (int32_t i = 0; i < exported.chunks; ++i) EXPECT_TRUE(holds_pattern(target, m.table[static_cast<size_t>(i)], a[static_cast<size_t>(i) * 2]));
}

// Received chunks stay in the host tier, not written through (the sender keeps the durable
// copy); they reach the disk when the host tier evicts them, as any host copy does.
TEST_F(KvManagerTest, ImportedChunksReachTheDiskOnlyWhenTheHostTierEvictsThem) {
  TempDir dir;
  KvManager source(tiny_layout(), config(8, 0));
  KvPoolConfig c = config(4, 2);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvManager target(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 4);  // 2 chunks
  const auto b = tokens_from(50, 4);
  run_and_cache(source, 1, a);
  run_and_cache(source, 1, b);
  const KvManager::ExportedPrefix first = source.export_prefix(1, a, 2);
  ASSERT_EQ(*target.import_prefix(1, first.tokens, first.payload), 2);
  EXPECT_EQ(target.n_cached_blocks(Tier::kHost), 2u);
  EXPECT_EQ(target.counters().bytes_to_disk, 0);
  EXPECT_EQ(disk->queued(), 0u);
  // The host tier is full: the next import evicts the first, which goes to disk on its way out.
  clock_ += 10;
  const KvManager::ExportedPrefix second = source.export_prefix(1, b, 2);
  ASSERT_EQ(*target.import_prefix(1, second.tokens, second.payload), 2);
  EXPECT_EQ(target.counters().bytes_to_disk, static_cast<int64_t>(2 * tiny_layout().block_bytes()));
  disk->flush();
  target.begin_background_work();  // takes the finished writes in
  target.end_background_work();
  EXPECT_EQ(target.n_cached_blocks(Tier::kDisk), 2u);
  PrefixMatch m = target.match_prefix(1, a, 2);
  ASSERT_EQ(m.disk_chunks, 2);
  target.finish_loads();
  EXPECT_TRUE(holds_pattern(target, m.table[0], 10));
  EXPECT_TRUE(holds_pattern(target, m.table[1], 12));
  target.release(m.table);
}

TEST_F(KvManagerTest, ARunningSequencesChunksReplicateIncrementallyBelowTheChunksSentBefore) {
  KvManager source(tiny_layout(), config(8, 0));
  KvManager replica(tiny_layout(), config(8, 8));
  const auto a = tokens_from(10, 8);  // 4 chunks
  // A running sequence: its blocks computed, not offered to the cache.
  std::vector<BlockId> table;
  ASSERT_TRUE(source.prepare_write(table, 0, 8));
  for (size_t b = 0; b < table.size(); ++b) fill(source, table[b], a[b * 2]);

  // First increment: chunks 0-1, from the root.
  KvManager::ExportedPrefix first = source.export_blocks(1, a, table, 0, 2);
  ASSERT_EQ(first.chunks, 2);
  EXPECT_EQ(first.first_chunk, 0);
  EXPECT_EQ(first.parent_key, 0u);
  EXPECT_EQ(first.tokens, std::vector<TokenId>(a.begin(), a.begin() + 4));
  ASSERT_TRUE(replica.import_prefix(1, first.tokens, first.payload).ok());
  // Second: chunks 2-3, named below chunk 1's key, which is the hash chain of the tokens;
  // gathered into the first increment's buffer (a replicator reuses it).
  const uint8_t* first_storage = first.payload.data();
  KvManager::ExportedPrefix second = source.export_blocks(1, a, table, 2, 4, std::move(first.payload));
  EXPECT_EQ(second.payload.data(), first_storage);
  ASSERT_EQ(second.chunks, 2);
  EXPECT_EQ(second.first_chunk, 2);
  const uint64_t key0 = PrefixIndex::chunk_key(0, 1, std::span<const TokenId>(a).first(2));
  EXPECT_EQ(second.parent_key, PrefixIndex::chunk_key(key0, 1, std::span<const TokenId>(a).subspan(2, 2)));
  EXPECT_EQ(second.tokens, std::vector<TokenId>(a.begin() + 4, a.end()));
  auto inserted = replica.import_prefix(1, second.tokens, second.payload, second.parent_key, 2);
  ASSERT_TRUE(inserted.ok()) << inserted.error().message();
  EXPECT_EQ(*inserted, 2);
  // The replica serves the whole prefix with the source's bytes.
  const PrefixMatch m = replica.match_prefix(1, a, 4);
  ASSERT_EQ(m.table.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(holds_pattern(replica, m.table[i], a[i * 2]));
  // Limits: nothing past the table or the tokens, nothing from an empty range.
  EXPECT_EQ(source.export_blocks(1, a, table, 4, 9).chunks, 0);
  EXPECT_EQ(source.export_blocks(1, a, table, 3, 9).chunks, 1);
  source.release(table);
}

TEST_F(KvManagerTest, AnIncrementWhosePredecessorIsNotCachedIsRefusedAndChangesNothing) {
  KvManager source(tiny_layout(), config(8, 0));
  KvManager replica(tiny_layout(), config(8, 8));
  const auto a = tokens_from(10, 8);
  run_and_cache(source, 1, a);
  // Exported from the cache from chunk 2 on: the earlier chunks are named, not sent.
  const KvManager::ExportedPrefix tail = source.export_prefix(1, a, 4, 2);
  ASSERT_EQ(tail.chunks, 2);
  EXPECT_EQ(tail.first_chunk, 2);
  ASSERT_EQ(tail.payload.size(), 2 * tiny_layout().block_bytes());
  EXPECT_EQ(tail.tokens, std::vector<TokenId>(a.begin() + 4, a.end()));
  auto unknown = replica.import_prefix(1, tail.tokens, tail.payload, tail.parent_key, 2);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("not cached here"), std::string::npos) << unknown.error().message();
  EXPECT_EQ(replica.n_cached_blocks(Tier::kHost), 0u);
  // With its predecessors there, but at the wrong position: refused too.
  const KvManager::ExportedPrefix head = source.export_prefix(1, a, 2);
  ASSERT_TRUE(replica.import_prefix(1, head.tokens, head.payload).ok());
  auto misplaced = replica.import_prefix(1, tail.tokens, tail.payload, tail.parent_key, 3);
  ASSERT_FALSE(misplaced.ok());
  auto keyless = replica.import_prefix(1, tail.tokens, tail.payload, 0, 2);
  ASSERT_FALSE(keyless.ok());
  EXPECT_EQ(replica.n_cached_blocks(Tier::kHost), 2u);
  // Another tenant's chunk of the same key path is not a predecessor.
  EXPECT_FALSE(replica.import_prefix(2, tail.tokens, tail.payload, tail.parent_key, 2).ok());
  // In its place it is taken.
  auto placed = replica.import_prefix(1, tail.tokens, tail.payload, tail.parent_key, 2);
  ASSERT_TRUE(placed.ok()) << placed.error().message();
  EXPECT_EQ(*placed, 2);
  EXPECT_EQ(replica.match_prefix(1, a, 4).table.size(), 4u);
}

TEST_F(KvManagerTest, BadOrUnplaceableImportsChangeNothing) {
  KvManager target(tiny_layout(), config(4, 1));
  const auto a = tokens_from(10, 4);  // 2 chunks
  std::vector<uint8_t> payload(2 * tiny_layout().block_bytes(), 7);
  auto odd = target.import_prefix(1, tokens_from(10, 3), payload);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message().find("whole chunks"), std::string::npos);
  auto short_payload = target.import_prefix(1, a, std::span<const uint8_t>(payload).first(10));
  ASSERT_FALSE(short_payload.ok());
  EXPECT_NE(short_payload.error().message().find("bytes"), std::string::npos);
  auto no_room = target.import_prefix(1, a, payload);  // 2 chunks, a host tier of 1 block
  ASSERT_FALSE(no_room.ok());
  EXPECT_NE(no_room.error().message().find("no room"), std::string::npos);
  EXPECT_EQ(target.n_cached_blocks(Tier::kHost), 0u);
  EXPECT_EQ(target.n_host_free(), 1);
  EXPECT_TRUE(target.match_prefix(1, a, 2).table.empty());
}

TEST_F(KvManagerTest, ChunksCascadeDeviceToHostToDiskAndComeBackIntact) {
  TempDir dir;
  KvPoolConfig c = config(2, 1);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
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

TEST_F(KvManagerTest, HostChunksAreCopiedLayerByLayerBesideTheForwardPass) {
  KvLayout layout = tiny_layout();
  layout.n_layers = 4;
  KvPoolConfig c = config(2, 4);
  c.layerwise_swap_in = true;
  KvManager kv(layout, std::move(c));
  const auto a = tokens_from(10, 4);
  std::vector<BlockId> table;
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

TEST_F(KvManagerTest, DamagedDiskExtentsAreRecomputedNeverServed) {
  TempDir dir;
  KvPoolConfig c = config(2, 0);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
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
    c.disk = open_disk(dir);
    KvManager kv(tiny_layout(), std::move(c));
    run_and_cache(kv, 7, a);
    run_and_cache(kv, 8, b);  // another namespace: its own chunks
  }  // destroyed without a clean index save: only the extents remain
  KvPoolConfig c = config(4, 0);
  c.disk = open_disk(dir);
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
  other.disk = open_disk(dir, 43);
  KvManager foreign(tiny_layout(), std::move(other));
  EXPECT_EQ(foreign.restore_from_disk(), 0u);
}

}  // namespace
}  // namespace mnemo
