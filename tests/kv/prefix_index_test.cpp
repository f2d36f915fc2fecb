// PrefixIndex: exact states of matches, inserts, namespaces, copies across tiers, dropped chunks
// and the rebuild from disk extents.
#include <gtest/gtest.h>

#include <algorithm>
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
  for (const auto& c : chunks) out.push_back(c.device);
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

TEST(PrefixIndex, PathAndDescendantsLeaveLastUseAlone) {
  PrefixIndex index(2);
  index.insert(0, seq(1, 6), std::vector<BlockId>{10, 11, 12}, 1);  // a: 1 2 | 3 4 | 5 6
  std::vector<TokenId> branch = {1, 2, 3, 4, 9, 9, 8, 8};           // b: shares two chunks
  index.insert(0, branch, std::vector<BlockId>{20, 21, 22, 23}, 2);
  const auto path = index.path(0, seq(1, 4));
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(index.n_children(path[1]), 2);
  EXPECT_TRUE(index.path(1, seq(1, 4)).empty());  // another namespace
  // Below chunk 1: a's last chunk, and b's two, children before parents.
  const auto below = index.descendants(path[1]);
  ASSERT_EQ(below.size(), 3u);
  std::set<BlockId> devices;
  for (auto node : below) devices.insert(index.chunk(node).device);
  EXPECT_EQ(devices, (std::set<BlockId>{12, 22, 23}));
  const auto pos = [&](BlockId b) {
    return std::find_if(below.begin(), below.end(), [&](auto n) { return index.chunk(n).device == b; }) - below.begin();
  };
  EXPECT_LT(pos(23), pos(22));
  EXPECT_TRUE(index.descendants(below[0]).empty());
  EXPECT_DOUBLE_EQ(index.chunk(path[0]).last_use, 2.0);  // the second insert's, not touched since
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
  EXPECT_TRUE(index.holds(10, Tier::kDevice));
  EXPECT_FALSE(index.holds(20, Tier::kDevice));
}

TEST(PrefixIndex, ChunksKeepCopiesInSeveralTiersAndAreForgottenWithTheLast) {
  PrefixIndex index(2);
  index.insert(0, seq(1, 6), std::vector<BlockId>{10, 11, 12}, 1);
  const auto chain = index.match(0, seq(1, 6), 10, 2);
  ASSERT_EQ(chain.size(), 3u);
  index.set_host(chain[1].node, 7);  // copied down: both copies
  EXPECT_TRUE(index.holds(11, Tier::kDevice));
  EXPECT_TRUE(index.holds(7, Tier::kHost));
  index.set_device(chain[1].node, kNoBlock);  // device copy reclaimed
  EXPECT_EQ(index.size(Tier::kDevice), 2u);
  EXPECT_EQ(index.size(Tier::kHost), 1u);
  const auto again = index.match(0, seq(1, 6), 10, 3);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[1].device, kNoBlock);
  EXPECT_EQ(again[1].host, 7);
  EXPECT_TRUE(again[1].has(Tier::kHost));
  EXPECT_FALSE(again[1].dropped());
  EXPECT_EQ(again[2].position, 2);
  EXPECT_DOUBLE_EQ(again[2].last_use, 2.0);  // the previous use, as the match found it
  EXPECT_DOUBLE_EQ(index.chunk(again[2].node).last_use, 3.0);
  EXPECT_DOUBLE_EQ(chain[0].last_use, 1.0);  // inserted at 1
  // The leaf's last copy goes: the leaf is forgotten; the middle one still has its host copy.
  index.set_device(again[2].node, kNoBlock);
  EXPECT_EQ(index.size(), 2u);
  EXPECT_FALSE(index.live(again[2].node));
}

