// The chunk cache's exact states: which chunk each policy evicts, the cascade down the tiers
// (with bytes counted per direction), drops from the last tier, pins, and the victim search's
// shortcut (one end of each conversation, unless a measured cost dips) against a search over
// every chunk.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <random>

#include "sim/eviction_policy.h"
#include "sim/tiered_chunk_cache.h"
#include "sim_test_support.h"

namespace mnemo::sim {
namespace {

std::unique_ptr<EvictionPolicy> policy(std::string_view name, const CostModel& cost = testing::simple_costs()) {
  auto p = make_eviction_policy(name, cost, testing::kChunk);
  EXPECT_TRUE(p.ok());
  return std::move(*p);
}

// A measured profile whose cost dips: tokens near position 18 cost half of those near 0.
CostModel dipping_costs() {
  CostModel m = testing::simple_costs();
  m.measured.points = {{0, 4, 1.0}, {16, 4, 0.5}, {64, 4, 2.0}};
  return m;
}

// A finished turn: chunks [0, n) placed while pinned, then the conversation goes idle.
void hold(TieredChunkCache& cache, int32_t id, int32_t n, double last_used, double next_use, double now) {
  cache.set_pinned(id, true);
  for (int32_t j = 0; j < n; ++j) cache.place_on_device({id, j}, now);
  cache.set_last_used(id, last_used);
  cache.set_next_use(id, next_use);
  cache.set_pinned(id, false);
}

std::optional<Tier> where(const TieredChunkCache& cache, int32_t id, int32_t chunk) {
  return cache.conversation(id).tier_of(chunk);
}

// X (id 0): chunks 0-3, last used at 1, next turn at 100. Y (id 1): chunk 0, last used at 3,
// never returns. A 5-chunk device, full; the victims at time 10, three in a row.
std::vector<ChunkRef> three_victims(std::string_view name) {
  const auto p = policy(name);
  TieredChunkCache cache({5, 0, 0}, *p, 2);
  hold(cache, 0, 4, 1, 100, 1);
  hold(cache, 1, 1, 3, ConversationState::kNever, 3);
  std::vector<ChunkRef> victims;
  for (int i = 0; i < 3; ++i) {
    const std::optional<ChunkRef> v = cache.victim(Tier::kDevice, 10);
    if (!v) break;
    victims.push_back(*v);
    cache.discard(*v);
  }
  return victims;
}

TEST(EvictionOrder, LruTakesTheLeastRecentConversationLeadingChunksFirst) {
  EXPECT_EQ(three_victims("lru"), (std::vector<ChunkRef>{{0, 0}, {0, 1}, {0, 2}}));
}

TEST(EvictionOrder, TailFirstTakesTheLeastRecentConversationLastChunkFirst) {
  EXPECT_EQ(three_victims("tail-first"), (std::vector<ChunkRef>{{0, 3}, {0, 2}, {0, 1}}));
}

TEST(EvictionOrder, PensieveComparesCostOverIdleTimeAcrossConversations) {
  // At 10: X0 10/9 = 1.11, Y0 10/7 = 1.43, X1 26/9 = 2.89: the more recent Y loses its chunk
  // before X's second one.
  EXPECT_EQ(three_victims("pensieve"), (std::vector<ChunkRef>{{0, 0}, {1, 0}, {0, 1}}));
}

TEST(EvictionOrder, MnemoWithNothingLearntIsLru) {
  // No event was fed: every class has the prior's return probability, so the value falls with
  // the idle time alone.
  EXPECT_EQ(three_victims("mnemo"), (std::vector<ChunkRef>{{0, 0}, {0, 1}, {0, 2}}));
  EXPECT_EQ(three_victims("mnemo-no-ghosts"), (std::vector<ChunkRef>{{0, 0}, {0, 1}, {0, 2}}));
}

TEST(EvictionOrder, OracleTakesWhatIsNeverUsedAgainThenTheFarthestCheapestFirst) {
  EXPECT_EQ(three_victims("oracle"), (std::vector<ChunkRef>{{1, 0}, {0, 0}, {0, 1}}));
}

TEST(TierCascade, DeviceVictimsGoToHostAndHostVictimsAreDropped) {
  const auto lru = policy("lru");
  TieredChunkCache cache({1, 1, 0}, *lru, 3);
  hold(cache, 0, 1, 1, 0, 1);  // A0 on the device
  hold(cache, 1, 1, 2, 0, 2);  // B0 pushes A0 to the host
  EXPECT_EQ(where(cache, 0, 0), Tier::kHost);
  EXPECT_EQ(where(cache, 1, 0), Tier::kDevice);
  hold(cache, 2, 1, 3, 0, 3);  // C0 pushes B0 down; the host keeps B0 (newer) and drops A0
  EXPECT_EQ(where(cache, 0, 0), std::nullopt);
  EXPECT_EQ(where(cache, 1, 0), Tier::kHost);
  EXPECT_EQ(where(cache, 2, 0), Tier::kDevice);
  const CacheCounters& c = cache.counters();
  EXPECT_EQ(c.moved_chunks[0][1], 2);
  EXPECT_EQ(c.evicted_chunks[0], 2);
  EXPECT_EQ(c.evicted_chunks[1], 1);
  EXPECT_EQ(c.dropped_chunks, 1);
  EXPECT_EQ(cache.used_chunks(Tier::kDevice), 1);
  EXPECT_EQ(cache.used_chunks(Tier::kHost), 1);
}

TEST(TierCascade, TheDropListenerHearsEveryDropAfterTheChunkLeft) {
  const auto lru = policy("lru");
  TieredChunkCache cache({1, 1, 0}, *lru, 3);
  std::vector<std::pair<ChunkRef, double>> heard;
  cache.set_drop_listener([&](ChunkRef c, double now) {
    EXPECT_EQ(where(cache, c.conversation, c.chunk), std::nullopt);
    heard.emplace_back(c, now);
  });
  hold(cache, 0, 1, 1, 0, 1);
  hold(cache, 1, 1, 2, 0, 2);
  EXPECT_TRUE(heard.empty());  // A0 went to the host
  hold(cache, 2, 1, 3, 0, 3);  // A0 is dropped
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].first, (ChunkRef{0, 0}));
  EXPECT_EQ(heard[0].second, 3);
  cache.discard({1, 0});  // a discard is not a drop
  EXPECT_EQ(heard.size(), 1u);
}

