// The simulator with a sliding-window model's sizes, as the real cache keeps its KV: history a
// window before an idle conversation's end takes its global layers only, and a compact chunk is
// reused only where no computed position has it in its window. 4-token chunks of 4 bytes, 4
// layers of which 1 global, an 8-token window: a whole chunk takes 4 units (bytes), a compact
// one 1; a conversation of 6 chunks idles at 4 x 1 + 2 x 4 = 12.
#include <gtest/gtest.h>

#include "sim/eviction_policy.h"
#include "sim/simulator.h"
#include "sim/tiered_chunk_cache.h"
#include "sim_test_support.h"

namespace mnemo::sim {
namespace {

using testing::conversation;
using testing::run_policy;
using testing::small_config;
using testing::turn;

SimConfig swa_config(int64_t device_units, int64_t host_units = 0) {
  SimConfig c = small_config(0);
  c.capacity_bytes = {device_units, host_units, 0};
  c.sliding_window = 8;
  c.layers = 4;
  c.global_layers = 1;
  return c;
}

TEST(SlidingWindowSizes, AnIdleConversationsHistoryShrinksAndARunningOnesIsWhole) {
  const auto lru = make_eviction_policy("lru", testing::simple_costs(), 4);
  ASSERT_TRUE(lru.ok());
  TieredChunkCache cache({24, 0, 0}, **lru, 1, swa_config(24).chunk_sizes());
  cache.set_pinned(0, true);
  for (int32_t j = 0; j < 6; ++j) cache.place_on_device({0, j}, 0);
  EXPECT_EQ(cache.used_units(Tier::kDevice), 24);
  cache.set_end_chunks(0, 6);
  EXPECT_EQ(cache.used_units(Tier::kDevice), 24);  // still running: its sequence's blocks
  cache.set_pinned(0, false);
  EXPECT_EQ(cache.used_units(Tier::kDevice), 12);
  EXPECT_EQ(cache.used_chunks(Tier::kDevice), 6);
  EXPECT_TRUE(cache.is_compact({0, 3}));
  EXPECT_FALSE(cache.is_compact({0, 4}));
  cache.set_pinned(0, true);  // its next turn: whole again on the device
  EXPECT_EQ(cache.used_units(Tier::kDevice), 24);
  EXPECT_FALSE(cache.is_compact({0, 0}));
}

// X idles with 6 chunks (12 units); Y then needs 3 whole chunks (12 units); X comes back.
TEST(SlidingWindowSimulation, CompactHistoryLeavesRoomThatWholeChunksWouldTake) {
  const Trace trace = {conversation("X", {turn(0, 1, 24, 0), turn(100, 101, 28, 0)}), conversation("Y", {turn(10, 11, 12, 0)})};
  for (const std::string& name : eviction_policy_names()) {
    const PolicyOutcome o = run_policy(trace, swa_config(24), name);
    EXPECT_EQ(o.recomputed_tokens, 0) << name;
    EXPECT_EQ(o.hit_tokens[0], 24) << name;
    EXPECT_EQ(o.counters.evicted_chunks[0], 3) << name;  // Y's, when X's chunks are whole again
  }
  // The same bytes without the window: Y takes three of X's chunks.
  SimConfig whole = swa_config(24);
  whole.sliding_window = 0;
  EXPECT_EQ(run_policy(trace, whole, "lru").recomputed_tokens, 12);
}

// Y needs 16 units with 12 free. LRU takes X's 4 compact leading chunks: X recomputes them and
// reuses its last window. Tail-first takes X's last chunk: recomputing it reads the local layers
// of the chunks a window before it, which are compact, so they are recomputed too, and so on
// back to the start: nothing of X is reusable.
TEST(SlidingWindowSimulation, LosingTheLastWindowStrandsTheCompactHistory) {
  const Trace trace = {conversation("X", {turn(0, 1, 24, 0), turn(100, 101, 28, 0)}), conversation("Y", {turn(10, 11, 16, 0)})};
  const PolicyOutcome lru = run_policy(trace, swa_config(24), "lru");
  EXPECT_EQ(lru.recomputed_tokens, 16);
  EXPECT_EQ(lru.stranded_tokens, 0);
  EXPECT_EQ(lru.hit_tokens[0], 8);
  const PolicyOutcome tail = run_policy(trace, swa_config(24), "tail-first");
  EXPECT_EQ(tail.recomputed_tokens, 24);
  EXPECT_EQ(tail.stranded_tokens, 20);
  EXPECT_EQ(tail.hit_tokens_total(), 0);
  // mnemo values a conversation's chunks alike (per byte of the conversation): leading first.
  EXPECT_EQ(run_policy(trace, swa_config(24), "mnemo").recomputed_tokens, 16);
}

// A (6 chunks, 2 units a chunk) idles from 1, B (2 whole chunks, 4 a chunk) from 3; C needs 16
// units with 8 free. LRU takes A's oldest 5 chunks; mnemo, which values recompute saved per byte
// kept, takes B's (the same tokens in twice the bytes). A comes back, B does not.
TEST(SlidingWindowSimulation, MnemoKeepsTheHistoryThatSavesMoreTokensPerByte) {
  const Trace trace = {conversation("A", {turn(0, 1, 24, 0), turn(100, 101, 28, 0)}), conversation("B", {turn(2, 3, 8, 0)}),
                       conversation("C", {turn(10, 11, 16, 0)})};
  const PolicyOutcome lru = run_policy(trace, swa_config(28), "lru");
  EXPECT_EQ(lru.recomputed_tokens, 20);
  const PolicyOutcome mnemo = run_policy(trace, swa_config(28), "mnemo");
  EXPECT_EQ(mnemo.recomputed_tokens, 0);
  EXPECT_EQ(mnemo.hit_tokens[0], 24);
}

TEST(SlidingWindowSimulation, MovedBytesCountCompactChunksAtTheirSize) {
  // X idles at 12 units; Y needs 16 with 12 free: X's compact chunks 0-3 go to the 8-unit host
  // (4 units). When X returns its chunks are whole on the device again, and idle Y (chunks 0-1
  // compact, 2-3 whole: 10 units) leaves for the host, where Y3 fits only once Y0 and Y1 are dropped.
  const Trace trace = {conversation("X", {turn(0, 1, 24, 0), turn(100, 101, 28, 0)}), conversation("Y", {turn(10, 11, 16, 0)})};
  const PolicyOutcome o = run_policy(trace, swa_config(24, 8), "lru");
  EXPECT_EQ(o.recomputed_tokens, 0);
  EXPECT_EQ(o.hit_tokens[1], 16);
  EXPECT_EQ(o.hit_tokens[0], 8);
  EXPECT_EQ(o.counters.moved_chunks[0][1], 4 + 4);
  EXPECT_EQ(o.moved_bytes(Tier::kDevice, Tier::kHost), 4 + 10);
  EXPECT_EQ(o.moved_bytes(Tier::kHost, Tier::kDevice), 4);
  EXPECT_EQ(o.counters.dropped_chunks, 2);
}

TEST(SlidingWindowSimulation, RefusesAWindowWithoutLayersThatDivideTheChunk) {
  SimConfig c = swa_config(24);
  c.global_layers = 5;
  const auto lru = make_eviction_policy("lru", c.cost, c.chunk_tokens);
  EXPECT_FALSE(simulate_policy({}, c, **lru).ok());
  c.global_layers = 1;
  c.layers = 3;  // 4-byte chunks
  EXPECT_FALSE(simulate_policy({}, c, **lru).ok());
}

}  // namespace
}  // namespace mnemo::sim