TEST(PrefixIndex, AFreedNodesIdStaysStaleWhenItsSlotIsReused) {
  PrefixIndex index(2);
  index.insert(0, seq(1, 4), std::vector<BlockId>{10, 11}, 1);
  const auto chain = index.match(0, seq(1, 4), 10, 2);
  ASSERT_EQ(chain.size(), 2u);
  const PrefixIndex::NodeId freed = chain[1].node;
  index.set_device(freed, kNoBlock);  // its last copy: the node is freed
  EXPECT_FALSE(index.live(freed));
  index.insert(0, seq(50, 4), std::vector<BlockId>{20, 21}, 2);  // new nodes take the freed slot
  const auto other = index.match(0, seq(50, 4), 10, 3);
  ASSERT_EQ(other.size(), 2u);
  bool slot_reused = false;
  for (const auto& c : other) slot_reused = slot_reused || (c.node & 0xffffffff) == (freed & 0xffffffff);
  EXPECT_TRUE(slot_reused);  // the same slot, under another id
  EXPECT_FALSE(index.live(freed));  // the old id does not name the new chunk
  EXPECT_TRUE(index.live(other[0].node) && index.live(other[1].node));
  EXPECT_DEATH((void)index.chunk(freed), "stale node id");
}

TEST(PrefixIndex, ACompactCopyOnTheDeviceIsACopyOfItsOwn) {
  PrefixIndex index(2);
  std::vector<std::pair<uint64_t, ChunkHold>> events;
  index.set_observer([&](uint64_t key, ChunkHold hold) { events.emplace_back(key, hold); });
  index.insert(0, seq(1, 4), std::vector<BlockId>{10, 11}, 1);
  auto chain = index.match(0, seq(1, 4), 10, 2);
  events.clear();
  index.set_device_slot(chain[0].node, 33);  // shrunk on the device: both copies for a moment
  EXPECT_TRUE(events.empty());                // it still holds every layer in its block
  index.set_device(chain[0].node, kNoBlock);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], std::make_pair(chain[0].key, ChunkHold::kCompact));
  EXPECT_EQ(index.node_at_device_slot(33), chain[0].node);
  EXPECT_FALSE(index.holds(10, Tier::kDevice));
  EXPECT_EQ(index.size(Tier::kDevice), 1u);
  EXPECT_EQ(index.n_device_slots(), 1u);
  EXPECT_EQ(index.n_dropped(), 0u);
  chain = index.match(0, seq(1, 4), 10, 3);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[0].device_slot, 33);
  EXPECT_FALSE(chain[0].dropped());
  EXPECT_FALSE(chain[0].has_full());
  EXPECT_FALSE(chain[0].has(Tier::kDevice));  // a whole block, which it has not
  int slots = 0;
  index.for_each_device_slot([&](const PrefixIndex::Chunk& c) { slots += c.device_slot == 33 ? 1 : 100; });
  EXPECT_EQ(slots, 1);
  // A match may end on it (it is a copy); without the leaf, it is the last copy of a leaf.
  index.set_device(chain[1].node, kNoBlock);
  EXPECT_EQ(index.match(0, seq(1, 4), 10, 4).size(), 1u);
  index.set_device_slot(chain[0].node, kNoBlock);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_FALSE(index.node_at_device_slot(33).has_value());
  EXPECT_EQ(events.back(), std::make_pair(chain[0].key, ChunkHold::kNone));
}

