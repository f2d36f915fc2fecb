// PrefixIndex ghosts (keep_ghosts): chunks left with no copy and nothing below them are kept up
// to a capacity, the earliest forgotten first; a match reports them; a deletion forgets them.
#include <gtest/gtest.h>

#include <vector>

#include "kv/kv_test_support.h"
#include "kv/prefix_index.h"

namespace mnemo {
namespace {

using testing::tokens_from;

// Inserts a two-chunk sequence (2-token chunks) starting at `first` on device blocks b, b + 1 and
// drops both (leaf first, as eviction does); returns its nodes.
std::vector<PrefixIndex::NodeId> insert_and_drop(PrefixIndex& index, TokenId first, BlockId b, double now) {
  index.insert(0, tokens_from(first, 4), std::vector<BlockId>{b, b + 1}, now);
  const auto nodes = index.path(0, tokens_from(first, 4));
  index.set_device(nodes[1], kNoBlock);
  index.set_device(nodes[0], kNoBlock);
  return nodes;
}

TEST(PrefixIndexGhosts, WithoutGhostsADroppedSequenceIsForgotten) {
  PrefixIndex index(2);
  std::vector<PrefixIndex::Chunk> forgotten;
  index.set_forget_listener([&](const PrefixIndex::Chunk& c) { forgotten.push_back(c); });
  insert_and_drop(index, 10, 0, 1);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.n_ghosts(), 0u);
  ASSERT_EQ(forgotten.size(), 2u);
  EXPECT_EQ(forgotten[0].position, 1);  // the leaf, then its parent
  EXPECT_EQ(forgotten[1].position, 0);
  EXPECT_TRUE(index.match(0, tokens_from(10, 4), 10, 5).empty());
}

TEST(PrefixIndexGhosts, GhostsAreKeptUpToTheCapacityOldestForgottenFirst) {
  PrefixIndex index(2);
  index.keep_ghosts(3);  // chunks without a copy
  std::vector<int32_t> forgotten_positions;
  index.set_forget_listener([&](const PrefixIndex::Chunk& c) { forgotten_positions.push_back(c.position); });
  insert_and_drop(index, 10, 0, 1);  // A1 a ghost, A0 dropped above it
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(index.n_dropped(), 2u);
  EXPECT_EQ(index.n_ghosts(), 1u);
  EXPECT_TRUE(forgotten_positions.empty());
  // A match reports both, with the facts they had (last use 1).
  const auto chain = index.match(0, tokens_from(10, 4), 10, 5);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_TRUE(chain[0].dropped() && chain[1].dropped());
  EXPECT_DOUBLE_EQ(chain[1].last_use, 1);
  // B: four chunks without a copy, one too many: A's (the earliest ghost, and its parent) go.
  insert_and_drop(index, 50, 2, 6);
  EXPECT_EQ(forgotten_positions, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(index.n_dropped(), 2u);
  EXPECT_EQ(index.n_ghosts(), 1u);
  EXPECT_TRUE(index.match(0, tokens_from(10, 4), 10, 7).empty());
  EXPECT_EQ(index.match(0, tokens_from(50, 4), 10, 7).size(), 2u);
}

TEST(PrefixIndexGhosts, AGhostThatIsCachedAgainIsNoLongerOne) {
  PrefixIndex index(2);
  index.keep_ghosts(2);
  const auto a = insert_and_drop(index, 10, 0, 1);
  index.set_device(a[0], 7);  // A0 recomputed and cached again
  EXPECT_FALSE(index.chunk(a[0]).dropped());
  insert_and_drop(index, 50, 2, 6);  // B: three without a copy; A1 goes, A0 stays (it has a copy)
  EXPECT_TRUE(index.live(a[0]));
  EXPECT_FALSE(index.live(a[1]));
  EXPECT_EQ(index.chunk(a[0]).device, 7);
  EXPECT_EQ(index.n_dropped(), 2u);  // B's
  EXPECT_EQ(index.n_ghosts(), 1u);
}

TEST(PrefixIndexGhosts, ForgetNowErasesAGhostAndItsEmptyParents) {
  PrefixIndex index(2);
  index.keep_ghosts(10);
  std::vector<int32_t> forgotten_positions;
  index.set_forget_listener([&](const PrefixIndex::Chunk& c) { forgotten_positions.push_back(c.position); });
  const auto a = insert_and_drop(index, 10, 0, 1);
  index.forget_now(a[1]);
  EXPECT_EQ(forgotten_positions, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.n_ghosts(), 0u);
  EXPECT_TRUE(index.match(0, tokens_from(10, 4), 10, 2).empty());
}

}  // namespace
}  // namespace mnemo
