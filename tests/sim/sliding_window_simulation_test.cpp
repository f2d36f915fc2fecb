// Replays with a sliding-window model's geometry, through the serving cache: history a window
// before an idle conversation's end can shrink to its global layers (a slot of a device block,
// or the host's compact pool), and a compact chunk is reused only where no computed position has
// it in its window. 4-token chunks of 4 bytes, 4 layers of which 1 global, an 8-token window: a
// whole chunk takes 4 bytes, a compact one 1 (4 to a device block).
#include <gtest/gtest.h>

#include "sim/cache_replay.h"
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

// X idles with 6 chunks on an 8-chunk device; Y then needs 3 blocks with 2 free; X comes back.
// With the window X's history shrinks into device slots to make the room, and X loses nothing;
// without it a whole chunk of X's leaves (and, with no host, is recomputed).
TEST(SlidingWindowSimulation, CompactHistoryLeavesRoomThatWholeChunksWouldTake) {
  const Trace trace = {conversation("X", {turn(0, 1, 24, 0), turn(100, 101, 28, 0)}), conversation("Y", {turn(10, 11, 12, 0)})};
  for (const char* name : {"lru", "pensieve", "mnemo", "oracle"}) {
    const PolicyOutcome o = run_policy(trace, swa_config(32), name);
    EXPECT_EQ(o.reusable_tokens, 24) << name;
    EXPECT_EQ(o.recomputed_tokens, 0) << name;
    EXPECT_EQ(o.hit_tokens[0], 24) << name;
    EXPECT_EQ(o.counters.device_overcommits, 0) << name;
  }
  SimConfig whole = swa_config(32);
  whole.sliding_window = 0;
  EXPECT_GT(run_policy(trace, whole, "lru").recomputed_tokens, 0);
}

// Y needs 20 units with 16 free. LRU takes X's 4 compact leading chunks: X recomputes them and
// reuses its last window. Tail-first takes X's last chunk: recomputing it reads the local layers
// of the chunks a window before it, which are compact, so they are recomputed too, and so on
// back to the start: nothing of X is reusable.
TEST(SlidingWindowSimulation, LosingTheLastWindowStrandsTheCompactHistory) {
  const Trace trace = {conversation("X", {turn(0, 1, 24, 0), turn(100, 101, 28, 0)}), conversation("Y", {turn(10, 11, 20, 0)})};
  const PolicyOutcome lru = run_policy(trace, swa_config(28), "lru");
  EXPECT_EQ(lru.recomputed_tokens, 16);
  EXPECT_EQ(lru.hit_tokens[0], 8);
  const PolicyOutcome tail = run_policy(trace, swa_config(28), "tail-first");
  EXPECT_EQ(tail.recomputed_tokens, 24);
  EXPECT_EQ(tail.hit_tokens_total(), 0);
  // mnemo values a conversation's chunks alike (per byte of the conversation): leading first.
  EXPECT_EQ(run_policy(trace, swa_config(28), "mnemo").recomputed_tokens, 16);
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

TEST(SlidingWindowSimulation, RefusesAWindowWithoutLayersThatDivideTheChunk) {
  SimConfig c = swa_config(24);
  c.global_layers = 5;
  EXPECT_FALSE(replay_through_cache({}, c, RetentionPolicy::kLru, "lru").ok());
  c.global_layers = 1;
  c.layers = 3;  // 4-byte chunks
  EXPECT_FALSE(replay_through_cache({}, c, RetentionPolicy::kLru, "lru").ok());
}

}  // namespace
}  // namespace mnemo::sim