TEST(PrefixIndex, DroppedLeadingChunksStayWhileLaterChunksHoldKv) {
  PrefixIndex index(2);
  index.insert(0, seq(1, 8), std::vector<BlockId>{10, 11, 12, 13}, 1);
  auto chain = index.match(0, seq(1, 8), 10, 2);
  index.set_device(chain[0].node, kNoBlock);  // dropped: tokens known, KV gone
  index.set_device(chain[1].node, kNoBlock);
  EXPECT_EQ(index.size(), 4u);
  EXPECT_EQ(index.n_dropped(), 2u);
  chain = index.match(0, seq(1, 8), 10, 3);
  ASSERT_EQ(chain.size(), 4u);
  EXPECT_TRUE(chain[0].dropped());
  EXPECT_TRUE(chain[1].dropped());
  EXPECT_EQ(blocks(chain), (std::vector<BlockId>{kNoBlock, kNoBlock, 12, 13}));
  // A match never ends on dropped chunks: with only the dropped prefix in reach, it is empty.
  EXPECT_TRUE(index.match(0, seq(1, 4), 10, 4).empty());
  // Re-inserting the recomputed chunks gives them their new blocks back.
  EXPECT_EQ(index.insert(0, seq(1, 8), std::vector<BlockId>{20, 21, 12, 13}, 5), (std::vector<BlockId>{20, 21}));
  EXPECT_EQ(index.n_dropped(), 0u);
  // Dropping the later chunks now forgets the whole dropped tail, then stops at a chunk with KV.
  chain = index.match(0, seq(1, 8), 10, 6);
  index.set_device(chain[1].node, kNoBlock);
  index.set_device(chain[3].node, kNoBlock);  // leaf gone
  EXPECT_EQ(index.size(), 3u);
  index.set_device(chain[2].node, kNoBlock);  // leaf gone, and its dropped parent with it
  EXPECT_EQ(index.size(), 1u);
  EXPECT_EQ(blocks(index.match(0, seq(1, 8), 10, 7)), (std::vector<BlockId>{20}));
}

TEST(PrefixIndex, ABlockHoldsOneChunkOnly) {
  PrefixIndex index(2);
  index.insert(0, seq(1, 2), std::vector<BlockId>{3}, 1);
  // Another chunk offered in the same block (a bug upstream) is not indexed.
  EXPECT_TRUE(index.insert(0, seq(50, 2), std::vector<BlockId>{3}, 1).empty());
  EXPECT_EQ(index.size(), 1u);
  EXPECT_EQ(index.node_at(3, Tier::kDevice), index.match(0, seq(1, 2), 1, 2)[0].node);
}

TEST(PrefixIndex, RebuildsFromExtentHeaders) {
  PrefixIndex original(2);
  std::vector<TokenId> a = {1, 2, 3, 4, 5, 6};
  std::vector<TokenId> b = {1, 2, 9, 9};
  original.insert(4, a, std::vector<BlockId>{0, 1, 2}, 1);
  original.insert(4, b, std::vector<BlockId>{0, 3}, 1);
  struct Header {
    uint64_t key, parent_key;
    int32_t position;
    std::vector<TokenId> tokens;
  };
  std::vector<Header> headers;
  original.for_each_in(Tier::kDevice, [&](const PrefixIndex::Chunk& c) {
    const auto t = original.chunk_tokens_of(c.node);
    headers.push_back({c.key, c.parent_key, c.position, {t.begin(), t.end()}});
  });
  ASSERT_EQ(headers.size(), 4u);
  std::sort(headers.begin(), headers.end(), [](const Header& x, const Header& y) { return x.position < y.position; });
  PrefixIndex restored(2);
  // A child before its parent, a wrong key, a foreign namespace: refused.
  EXPECT_FALSE(restored.restore(4, headers.back().parent_key, headers.back().key, headers.back().tokens, 1).has_value());
  EXPECT_FALSE(restored.restore(4, 0, headers[0].key ^ 1, headers[0].tokens, 1).has_value());
  EXPECT_FALSE(restored.restore(5, 0, headers[0].key, headers[0].tokens, 1).has_value());
  for (const Header& h : headers) EXPECT_TRUE(restored.restore(4, h.parent_key, h.key, h.tokens, 1).has_value());
  EXPECT_EQ(restored.size(), 4u);
  EXPECT_EQ(restored.size(Tier::kDisk), 4u);
  const auto chain = restored.match(4, a, 10, 2);
  ASSERT_EQ(chain.size(), 3u);
  for (const auto& c : chain) {
    EXPECT_EQ(c.disk, DiskCopy::kPresent);
    EXPECT_EQ(c.device, kNoBlock);
  }
  EXPECT_EQ(restored.match(4, b, 10, 2).size(), 2u);
  EXPECT_TRUE(restored.match(5, a, 10, 2).empty());
}

}  // namespace
}  // namespace mnemo
