// The suffix tree behind the tenant-history drafter: exact node counts and occurrence counts
// (against a brute-force count over random streams, through inserts and erases), the depth
// bound, frequency-ranked drafts with the recency tie-break, the confidence floor and
// re-anchoring past the depth.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/suffix_tree.h"

namespace mnemo {
namespace {

using Tokens = std::vector<TokenId>;

Tokens draft_of(const SuffixTree& tree, const Tokens& context, int32_t max_tokens) {
  Tokens out{99};  // drafts are appended
  const int32_t n = tree.draft(context, max_tokens, out);
  EXPECT_EQ(n + 1, static_cast<int32_t>(out.size()));
  EXPECT_EQ(out.front(), 99);
  return Tokens(out.begin() + 1, out.end());
}

TEST(SuffixTree, NodesAndCountsOfOneStream) {
  SuffixTree tree;
  tree.insert(Tokens{1, 2, 1, 2, 3}, 0);
  // Paths 1-2-1-2-3 (5 nodes), 1-2-3 (+1), 2-1-2-3 (4), 2-3 (+1), 3 (1).
  EXPECT_EQ(tree.nodes(), 12u);
  EXPECT_EQ(tree.count(Tokens{1}), 2u);
  EXPECT_EQ(tree.count(Tokens{1, 2}), 2u);
  EXPECT_EQ(tree.count(Tokens{2}), 2u);
  EXPECT_EQ(tree.count(Tokens{2, 3}), 1u);
  EXPECT_EQ(tree.count(Tokens{1, 2, 3}), 1u);
  EXPECT_EQ(tree.count(Tokens{1, 2, 1, 2, 3}), 1u);
  EXPECT_EQ(tree.count(Tokens{3, 1}), 0u);
  EXPECT_EQ(tree.count(Tokens{}), 0u);
  tree.erase(Tokens{1, 2, 1, 2, 3});
  EXPECT_EQ(tree.nodes(), 0u);
  EXPECT_EQ(tree.count(Tokens{1}), 0u);
}

TEST(SuffixTree, HoldsSubstringsUpToItsDepth) {
  SuffixTree tree({/*depth=*/3, /*min_match=*/2, /*max_match=*/2, /*min_confidence=*/0.25});
  tree.insert(Tokens{1, 2, 3, 4, 5}, 0);
  EXPECT_EQ(tree.nodes(), 12u);  // 3 + 3 + 3 + 2 + 1
  EXPECT_EQ(tree.count(Tokens{1, 2, 3}), 1u);
  EXPECT_EQ(tree.count(Tokens{1, 2, 3, 4}), 0u);
}

TEST(SuffixTree, CountsEqualABruteForceCountThroughInsertsAndErases) {
  std::mt19937 rng(7);
  const int32_t depth = 5;
  SuffixTree tree({depth, 2, 4, 0.25});
  std::vector<Tokens> streams;
  for (int s = 0; s < 40; ++s) {
    Tokens t(std::uniform_int_distribution<int>(1, 30)(rng));
    for (TokenId& x : t) x = std::uniform_int_distribution<TokenId>(0, 3)(rng);  // a small alphabet repeats
    streams.push_back(t);
  }
  std::vector<bool> held(streams.size(), false);
  for (int round = 0; round < 200; ++round) {
    const size_t i = std::uniform_int_distribution<size_t>(0, streams.size() - 1)(rng);
    if (held[i]) {
      tree.erase(streams[i]);
    } else {
      tree.insert(streams[i], static_cast<uint32_t>(round));
    }
    held[i] = !held[i];
    if (round % 20 != 19) continue;
    std::map<Tokens, uint32_t> expected;  // every substring of up to `depth` tokens
    for (size_t s = 0; s < streams.size(); ++s) {
      if (!held[s]) continue;
      for (size_t a = 0; a < streams[s].size(); ++a) {
        for (size_t b = a + 1; b <= std::min(streams[s].size(), a + depth); ++b) ++expected[Tokens(streams[s].begin() + a, streams[s].begin() + b)];
      }
    }
    EXPECT_EQ(tree.nodes(), expected.size()) << "round " << round;
    for (const auto& [substring, n] : expected) ASSERT_EQ(tree.count(substring), n);
  }
  for (size_t s = 0; s < streams.size(); ++s) {
    if (held[s]) tree.erase(streams[s]);
  }
  EXPECT_EQ(tree.nodes(), 0u);
}

TEST(SuffixTree, DraftsTheMostFrequentContinuationAndTheLatestOnATie) {
  SuffixTree tree;
  tree.insert(Tokens{1, 2, 5, 8}, 0);
  tree.insert(Tokens{1, 2, 5, 8}, 1);
  tree.insert(Tokens{1, 2, 6, 9}, 2);
  // "1 2" went on to 5 twice and to 6 once (the latest): frequency first.
  EXPECT_EQ(draft_of(tree, {7, 1, 2}, 4), (Tokens{5, 8}));
  tree.insert(Tokens{1, 2, 6, 9}, 3);
  // Now two each: the latest, 6.
  EXPECT_EQ(draft_of(tree, {7, 1, 2}, 4), (Tokens{6, 9}));
  // The longest suffix held decides: "5 8" is held, "2 5 8" too, and nothing follows either.
  EXPECT_TRUE(draft_of(tree, {2, 5, 8}, 4).empty());
  EXPECT_TRUE(draft_of(tree, {1, 2}, 0).empty());
  EXPECT_TRUE(draft_of(tree, {2}, 4).empty());  // shorter than min_match
}

TEST(SuffixTree, StopsBelowTheConfidenceFloor) {
  SuffixTree tree({12, 2, 8, /*min_confidence=*/0.3});
  for (uint32_t s = 0; s < 4; ++s) tree.insert(Tokens{1, 2, static_cast<TokenId>(10 + s), 20}, s);
  // Four continuations, one each: 0.25 < 0.3.
  EXPECT_TRUE(draft_of(tree, {1, 2}, 4).empty());
  tree.insert(Tokens{1, 2, 13, 21}, 4);
  // 13 now 2 of 5 (0.4), then "1 2 13" -> 20 or 21 at one each (0.4 x 0.5 = 0.2 < 0.3).
  EXPECT_EQ(draft_of(tree, {1, 2}, 4), (Tokens{13}));
}

TEST(SuffixTree, ReanchorsPastItsDepth) {
  SuffixTree tree({/*depth=*/4, 2, 2, 0.25});
  tree.insert(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0);
  EXPECT_EQ(draft_of(tree, {1, 2}, 20), (Tokens{3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(draft_of(tree, {1, 2}, 5), (Tokens{3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace mnemo
