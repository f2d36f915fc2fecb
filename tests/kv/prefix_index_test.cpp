// PrefixIndex: exact states of matches, inserts, namespaces and eviction order.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "kv/prefix_index.h"

namespace mnemo {
namespace {

std::vector<TokenId> seq(TokenId first, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<BlockId> blocks(const std::vector<PrefixIndex::Chunk>& chunks) {
  std::vector<BlockId> out;
  for (const auto& c : chunks) out.push_back(c.block);
  return out;
}

TEST(PrefixIndex, MatchesWholeChunksOfTheLongestCachedPrefix) {
  PrefixIndex index(4);
  const auto tokens = seq(100, 10);  // chunks [100..103] [104..107], 2 tokens left over
  EXPECT_EQ(index.insert(7, tokens, std::vector<BlockId>{5, 9, 11}, 1), (std::vector<BlockId>{5, 9}));
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(blocks(index.match(7, tokens, 10, 2)), (std::vector<BlockId>{5, 9}));
  EXPECT_EQ(blocks(index.match(7, seq(100, 7), 10, 2)), (std::vector<BlockId>{5}));  // second chunk incomplete
  EXPECT_EQ(blocks(index.match(7, tokens, 1, 2)), (std::vector<BlockId>{5}));        // capped
  auto diverging = tokens;
  diverging[5] = 0;
  EXPECT_EQ(blocks(index.match(7, diverging, 10, 2)), (std::vector<BlockId>{5}));
  diverging[0] = 0;
  EXPECT_TRUE(index.match(7, diverging, 10, 2).empty());
}

TEST(PrefixIndex, NamespacesNeverShare) {
  PrefixIndex index(4);
  const auto tokens = seq(1, 8);
  index.insert(1, tokens, std::vector<BlockId>{0, 1}, 1);
  EXPECT_TRUE(index.match(2, tokens, 10, 1).empty());
  EXPECT_EQ(index.insert(2, tokens, std::vector<BlockId>{2, 3}, 1), (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(blocks(index.match(2, tokens, 10, 1)), (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(blocks(index.match(1, tokens, 10, 1)), (std::vector<BlockId>{0, 1}));
}

TEST(PrefixIndex, InsertKeepsExistingChunksAndExtendsBranches) {
  PrefixIndex index(2);
  index.insert(0, seq(1, 4), std::vector<BlockId>{10, 11}, 1);
  // Same first chunk, different second: the first keeps block 10, a sibling branch is added.
  std::vector<TokenId> other = {1, 2, 9, 9, 8, 8};
  EXPECT_EQ(index.insert(0, other, std::vector<BlockId>{20, 21, 22}, 2), (std::vector<BlockId>{21, 22}));
  EXPECT_EQ(blocks(index.match(0, other, 10, 3)), (std::vector<BlockId>{10, 21, 22}));
  EXPECT_EQ(index.size(), 4u);
  EXPECT_TRUE(index.holds(10));
  EXPECT_FALSE(index.holds(20));
}

TEST(PrefixIndex, EvictsLeastRecentlyUsedLeavesFirstAndRespectsBlocksInUse) {
  PrefixIndex index(2);
  index.insert(0, std::vector<TokenId>{1, 1, 2, 2, 3, 3}, std::vector<BlockId>{0, 1, 2}, 1);  // path A: 0-1-2
  index.insert(0, std::vector<TokenId>{5, 5, 6, 6}, std::vector<BlockId>{3, 4}, 2);           // path B: 3-4
  index.match(0, std::vector<TokenId>{1, 1, 2, 2, 3, 3}, 10, 5);                               // A used last
  // Leaves are 2 (A, used at 5) and 4 (B, used at 2): B's leaf first, then B's root (now a leaf).
  EXPECT_EQ(index.evict(2, [](BlockId) { return true; }), (std::vector<BlockId>{4, 3}));
  // Block 2 is in use by a sequence: nothing else is a leaf, so nothing more can go.
  EXPECT_TRUE(index.evict(1, [](BlockId b) { return b != 2; }).empty());
  EXPECT_EQ(index.evict(5, [](BlockId) { return true; }), (std::vector<BlockId>{2, 1, 0}));
  EXPECT_EQ(index.size(), 0u);
  // Freed nodes are reused.
  EXPECT_EQ(index.insert(0, std::vector<TokenId>{7, 7}, std::vector<BlockId>{9}, 6), (std::vector<BlockId>{9}));
  EXPECT_EQ(index.size(), 1u);
}

TEST(PrefixIndex, ChunksMoveBetweenTiersAndKeepTheirPlaceInTheTrie) {
  PrefixIndex index(2);
  index.insert(0, std::vector<TokenId>{1, 1, 2, 2, 3, 3}, std::vector<BlockId>{0, 1, 2}, 1);
  const auto all = [](BlockId) { return true; };
  // Any device chunk may move to host (it can come back); the LRU one goes first.
  index.match(0, std::vector<TokenId>{1, 1}, 10, 5);  // chunk 0 used recently
  auto lru = index.least_recently_used(Tier::kDevice, /*leaves_only=*/false, all);
  ASSERT_TRUE(lru.has_value());
  EXPECT_EQ(lru->block, 1);
  index.relocate(lru->node, Tier::kHost, 7);
  EXPECT_TRUE(index.holds(7, Tier::kHost));
  EXPECT_FALSE(index.holds(1, Tier::kDevice));
  EXPECT_EQ(index.size(Tier::kDevice), 2u);
  EXPECT_EQ(index.size(Tier::kHost), 1u);
  const auto chain = index.match(0, std::vector<TokenId>{1, 1, 2, 2, 3, 3}, 10, 6);
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0].tier, Tier::kDevice);
  EXPECT_EQ(chain[1].tier, Tier::kHost);
  EXPECT_EQ(chain[1].block, 7);
  EXPECT_EQ(chain[2].tier, Tier::kDevice);
  // Only leaves are dropped: the host chunk has a child, so no host leaf exists.
  EXPECT_FALSE(index.least_recently_used(Tier::kHost, /*leaves_only=*/true, all).has_value());
  index.relocate(chain[1].node, Tier::kDevice, 4);
  EXPECT_EQ(blocks(index.match(0, std::vector<TokenId>{1, 1, 2, 2}, 10, 7)), (std::vector<BlockId>{0, 4}));
}

TEST(PrefixIndex, ABlockHoldsOneChunkOnly) {
  PrefixIndex index(2);
  index.insert(0, std::vector<TokenId>{1, 2}, std::vector<BlockId>{3}, 1);
  EXPECT_TRUE(index.insert(0, std::vector<TokenId>{4, 5}, std::vector<BlockId>{3}, 1).empty());
  EXPECT_EQ(index.size(), 1u);
}

}  // namespace
}  // namespace mnemo
