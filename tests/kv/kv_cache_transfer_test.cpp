// KvCache transfer between instances without a model (SPEC M1, M2): a prefix exported by one
// cache and imported into another's host tier, served from there; increments of a running
// sequence placed below the chunks sent before; and imports that cannot be placed changing
// nothing.
#include <gtest/gtest.h>

#include <cstring>

#include "kv/kv_cache.h"
#include "kv/prefix_index.h"
#include "kv_test_support.h"

namespace mnemo::testing {
namespace {

TEST_F(KvCacheTest, APrefixExportedByOneInstanceIsImportedIntoAnothersHostTierAndServed) {
  KvCache source(tiny_layout(), config(4, 4));
  KvCache target(tiny_layout(), config(8, 4));
  const auto a = tokens_from(10, 8);  // 4 chunks
  run_and_cache(source, 1, a);
  const KvCache::ExportedPrefix from_device = source.export_prefix(1, a, 4);
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
    const KvCache::ExportedPrefix staged = source.export_prefix(1, a, 4, 0, std::move(staging));
    EXPECT_EQ(staged.payload.data(), storage);
    EXPECT_EQ(staged.payload, from_device.payload);
  }
  // A new sequence takes the whole device: the chunks move to the host. Exports read any tier.
  KvTable table;
  ASSERT_TRUE(source.prepare_write(table, 0, 8));
  source.release(table);
  ASSERT_EQ(source.n_cached_blocks(Tier::kHost), 4u);
  const KvCache::ExportedPrefix exported = source.export_prefix(1, a, 4);
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
TEST_F(KvCacheTest, ImportedChunksReachTheDiskOnlyWhenTheHostTierEvictsThem) {
  TempDir dir;
  KvCache source(tiny_layout(), config(8, 0));
  KvPoolConfig c = config(4, 2);
  std::shared_ptr<DiskTier> disk = open_disk(dir);
  ASSERT_TRUE(disk);
  c.disk = disk;
  KvCache target(tiny_layout(), std::move(c));
  const auto a = tokens_from(10, 4);  // 2 chunks
  const auto b = tokens_from(50, 4);
  run_and_cache(source, 1, a);
  run_and_cache(source, 1, b);
  const KvCache::ExportedPrefix first = source.export_prefix(1, a, 2);
  ASSERT_EQ(*target.import_prefix(1, first.tokens, first.payload), 2);
  EXPECT_EQ(target.n_cached_blocks(Tier::kHost), 2u);
  EXPECT_EQ(target.counters().bytes_to_disk, 0);
  EXPECT_EQ(disk->queued(), 0u);
  // The host tier is full: the next import evicts the first, which goes to disk on its way out.
  clock_ += 10;
  const KvCache::ExportedPrefix second = source.export_prefix(1, b, 2);
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

TEST_F(KvCacheTest, ARunningSequencesChunksReplicateIncrementallyBelowTheChunksSentBefore) {
  KvCache source(tiny_layout(), config(8, 0));
  KvCache replica(tiny_layout(), config(8, 8));
  const auto a = tokens_from(10, 8);  // 4 chunks
  // A running sequence: its blocks computed, not offered to the cache.
  KvTable table;
  ASSERT_TRUE(source.prepare_write(table, 0, 8));
  for (size_t b = 0; b < table.size(); ++b) fill(source, table[b], a[b * 2]);

  // First increment: chunks 0-1, from the root.
  KvCache::ExportedPrefix first = source.export_blocks(1, a, table, 0, 2);
  ASSERT_EQ(first.chunks, 2);
  EXPECT_EQ(first.first_chunk, 0);
  EXPECT_EQ(first.parent_key, 0u);
  EXPECT_EQ(first.tokens, std::vector<TokenId>(a.begin(), a.begin() + 4));
  ASSERT_TRUE(replica.import_prefix(1, first.tokens, first.payload).ok());
  // Second: chunks 2-3, named below chunk 1's key, which is the hash chain of the tokens;
  // gathered into the first increment's buffer (a replicator reuses it).
  const uint8_t* first_storage = first.payload.data();
  KvCache::ExportedPrefix second = source.export_blocks(1, a, table, 2, 4, std::move(first.payload));
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

TEST_F(KvCacheTest, AnIncrementWhosePredecessorIsNotCachedIsRefusedAndChangesNothing) {
  KvCache source(tiny_layout(), config(8, 0));
  KvCache replica(tiny_layout(), config(8, 8));
  const auto a = tokens_from(10, 8);
  run_and_cache(source, 1, a);
  // Exported from the cache from chunk 2 on: the earlier chunks are named, not sent.
  const KvCache::ExportedPrefix tail = source.export_prefix(1, a, 4, 2);
  ASSERT_EQ(tail.chunks, 2);
  EXPECT_EQ(tail.first_chunk, 2);
  ASSERT_EQ(tail.payload.size(), 2 * tiny_layout().block_bytes());
  EXPECT_EQ(tail.tokens, std::vector<TokenId>(a.begin() + 4, a.end()));
  auto unknown = replica.import_prefix(1, tail.tokens, tail.payload, tail.parent_key, 2);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("not cached here"), std::string::npos) << unknown.error().message();
  EXPECT_EQ(replica.n_cached_blocks(Tier::kHost), 0u);
  // With its predecessors there, but at the wrong position: refused too.
  const KvCache::ExportedPrefix head = source.export_prefix(1, a, 2);
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

TEST_F(KvCacheTest, BadOrUnplaceableImportsChangeNothing) {
  KvCache target(tiny_layout(), config(4, 1));
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

}  // namespace
}  // namespace mnemo::testing
