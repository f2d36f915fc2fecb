// The router's prompt trees: exact matches by whole chunks, per instance, with a TTL.
#include <gtest/gtest.h>

#include "router/prompt_tree.h"

namespace mnemo::router {
namespace {

TEST(PromptTree, MatchesWholeLeadingChunksOfTheSameInstanceOnly) {
  PromptTree tree(4, 100);
  tree.record("a", "abcdefghij", 0);  // chunks "abcd", "efgh"; "ij" is not whole
  EXPECT_EQ(tree.size("a"), 2u);
  EXPECT_EQ(tree.matched_bytes("a", "abcdefghij", 1), 8u);
  EXPECT_EQ(tree.matched_bytes("a", "abcdefgXYZ", 1), 4u);   // diverges in the second chunk
  EXPECT_EQ(tree.matched_bytes("a", "abcdefghijklmnop", 1), 8u);
  EXPECT_EQ(tree.matched_bytes("a", "Xbcdefghij", 1), 0u);   // a chunk's key stands for its whole prefix
  EXPECT_EQ(tree.matched_bytes("b", "abcdefghij", 1), 0u);
  EXPECT_EQ(tree.matched_bytes("a", "abc", 1), 0u);
}

TEST(PromptTree, ALaterChunkDoesNotMatchAfterADifferentPrefix) {
  PromptTree tree(4, 100);
  tree.record("a", "1111abcd", 0);
  // "abcd" after "2222" is another prefix, even though the chunk's bytes are the same.
  EXPECT_EQ(tree.matched_bytes("a", "2222abcd", 1), 0u);
  tree.record("a", "2222", 0);
  EXPECT_EQ(tree.matched_bytes("a", "2222abcd", 1), 4u);
}

TEST(PromptTree, EntriesExpireUnlessRefreshed) {
  PromptTree tree(4, 10);
  tree.record("a", "abcdefgh", 0);
  tree.record("a", "abcd", 8);  // refreshes the first chunk only
  EXPECT_EQ(tree.matched_bytes("a", "abcdefgh", 10), 8u);
  EXPECT_EQ(tree.matched_bytes("a", "abcdefgh", 11), 4u);
  EXPECT_EQ(tree.matched_bytes("a", "abcdefgh", 19), 0u);
  tree.expire(11);
  EXPECT_EQ(tree.size("a"), 1u);
  tree.expire(19);
  EXPECT_EQ(tree.size("a"), 0u);
  EXPECT_TRUE(tree.instances().empty());
}

TEST(PromptTree, AnInstanceThatLeavesIsForgotten) {
  PromptTree tree(4, 10);
  tree.record("a", "abcd", 0);
  tree.record("b", "abcd", 0);
  tree.forget_instance("a");
  EXPECT_EQ(tree.instances(), std::vector<std::string>{"b"});
  EXPECT_EQ(tree.matched_bytes("a", "abcd", 0), 0u);
  EXPECT_EQ(tree.matched_bytes("b", "abcd", 0), 4u);
}

}  // namespace
}  // namespace mnemo::router