TEST(TierCascade, ANewcomerWorseThanEverythingBelowSkipsToTheNextTierOrIsDropped) {
  const auto lru = policy("lru");
  TieredChunkCache cache({1, 1, 1}, *lru, 4);
  hold(cache, 0, 1, 5, 0, 5);   // A0 device
  hold(cache, 1, 1, 6, 0, 6);   // B0 device, A0 host
  hold(cache, 2, 1, 0, 0, 7);   // C0 device (then marked least recent), B0 host, A0 disk
  EXPECT_EQ(where(cache, 0, 0), Tier::kDisk);
  EXPECT_EQ(cache.counters().moved_chunks[1][2], 1);
  // D0 evicts C0 (used at 0): older than the host's B0 (6) and the disk's A0 (5): dropped.
  hold(cache, 3, 1, 8, 0, 8);
  EXPECT_EQ(where(cache, 2, 0), std::nullopt);
  EXPECT_EQ(where(cache, 1, 0), Tier::kHost);
  EXPECT_EQ(where(cache, 0, 0), Tier::kDisk);
  EXPECT_EQ(cache.counters().dropped_chunks, 1);
  EXPECT_EQ(cache.counters().moved_chunks[0][1], 2);  // A0, B0
  EXPECT_EQ(cache.counters().moved_chunks[0][2], 0);
  // Now the disk's A0 is older than a newcomer that the host refuses: it skips the host.
  cache.set_last_used(3, 5.5);  // D0: older than B0 (6), newer than A0 (5)
  hold(cache, 2, 1, 9, 0, 9);   // C0 again: evicts D0 -> not into the host, into the disk over A0
  EXPECT_EQ(where(cache, 3, 0), Tier::kDisk);
  EXPECT_EQ(where(cache, 0, 0), std::nullopt);
  EXPECT_EQ(cache.counters().moved_chunks[0][2], 1);
  EXPECT_EQ(cache.counters().dropped_chunks, 2);
}

TEST(TierCascade, PromotionMovesUpAndFreesTheLowerSlot) {
  const auto lru = policy("lru");
  TieredChunkCache cache({1, 1, 0}, *lru, 2);
  hold(cache, 0, 1, 1, 0, 1);  // A0
  hold(cache, 1, 1, 2, 0, 2);  // B0 device, A0 host
  hold(cache, 0, 1, 3, 0, 3);  // A's next turn: A0 comes up, B0 takes its host slot
  EXPECT_EQ(where(cache, 0, 0), Tier::kDevice);
  EXPECT_EQ(where(cache, 1, 0), Tier::kHost);
  EXPECT_EQ(cache.counters().moved_chunks[1][0], 1);
  EXPECT_EQ(cache.counters().moved_chunks[0][1], 2);
  EXPECT_EQ(cache.counters().dropped_chunks, 0);
}

