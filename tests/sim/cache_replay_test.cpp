// Replays through the serving KV cache (sim/cache_replay.h): the figures are what a KvCache driven
// turn by turn, as the engine drives it, reports; the tier rules are the serving cache's (a disk
// tier written through, the host copies a match brings back pinned, a turn without room waiting
// for it).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "kv/kv_cache.h"
#include "sim/cache_replay.h"
#include "sim/sim_test_support.h"

namespace mnemo::sim {
namespace {

using testing::conversation;
using testing::run_policy;
using testing::small_config;
using testing::turn;

TEST(CacheReplay, EveryPolicyIsTheCachesOwn) {
  EXPECT_EQ(simulated_policy("lru"), RetentionPolicy::kLru);
  EXPECT_EQ(simulated_policy("pensieve"), RetentionPolicy::kPensieve);
  EXPECT_EQ(simulated_policy("mnemo"), RetentionPolicy::kMnemo);
  EXPECT_EQ(simulated_policy("oracle"), RetentionPolicy::kOracle);
  EXPECT_EQ(simulated_policy("tail-first"), RetentionPolicy::kTailFirst);
  EXPECT_FALSE(simulated_policy("mnemo-no-ghosts").has_value());
  for (const std::string& name : simulated_policy_names()) EXPECT_TRUE(simulated_policy(name).has_value()) << name;
}

// A (two turns) and B in between on a 4-chunk device and a 2-chunk host, followed by hand.
TEST(CacheReplay, HandComputedTierMoves) {
  const Trace trace = {conversation("A", {turn(0, 1, 8, 4), turn(10, 11, 16, 0)}), conversation("B", {turn(2, 3, 12, 0)})};
  const PolicyOutcome o = run_policy(trace, small_config(4, 2), "lru");
  // A's first turn leaves A0-A2 (12 tokens) on the device. B's 12-token prompt needs 3 blocks
  // with 1 free: A0 and A1 leave for the host. A returns with 16 tokens: 3 reusable chunks, A2 on
  // the device, A0 and A1 brought back from the host; the room they take pushes B's chunks out,
  // and since the host's copies being matched are pinned, B's are dropped, not A's.
  EXPECT_EQ(o.turns, 3);
  EXPECT_EQ(o.reusable_tokens, 12);
  EXPECT_EQ(o.hit_tokens[0], 4);
  EXPECT_EQ(o.hit_tokens[1], 8);
  EXPECT_EQ(o.recomputed_tokens, 0);
  EXPECT_EQ(o.counters.device_overcommits, 0);
  EXPECT_EQ(o.moved_bytes(Tier::kDevice, Tier::kHost), 2 * 4);
  EXPECT_EQ(o.moved_bytes(Tier::kHost, Tier::kDevice), 2 * 4);
  EXPECT_EQ(o.counters.dropped_chunks, 3);  // B0-B2
  EXPECT_EQ(o.counters.peak_device_chunks, 4);
}

// B (1 chunk) comes back at 20; A (3 chunks, newer) has one turn, and its client says so. C needs
// a block of the full 4-chunk device at 5: LRU takes B's older chunk (recomputed at 20), and so
// does the learnt policy unless A's end is signalled: then A's chunk goes and B hits.
TEST(CacheReplay, TheLearntPolicyLetsAnEndedConversationGoFirst) {
  const Trace trace = {conversation("B", {turn(0, 1, 4, 0), turn(20, 21, 8, 0)}), conversation("A", {turn(2, 3, 8, 4)}),
                       conversation("C", {turn(5, 6, 4, 0)})};
  for (const double share : {0.0, 1.0}) {
    SimConfig config = small_config(4);
    config.end_signal_share = share;
    EXPECT_EQ(run_policy(trace, config, "lru").recomputed_tokens, 4) << share;
    EXPECT_EQ(run_policy(trace, config, "mnemo").recomputed_tokens, share == 0 ? 4 : 0) << share;
  }
}

// The same traffic with keep-alives: B's first turn is not its last, so its client pins it; A's
// only turn is. While B's pin holds (a ttl of 300 s), C's block comes from A under every policy
// that honours pins, and B hits at 20; a pin run out by C's turn (3 s) keeps nothing. Tail-first
// ignores pins.
TEST(CacheReplay, AKeepAliveKeepsTheConversationUntilItsTtl) {
  const Trace trace = {conversation("B", {turn(0, 1, 4, 0), turn(20, 21, 8, 0)}), conversation("A", {turn(2, 3, 8, 4)}),
                       conversation("C", {turn(5, 6, 4, 0)})};
  for (const double ttl : {300.0, 3.0}) {
    SimConfig config = small_config(4);
    config.keep_alive_share = 1.0;
    config.keep_alive_ttl_s = ttl;
    for (const char* policy : {"lru", "mnemo", "pensieve", "slru", "arc"}) {
      EXPECT_EQ(run_policy(trace, config, policy).recomputed_tokens, ttl > 4 ? 0 : 4) << policy << " " << ttl;
    }
    EXPECT_EQ(run_policy(trace, config, "tail-first").recomputed_tokens, 4) << ttl;
  }
}

// Every policy sees the same traffic; whatever is reusable is a hit or a recompute.
TEST(CacheReplay, EveryReusableTokenIsAHitOrARecompute) {
  Trace trace;
  for (int i = 0; i < 20; ++i) {
    const double t = 7.0 * i;
    trace.push_back(conversation(fmt::format("C{}", i),
                                 {turn(t, t + 1, 9 + i % 5, 3), turn(t + 30, t + 31, 20 + i % 7, 2), turn(t + 90, t + 91, 40, 0)}));
  }
  for (const char* name : {"lru", "pensieve", "mnemo"}) {
    for (const SimConfig& config : {small_config(12), small_config(12, 6), small_config(12, 6, 10)}) {
      const PolicyOutcome o = run_policy(trace, config, name);
      EXPECT_EQ(o.turns, 60) << name;
      EXPECT_EQ(o.hit_tokens_total() + o.recomputed_tokens, o.reusable_tokens) << name;
      EXPECT_GT(o.recomputed_tokens, 0) << name;  // 20 conversations of up to 10 chunks on 12 to 28
      // A device alone thrashes under LRU here (each conversation's chunks are gone when it
      // returns); a lower tier keeps some.
      if (config.capacity_bytes[1] + config.capacity_bytes[2] > 0) {
        EXPECT_GT(o.hit_tokens_total(), 0) << name;
      }
      if (config.capacity_bytes[2] == 0) {
        EXPECT_EQ(o.hit_tokens[2], 0) << name;
      }
      if (config.capacity_bytes[1] == 0) {
        EXPECT_EQ(o.hit_tokens[1], 0) << name;
      }
    }
  }
}

// The serving cache writes every cached chunk through to the disk: a chunk evicted from the
// device leaves for free, and the disk alone holds it until the disk needs the room.
TEST(CacheReplay, TheDiskTierIsWrittenThrough) {
  const Trace trace = {conversation("A", {turn(0, 1, 8, 0), turn(10, 11, 12, 0)}), conversation("B", {turn(2, 3, 12, 0)})};
  const PolicyOutcome o = run_policy(trace, small_config(3, 0, 6), "lru");
  // A0 and A1 are on the disk when B takes the device; A comes back and reads both from it.
  EXPECT_EQ(o.hit_tokens[2], 8);
  EXPECT_EQ(o.recomputed_tokens, 0);
  EXPECT_EQ(o.moved_bytes(Tier::kDisk, Tier::kDevice), 2 * 4);
  EXPECT_EQ(o.moved_bytes(Tier::kDevice, Tier::kHost), 0);
  EXPECT_GE(o.moved_bytes(Tier::kHost, Tier::kDisk), 5 * 4);  // A's and B's chunks, written through
  // Without the disk they are dropped.
  EXPECT_EQ(run_policy(trace, small_config(3), "lru").recomputed_tokens, 8);
}

// A turn the device has no room for waits, as the engine queues it: A holds 2 of 3 blocks from 0
// to 50; B arrives at 1 needing 2 and starts at 50, when A ends. B's next turn comes its think
// time (3 s) after it ends, at 54. A's chunks leave for the 2-chunk host as B needs the room, and
// come back for A's second turn at 60: nothing is recomputed (run uncached, B's first turn was).
TEST(CacheReplay, ATurnWithoutRoomWaitsForRunningTurnsToEnd) {
  const Trace trace = {conversation("A", {turn(0, 50, 8, 0), turn(60, 61, 12, 0)}),
                       conversation("B", {turn(1, 2, 8, 0), turn(5, 6, 12, 0)})};
  for (const char* name : {"lru", "pensieve", "mnemo", "oracle"}) {
    const PolicyOutcome o = run_policy(trace, small_config(3, 2), name);
    EXPECT_EQ(o.counters.device_overcommits, 0) << name;
    EXPECT_EQ(o.waited_turns, 1) << name;
    EXPECT_DOUBLE_EQ(o.wait_seconds, 49) << name;
    EXPECT_DOUBLE_EQ(o.longest_wait_s, 49) << name;
    EXPECT_EQ(o.hit_tokens[0], 8) << name;  // B's second turn
    EXPECT_EQ(o.hit_tokens[1], 8) << name;  // A's, from the host
    EXPECT_EQ(o.recomputed_tokens, 0) << name;
    EXPECT_EQ(o.counters.peak_device_chunks, 3) << name;
  }
}

// Waiting turns start oldest first: C (1 block) arrives at 2 behind B (2 blocks) with a block
// free, and waits for B's turn to start, as the engine's queue does not let a later request pass
// its head.
TEST(CacheReplay, WaitingTurnsStartInArrivalOrder) {
  const Trace trace = {conversation("A", {turn(0, 50, 8, 0)}), conversation("B", {turn(1, 2, 8, 0)}),
                       conversation("C", {turn(2, 3, 4, 0)})};
  const PolicyOutcome o = run_policy(trace, small_config(3), "lru");
  EXPECT_EQ(o.waited_turns, 2);
  EXPECT_DOUBLE_EQ(o.wait_seconds, 49 + 48);
  EXPECT_EQ(o.counters.device_overcommits, 0);
}

// A turn that needs more blocks than the whole device has is refused, as serve refuses it, and
// its conversation ends there: A's second turn needs 5 blocks of a 4-block device.
TEST(CacheReplay, ATurnTheDeviceCannotHoldIsRefusedAndEndsItsConversation) {
  const Trace trace = {conversation("A", {turn(0, 1, 8, 0), turn(10, 11, 17, 0), turn(20, 21, 24, 0)}),
                       conversation("B", {turn(30, 31, 11, 5), turn(40, 41, 16, 0)})};
  const PolicyOutcome o = run_policy(trace, small_config(4), "lru");
  EXPECT_EQ(o.turns, 3);  // A's first, B's two (16 tokens each: 4 blocks)
  EXPECT_EQ(o.refused_turns, 2);
  EXPECT_EQ(o.refused_prompt_tokens, 17 + 24);
  EXPECT_EQ(o.reusable_tokens, 12);  // B's second turn
  EXPECT_EQ(o.recomputed_tokens, 0);
  EXPECT_EQ(o.counters.device_overcommits, 0);
}

TEST(CacheReplay, RefusesADeviceWithoutAChunk) {
  SimConfig config = small_config(1);
  config.capacity_bytes[0] = 3;
  const auto o = replay_through_cache({}, config, RetentionPolicy::kLru, "lru");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message().find("holds no chunk"), std::string::npos);
}

}  // namespace
}  // namespace mnemo::sim
