// EvictionOrder without storage: the order each policy gives the chunks of a real PrefixIndex,
// the tie-break, the eligibility filter, and what the learnt policy observes.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "kv/eviction_order.h"

namespace mnemo::testing {
namespace {

std::vector<TokenId> run_of(TokenId first, int32_t n) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

ChunkGeometry two_token_chunks() {
  ChunkGeometry g;
  g.chunk_tokens = 2;
  g.n_layers = 2;
  g.chunk_bytes = 64;
  return g;
}

CostModel steep_cost() {
  CostModel cost;
  cost.per_token_seconds = 1.0;
  cost.per_context_token_seconds = 1.0;  // a chunk's cost grows with its position
  return cost;
}

// Conversation A (2 chunks, cached at t=10, blocks 0 1) and B (2 chunks, t=12, blocks 2 3).
class EvictionOrderTest : public ::testing::Test {
 protected:
  EvictionOrderTest() {
    index_.insert(1, run_of(100, 4), std::vector<BlockId>{0, 1}, 10);
    index_.insert(1, run_of(200, 4), std::vector<BlockId>{2, 3}, 12);
  }
  std::vector<BlockId> order(const EvictionOrder& eviction, double now) const {
    std::vector<BlockId> out;
    std::vector<BlockId> taken;
    for (int i = 0; i < 4; ++i) {
      const auto next = eviction.lowest(index_, Tier::kDevice, [&](const PrefixIndex::Chunk& c) {
        return std::find(taken.begin(), taken.end(), c.device) == taken.end();
      }, now);
      if (!next) break;
      taken.push_back(next->device);
      out.push_back(next->device);
    }
    return out;
  }
  PrefixIndex index_{2};
};

TEST_F(EvictionOrderTest, LruTakesTheOldestConversationHeadFirst) {
  const EvictionOrder lru(RetentionPolicy::kLru, steep_cost(), {}, two_token_chunks());
  EXPECT_EQ(order(lru, 20), (std::vector<BlockId>{0, 1, 2, 3}));
}

TEST_F(EvictionOrderTest, PensieveTakesEveryHeadBeforeAnyTail) {
  // V = cost(position) / idle: a head costs less than a tail, so both heads go first; among
  // heads the longer idle (A, 10 s) has the lower value.
  const EvictionOrder pensieve(RetentionPolicy::kPensieve, steep_cost(), {}, two_token_chunks());
  EXPECT_EQ(order(pensieve, 20), (std::vector<BlockId>{0, 2, 1, 3}));
}

TEST_F(EvictionOrderTest, TiesGoToTheOlderThenTheLeadingChunk) {
  const EvictionOrder lru(RetentionPolicy::kLru, steep_cost(), {}, two_token_chunks());
  PrefixIndex::Chunk a;
  a.last_use = 5;
  a.position = 3;
  PrefixIndex::Chunk b = a;
  b.position = 1;
  EXPECT_TRUE(lru.leaves_before(1.0, b, 1.0, a));
  EXPECT_FALSE(lru.leaves_before(1.0, a, 1.0, b));
  // Tail-first: the trailing chunk of the same conversation.
  const EvictionOrder tail_first(RetentionPolicy::kTailFirst, steep_cost(), {}, two_token_chunks());
  EXPECT_TRUE(tail_first.leaves_before(1.0, a, 1.0, b));
  EXPECT_FALSE(tail_first.leaves_before(1.0, b, 1.0, a));
  b.last_use = 6;
  EXPECT_TRUE(lru.leaves_before(1.0, a, 1.0, b));
  EXPECT_TRUE(lru.leaves_before(0.5, b, 1.0, a));  // the score first
}

TEST_F(EvictionOrderTest, TheOracleTakesTheFarthestNextUseFirst) {
  // Chunks told apart by position here: 0 is next used at 50, 1 never, 2 at 30, 3 at 80.
  const auto next_use = [](const PrefixIndex::Chunk& c) {
    constexpr double kAt[] = {50, std::numeric_limits<double>::infinity(), 30, 80};
    return kAt[static_cast<size_t>(c.position) % 4];
  };
  const EvictionOrder oracle(RetentionPolicy::kOracle, steep_cost(), {}, two_token_chunks(), next_use);
  PrefixIndex::Chunk c[4];
  for (int32_t i = 0; i < 4; ++i) c[i].position = i;
  const auto leaves_first = [&](int32_t x, int32_t y) {
    return oracle.leaves_before(oracle.score(c[x], 0), c[x], oracle.score(c[y], 0), c[y]);
  };
  EXPECT_TRUE(leaves_first(1, 3));  // never before anything
  EXPECT_TRUE(leaves_first(3, 0));
  EXPECT_TRUE(leaves_first(0, 2));
  EXPECT_FALSE(leaves_first(2, 0));
  EXPECT_TRUE(oracle.reuses_after_gap());
  EXPECT_FALSE(EvictionOrder(RetentionPolicy::kTailFirst, steep_cost(), {}, two_token_chunks()).reuses_after_gap());
}

TEST_F(EvictionOrderTest, OnlyTheLearntPolicyObservesEvents) {
  EvictionOrder lru(RetentionPolicy::kLru, steep_cost(), {}, two_token_chunks());
  EvictionOrder mnemo(RetentionPolicy::kMnemo, steep_cost(), {}, two_token_chunks());
  for (EvictionOrder* e : {&lru, &mnemo}) e->observe_insert(2, 2, 10);
  EXPECT_EQ(lru.model().pending_groups(), 0u);
  ASSERT_EQ(mnemo.model().pending_groups(), 1u);
  const auto chain = index_.match(1, run_of(100, 4), 2, 30);
  for (EvictionOrder* e : {&lru, &mnemo}) e->observe_returns(chain, 30);
  EXPECT_EQ(lru.model().observed_conversations(), 0);
  EXPECT_GT(mnemo.model().observed_conversations(), 0);  // the return resolved the insert
}

TEST_F(EvictionOrderTest, SlruAndArcTakeOnceUsedChunksBeforeReusedOnes) {
  // A is matched again at 11 (reused, yet older than B, cached once at 12).
  index_.match(1, run_of(100, 4), 2, 11);
  const EvictionOrder lru(RetentionPolicy::kLru, steep_cost(), {}, two_token_chunks());
  EXPECT_EQ(order(lru, 20), (std::vector<BlockId>{0, 1, 2, 3}));
  EvictionOrder slru(RetentionPolicy::kSlru, steep_cost(), {}, two_token_chunks());
  EvictionOrder arc(RetentionPolicy::kArc, steep_cost(), {}, two_token_chunks());
  for (EvictionOrder* e : {&slru, &arc}) {
    EXPECT_EQ(order(*e, 20), (std::vector<BlockId>{2, 3, 0, 1}));  // by the scan
    e->rank(index_);
    EXPECT_EQ(order(*e, 20), (std::vector<BlockId>{2, 3, 0, 1}));  // by the classes
    EXPECT_EQ(index_.class_size(PrefixIndex::Copies::kDevice, 0), 2u);
    EXPECT_EQ(index_.class_size(PrefixIndex::Copies::kDevice, 1), 2u);
  }
  // SLRU: the reused group may hold 80% of a tier; past that its oldest goes first. Here half.
  EXPECT_DOUBLE_EQ(slru.recent_share(), 0.2);
  // ARC starts with no room for once-used chunks and adapts: the return of a dropped chunk that
  // was cached once widens their share by a chunk of the index (4), a reused one's narrows it.
  EXPECT_DOUBLE_EQ(arc.recent_share(), 0.0);
  PrefixIndex::Chunk ghost;  // no copy: a return of a dropped chunk
  arc.observe_returns({ghost, ghost}, 21);
  EXPECT_DOUBLE_EQ(arc.recent_share(), 0.5);
  ghost.reused = true;
  arc.observe_returns({ghost}, 22);
  EXPECT_DOUBLE_EQ(arc.recent_share(), 0.25);
  arc.observe_returns({ghost, ghost, ghost}, 23);
  EXPECT_DOUBLE_EQ(arc.recent_share(), 0.0);  // never below 0
}

TEST_F(EvictionOrderTest, AnEndedConversationLeavesFirstUnderTheLearntPolicyOnly) {
  // B (the newer conversation, blocks 2 3) is ended by its client: the learnt policy takes it
  // before A, in its own rank class and by the scan alike; LRU, a baseline, keeps its order.
  EvictionOrder lru(RetentionPolicy::kLru, steep_cost(), {}, two_token_chunks());
  EvictionOrder mnemo(RetentionPolicy::kMnemo, steep_cost(), {}, two_token_chunks());
  mnemo.observe_insert(2, 2, 10);
  mnemo.observe_insert(2, 2, 12);
  ASSERT_EQ(mnemo.model().pending_groups(), 2u);
  std::vector<PrefixIndex::Chunk> b;
  for (const PrefixIndex::NodeId node : index_.path(1, run_of(200, 4))) b.push_back(index_.chunk(node));
  mnemo.observe_end(b, 20);
  EXPECT_EQ(mnemo.model().pending_groups(), 1u);  // B's chunks left the model's observation
  for (const PrefixIndex::Chunk& c : b) index_.set_ended(c.node);
  EXPECT_TRUE(index_.chunk(b[1].node).ended);
  EXPECT_EQ(order(lru, 20), (std::vector<BlockId>{0, 1, 2, 3}));
  EXPECT_EQ(order(mnemo, 20), (std::vector<BlockId>{2, 3, 0, 1}));
  mnemo.rank(index_);
  EXPECT_EQ(index_.n_rank_classes(PrefixIndex::Copies::kDevice), 2u);  // A's class and the ended
  EXPECT_EQ(order(mnemo, 20), (std::vector<BlockId>{2, 3, 0, 1}));
  // An ended chunk dropped is not observed again (its observation ended with the end).
  mnemo.observe_drop(index_.chunk(b[0].node), 25);
  EXPECT_EQ(mnemo.model().observed_conversations(), 0);
  // A request through B again: it is a conversation like any other.
  index_.match(1, run_of(200, 4), 2, 30);
  EXPECT_FALSE(index_.chunk(b[0].node).ended);
  EXPECT_FALSE(index_.chunk(b[1].node).ended);
  EXPECT_EQ(order(mnemo, 30), (std::vector<BlockId>{0, 1, 2, 3}));
}

TEST_F(EvictionOrderTest, APinnedConversationStaysUntilNothingElseCanLeaveOrItsPinRunsOut) {
  // A (the older conversation, blocks 0 1) is pinned until t=50: every policy that honours pins
  // takes B first, by classes and by the scan alike; the oracle and tail-first do not honour it.
  for (const PrefixIndex::NodeId node : index_.path(1, run_of(100, 4))) index_.pin(node, 50);
  EXPECT_EQ(index_.n_pinned(), 2u);
  EXPECT_TRUE(index_.chunk(index_.path(1, run_of(100, 4))[0]).pinned);
  for (const RetentionPolicy policy : {RetentionPolicy::kLru, RetentionPolicy::kPensieve, RetentionPolicy::kMnemo,
                                       RetentionPolicy::kSlru, RetentionPolicy::kArc}) {
    EvictionOrder eviction(policy, steep_cost(), {}, two_token_chunks());
    EXPECT_TRUE(eviction.honours_pins());
    EXPECT_EQ(order(eviction, 20), (std::vector<BlockId>{2, 3, 0, 1})) << static_cast<int>(policy);  // by the scan
    eviction.rank(index_);
    EXPECT_EQ(order(eviction, 20), (std::vector<BlockId>{2, 3, 0, 1})) << static_cast<int>(policy);  // by classes
    EXPECT_EQ(eviction.score(index_.chunk(index_.path(1, run_of(100, 4))[0]), 20), std::numeric_limits<double>::infinity());
  }
  const EvictionOrder tail_first(RetentionPolicy::kTailFirst, steep_cost(), {}, two_token_chunks());
  EXPECT_FALSE(tail_first.honours_pins());
  EXPECT_EQ(order(tail_first, 20), (std::vector<BlockId>{1, 0, 3, 2}));
  // A shorter pin does not shorten it; the pin runs out at 50, not before.
  index_.pin(index_.path(1, run_of(100, 4))[0], 30);
  index_.expire_pins(49.9);
  EXPECT_EQ(index_.n_pinned(), 2u);
  index_.expire_pins(50);
  EXPECT_EQ(index_.n_pinned(), 0u);
  EvictionOrder lru(RetentionPolicy::kLru, steep_cost(), {}, two_token_chunks());
  lru.rank(index_);
  EXPECT_EQ(order(lru, 60), (std::vector<BlockId>{0, 1, 2, 3}));
}

TEST_F(EvictionOrderTest, AnExtendedPinLastsAndAnEndLiftsIt) {
  const auto a = index_.path(1, run_of(100, 4));
  index_.pin(a[0], 40);
  index_.pin(a[0], 80);  // a later request's keep-alive
  index_.expire_pins(40);
  EXPECT_TRUE(index_.chunk(a[0]).pinned);
  EXPECT_EQ(index_.chunk(a[0]).pinned_until, 80);
  index_.set_ended(a[0]);  // the client's last word
  EXPECT_FALSE(index_.chunk(a[0]).pinned);
  EXPECT_EQ(index_.n_pinned(), 0u);
  index_.expire_pins(100);  // the stale entries of the lifted pin change nothing
  EXPECT_EQ(index_.n_pinned(), 0u);
  EXPECT_TRUE(index_.chunk(a[0]).ended);
}

TEST_F(EvictionOrderTest, WhenEveryChunkIsPinnedTheOldestPinnedLeaves) {
  for (const TokenId first : {100, 200}) {
    for (const PrefixIndex::NodeId node : index_.path(1, run_of(first, 4))) index_.pin(node, 1000);
  }
  EvictionOrder mnemo(RetentionPolicy::kMnemo, steep_cost(), {}, two_token_chunks());
  EXPECT_EQ(order(mnemo, 20), (std::vector<BlockId>{0, 1, 2, 3}));
  mnemo.rank(index_);
  EXPECT_EQ(order(mnemo, 20), (std::vector<BlockId>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace mnemo::testing