TEST(Pinning, PinnedConversationsAreNeverVictimsAndTheDeviceOvercommitsInstead) {
  const auto lru = policy("lru");
  TieredChunkCache cache({2, 1, 0}, *lru, 2);
  cache.set_pinned(0, true);
  cache.place_on_device({0, 0}, 0);
  cache.place_on_device({0, 1}, 0);
  EXPECT_EQ(cache.victim(Tier::kDevice, 1), std::nullopt);
  cache.set_pinned(1, true);
  cache.place_on_device({1, 0}, 1);  // no unpinned chunk: over capacity
  EXPECT_EQ(cache.counters().device_overcommits, 1);
  EXPECT_EQ(cache.used_chunks(Tier::kDevice), 3);
  EXPECT_EQ(cache.counters().peak_device_chunks, 3);
  cache.set_pinned(1, false);
  cache.set_last_used(1, 2);
  cache.shrink_device_to_capacity(2);  // only B may go, although A was used longer ago
  EXPECT_EQ(cache.used_chunks(Tier::kDevice), 2);
  EXPECT_EQ(where(cache, 1, 0), Tier::kHost);
  EXPECT_EQ(where(cache, 0, 0), Tier::kDevice);
  // A pinned conversation is not a victim in the host either.
  cache.set_pinned(1, true);
  EXPECT_EQ(cache.victim(Tier::kHost, 3), std::nullopt);
}

TEST(VictimSearch, ChunkOrderFollowsTheCost) {
  EXPECT_EQ(policy("pensieve")->chunk_order(), ChunkOrder::kLeadingFirst);
  EXPECT_EQ(policy("oracle")->chunk_order(), ChunkOrder::kLeadingFirst);
  EXPECT_EQ(policy("pensieve", CostModel{})->chunk_order(), ChunkOrder::kLeadingFirst);
  EXPECT_EQ(policy("pensieve", dipping_costs())->chunk_order(), ChunkOrder::kAnyPosition);
  EXPECT_EQ(policy("oracle", dipping_costs())->chunk_order(), ChunkOrder::kAnyPosition);
  EXPECT_EQ(policy("lru", dipping_costs())->chunk_order(), ChunkOrder::kLeadingFirst);
  EXPECT_EQ(policy("tail-first")->chunk_order(), ChunkOrder::kTrailingFirst);
  EXPECT_EQ(policy("mnemo", dipping_costs())->chunk_order(), ChunkOrder::kLeadingFirst);  // weighs tokens, not costs
}

TEST(VictimSearch, FindsTheLowestKeyOfAllChunks) {
  std::vector<std::pair<std::string, CostModel>> cases;
  for (const std::string& name : eviction_policy_names()) cases.emplace_back(name, testing::simple_costs());
  cases.emplace_back("pensieve", dipping_costs());
  cases.emplace_back("oracle", dipping_costs());
  for (const auto& [name, cost] : cases) {
    const auto p = policy(name, cost);
    std::mt19937_64 rng(11);
    TieredChunkCache cache({12, 9, 7}, *p, 6);
    double now = 0;
    for (int step = 0; step < 400; ++step) {
      now += std::uniform_real_distribution<double>(0.1, 5)(rng);
      const auto id = static_cast<int32_t>(rng() % 6);
      const auto n = static_cast<int32_t>(1 + rng() % 8);
      const double next = rng() % 4 == 0 ? ConversationState::kNever : now + static_cast<double>(rng() % 100);
      hold(cache, id, n, now, next, now);
      if (rng() % 3 == 0) cache.set_pinned(static_cast<int32_t>(rng() % 6), true);
      for (const Tier t : kTiers) {
        std::optional<EvictionKey> lowest;
        for (int32_t c = 0; c < 6; ++c) {
          if (cache.conversation(c).pinned) continue;
          for (const int32_t j : cache.conversation(c).chunks_in[static_cast<size_t>(tier_index(t))]) {
            const EvictionKey k = p->key(cache.conversation(c), j, now + 1);
            if (!lowest || k < *lowest) lowest = k;
          }
        }
        const std::optional<ChunkRef> v = cache.victim(t, now + 1);
        ASSERT_EQ(v.has_value(), lowest.has_value()) << name;
        if (v) {
          EXPECT_EQ(p->key(cache.conversation(v->conversation), v->chunk, now + 1), *lowest) << name << " step " << step;
        }
      }
      for (int32_t c = 0; c < 6; ++c) cache.set_pinned(c, false);
    }
  }
}

}  // namespace
}  // namespace mnemo::sim
