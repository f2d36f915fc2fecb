// CacheEventLog: exact event sequences, snapshots for new, restarted and lagging readers, the long
// poll; and PrefixIndex's observer, which feeds it: an event only when what a chunk holds changes
// (its first KV copy, its last, or the change between every layer and the global ones only).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

#include "kv/cache_events.h"
#include "kv/prefix_index.h"

namespace mnemo {
namespace {

using std::chrono::milliseconds;
using Events = std::vector<std::pair<uint64_t, ChunkHold>>;
constexpr ChunkHold kWhole = ChunkHold::kWhole;
constexpr ChunkHold kCompact = ChunkHold::kCompact;
constexpr ChunkHold kNone = ChunkHold::kNone;

std::vector<uint64_t> sorted(const std::vector<std::pair<uint64_t, ChunkHold>>& held) {
  std::vector<uint64_t> keys;
  for (const auto& [key, hold] : held) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

TEST(CacheEventLog, NewReadersGetASnapshotThenTheEventsInOrder) {
  CacheEventLog log;
  log.record(10, kWhole);
  log.record(11, kWhole);
  log.record(10, kWhole);  // a repeat: no event
  auto first = log.read(0, 0, milliseconds(0));
  EXPECT_TRUE(first.snapshot);
  EXPECT_EQ(first.epoch, log.epoch());
  EXPECT_EQ(sorted(first.held), (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(first.next, 2u);
  log.record(10, kNone);
  log.record(12, kWhole);
  log.record(99, kNone);  // never held: no event
  auto second = log.read(first.epoch, first.next, milliseconds(0));
  EXPECT_FALSE(second.snapshot);
  EXPECT_EQ(second.events, (Events{{10, kNone}, {12, kWhole}}));
  EXPECT_EQ(second.next, 4u);
  auto nothing = log.read(second.epoch, second.next, milliseconds(0));
  EXPECT_TRUE(nothing.events.empty());
  EXPECT_EQ(nothing.next, 4u);
  // At most max_events per read; the rest next time.
  for (uint64_t k = 20; k < 25; ++k) log.record(k, kWhole);
  auto part = log.read(nothing.epoch, nothing.next, milliseconds(0), 3);
  EXPECT_EQ(part.events, (Events{{20, kWhole}, {21, kWhole}, {22, kWhole}}));
  auto rest = log.read(part.epoch, part.next, milliseconds(0), 3);
  EXPECT_EQ(rest.events, (Events{{23, kWhole}, {24, kWhole}}));
  EXPECT_EQ(log.held_count(), 7u);
}

TEST(CacheEventLog, AChunkGoingCompactOrWholeAgainIsAnEvent) {
  CacheEventLog log;
  log.record(1, kWhole);
  log.record(2, kCompact);
  const auto start = log.read(0, 0, milliseconds(0));
  ASSERT_TRUE(start.snapshot);
  auto held = start.held;
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (Events{{1, kWhole}, {2, kCompact}}));
  log.record(1, kCompact);
  log.record(1, kCompact);  // a repeat: no event
  log.record(2, kWhole);
  log.record(2, kNone);
  EXPECT_EQ(log.read(start.epoch, start.next, milliseconds(0)).events,
            (Events{{1, kCompact}, {2, kWhole}, {2, kNone}}));
  EXPECT_EQ(log.held_count(), 1u);
}

TEST(CacheEventLog, ReadersOfAnotherEpochOrTooFarBehindStartOverFromASnapshot) {
  CacheEventLog log(4);  // keeps 4 events
  for (uint64_t k = 1; k <= 3; ++k) log.record(k, kWhole);
  const auto start = log.read(0, 0, milliseconds(0));
  // Another process's epoch (the instance restarted): a snapshot.
  auto restarted = log.read(start.epoch + 2, start.next, milliseconds(0));
  EXPECT_TRUE(restarted.snapshot);
  EXPECT_EQ(sorted(restarted.held), (std::vector<uint64_t>{1, 2, 3}));
  // Six more events: the oldest two the reader needs are gone.
  for (uint64_t k = 4; k <= 6; ++k) log.record(k, kWhole);
  log.record(1, kNone);
  log.record(2, kNone);
  log.record(7, kWhole);
  auto behind = log.read(start.epoch, start.next, milliseconds(0));
  EXPECT_TRUE(behind.snapshot);
  EXPECT_EQ(sorted(behind.held), (std::vector<uint64_t>{3, 4, 5, 6, 7}));
  // A position past the end (a confused reader): a snapshot too.
  EXPECT_TRUE(log.read(behind.epoch, behind.next + 5, milliseconds(0)).snapshot);
  // Following from the snapshot works.
  log.record(3, kNone);
  EXPECT_EQ(log.read(behind.epoch, behind.next, milliseconds(0)).events, (Events{{3, kNone}}));
}

TEST(CacheEventLog, AReadWaitsForTheNextEvent) {
  CacheEventLog log;
  const auto start = log.read(0, 0, milliseconds(0));
  auto waiting = std::async(std::launch::async, [&] { return log.read(start.epoch, start.next, milliseconds(5000)); });
  EXPECT_EQ(waiting.wait_for(milliseconds(100)), std::future_status::timeout);
  log.record(42, kWhole);
  ASSERT_EQ(waiting.wait_for(milliseconds(3000)), std::future_status::ready);
  EXPECT_EQ(waiting.get().events, (Events{{42, kWhole}}));
  // Nothing comes: the read returns empty after its wait.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(log.read(start.epoch, start.next + 1, milliseconds(50)).events.empty());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(45));
}

std::vector<TokenId> seq(TokenId first, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(PrefixIndexObserver, TellsWhenAChunkGainsItsFirstCopyAndLosesItsLast) {
  PrefixIndex index(4);
  Events seen;
  index.set_observer([&](uint64_t key, ChunkHold hold) { seen.emplace_back(key, hold); });
  const auto tokens = seq(100, 8);
  index.insert(7, tokens, std::vector<BlockId>{5, 9}, 1);
  const auto chunks = index.match(7, tokens, 2, 2);
  ASSERT_EQ(chunks.size(), 2u);
  const uint64_t k0 = chunks[0].key, k1 = chunks[1].key;
  EXPECT_EQ(k0, PrefixIndex::chunk_key(0, 7, std::span(tokens).first(4)));
  EXPECT_EQ(seen, (Events{{k0, kWhole}, {k1, kWhole}}));
  seen.clear();
  // A second copy, then the first one going: still held, no event.
  index.set_host(chunks[1].node, 3);
  index.set_device(chunks[1].node, kNoBlock);
  index.set_disk(chunks[1].node, DiskCopy::kWriting);
  index.set_disk(chunks[1].node, DiskCopy::kPresent);
  index.set_host(chunks[1].node, kNoBlock);
  EXPECT_TRUE(seen.empty());
  // Only the global layers left (sliding-window history): compact; every layer again: whole.
  index.set_host(chunks[1].node, 4, /*compact=*/true);
  index.set_disk(chunks[1].node, DiskCopy::kNone);
  EXPECT_EQ(seen, (Events{{k1, kCompact}}));
  index.set_disk(chunks[1].node, DiskCopy::kPresent, /*compact=*/false);
  index.set_disk(chunks[1].node, DiskCopy::kNone);
  EXPECT_EQ(seen, (Events{{k1, kCompact}, {k1, kWhole}, {k1, kCompact}}));
  seen.clear();
  // The last copy goes: evicted.
  index.set_host(chunks[1].node, kNoBlock);
  EXPECT_EQ(seen, (Events{{k1, kNone}}));
  // A dropped leading chunk (its child still held) is evicted too; a restored one comes back.
  seen.clear();
  index.insert(7, tokens, std::vector<BlockId>{5, 11}, 3);
  const auto again = index.match(7, tokens, 2, 4);
  index.set_device(again[0].node, kNoBlock);
  EXPECT_EQ(seen, (Events{{k1, kWhole}, {k0, kNone}}));
  seen.clear();
  PrefixIndex restored(4);
  restored.set_observer([&](uint64_t key, ChunkHold hold) { seen.emplace_back(key, hold); });
  ASSERT_TRUE(restored.restore(7, 0, k0, std::span(tokens).first(4), 1).has_value());
  EXPECT_EQ(seen, (Events{{k0, kWhole}}));
}

}  // namespace
}  // namespace mnemo
