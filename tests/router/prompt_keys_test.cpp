// PromptKeys: the router names a prompt's chunks as an instance's index does, and counts as
// reusable only the chunks before the last token (which the instance always computes).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/prefix_index.h"
#include "router/prompt_keys.h"

namespace mnemo::router {
namespace {

std::vector<TokenId> tokens(int n) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 100);
  return t;
}

TEST(PromptKeys, ChunksAreKeyedAsTheIndexKeysThemAndTheLastTokensChunkIsNotReusable) {
  const PromptKeys eight("text", tokens(8), 9);
  const auto keys = eight.keys(4);
  ASSERT_EQ(keys.size(), 2u);
  const auto t = tokens(8);
  const uint64_t first = PrefixIndex::chunk_key(0, 9, std::span(t).first(4));
  EXPECT_EQ(keys[0], first);
  EXPECT_EQ(keys[1], PrefixIndex::chunk_key(first, 9, std::span(t).subspan(4, 4)));
  // 8 tokens: the last is computed, so only the first chunk of 4 is reusable; 9 tokens: both.
  EXPECT_EQ(eight.reusable_keys(4).size(), 1u);
  EXPECT_EQ(PromptKeys("text", tokens(9), 9).reusable_keys(4).size(), 2u);
  // Another tenant's namespace names the same tokens differently.
  EXPECT_NE(PromptKeys("text", tokens(8), 10).keys(4)[0], first);
  // Untokenized: no keys.
  const PromptKeys text_only("text");
  EXPECT_FALSE(text_only.tokenized());
  EXPECT_TRUE(text_only.keys(4).empty());
  EXPECT_TRUE(text_only.reusable_keys(4).empty());
}

}  // namespace
}  // namespace mnemo::router
