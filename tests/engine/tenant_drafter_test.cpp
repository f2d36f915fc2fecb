// The tenant-history drafter: exact drafts from remembered streams, never across tenants, the
// longest match first, then the most frequent continuation, then the latest; forgetting a
// conversation (its tree nodes with it), and its memory bounds.
#include <gtest/gtest.h>

#include "engine/tenant_drafter.h"
#include "kv/prefix_index.h"

namespace mnemo {
namespace {

std::vector<TokenId> draft_of(TenantHistoryDrafter& d, uint64_t ns, const std::vector<TokenId>& context, int32_t max_tokens) {
  std::vector<TokenId> out;
  const int32_t n = d.draft(ns, context, max_tokens, out);
  EXPECT_EQ(n, static_cast<int32_t>(out.size()));
  return out;
}

TEST(TenantHistoryDrafter, DraftsWhatFollowedInAnotherRequestOfTheTenant) {
  TenantHistoryDrafter d;
  d.remember(1, 100, std::vector<TokenId>{5, 6, 7, 8, 9, 10, 11});
  EXPECT_EQ(draft_of(d, 1, {40, 41, 6, 7}, 3), (std::vector<TokenId>{8, 9, 10}));
  EXPECT_EQ(draft_of(d, 1, {40, 41, 6, 7}, 10), (std::vector<TokenId>{8, 9, 10, 11}));
  // The stream's end: nothing follows "10 11".
  EXPECT_TRUE(draft_of(d, 1, {10, 11}, 4).empty());
  EXPECT_TRUE(draft_of(d, 1, {1, 2, 3}, 4).empty());
}

TEST(TenantHistoryDrafter, NeverAcrossTenants) {
  TenantHistoryDrafter d;
  d.remember(1, 100, std::vector<TokenId>{5, 6, 7, 8, 9});
  EXPECT_TRUE(draft_of(d, 2, {5, 6, 7}, 3).empty());
  d.remember(2, 100, std::vector<TokenId>{5, 6, 7, 20, 21});
  EXPECT_EQ(draft_of(d, 2, {5, 6, 7}, 2), (std::vector<TokenId>{20, 21}));
  EXPECT_EQ(draft_of(d, 1, {5, 6, 7}, 2), (std::vector<TokenId>{8, 9}));
}

TEST(TenantHistoryDrafter, LatestStreamAndLongestMatchFirst) {
  TenantHistoryDrafter d;
  d.remember(1, 100, std::vector<TokenId>{1, 2, 3, 30, 31});
  d.remember(1, 101, std::vector<TokenId>{9, 2, 3, 40, 41});
  // "2 3" occurs in both; the later stream wins.
  EXPECT_EQ(draft_of(d, 1, {7, 2, 3}, 2), (std::vector<TokenId>{40, 41}));
  // "1 2 3" only in the first: the longer match wins over the later stream.
  EXPECT_EQ(draft_of(d, 1, {1, 2, 3}, 2), (std::vector<TokenId>{30, 31}));
}

TEST(TenantHistoryDrafter, TheContinuationMostRequestsTookFirst) {
  TenantHistoryDrafter d;
  d.remember(1, 100, std::vector<TokenId>{4, 5, 6, 7, 1});
  d.remember(1, 101, std::vector<TokenId>{4, 5, 6, 7, 2});
  d.remember(1, 102, std::vector<TokenId>{4, 5, 6, 8, 3});
  // 7 two times in three, then 1 or 2 once each (the latest, 2): 2/3 x 1/2 is above the floor.
  EXPECT_EQ(draft_of(d, 1, {4, 5, 6}, 3), (std::vector<TokenId>{7, 2}));
  d.forget(1, 100);
  d.forget(1, 101);
  EXPECT_EQ(draft_of(d, 1, {4, 5, 6}, 3), (std::vector<TokenId>{8, 3}));
}

TEST(TenantHistoryDrafter, ForgettingAConversationBringsBackWhatItHid) {
  TenantHistoryDrafter d;
  d.remember(1, 100, std::vector<TokenId>{1, 2, 3, 30, 31});
  d.remember(1, 101, std::vector<TokenId>{9, 2, 3, 40, 41});
  d.forget(1, 101);
  EXPECT_EQ(draft_of(d, 1, {7, 2, 3}, 2), (std::vector<TokenId>{30, 31}));
  EXPECT_EQ(d.tokens(), 5);
  d.forget(1, 100);
  EXPECT_TRUE(draft_of(d, 1, {7, 2, 3}, 2).empty());
  EXPECT_EQ(d.tokens(), 0);
  EXPECT_EQ(d.nodes(), 0u);
  EXPECT_EQ(d.tenants(), 0);
  d.forget(3, 100);  // an unknown tenant: nothing happens
}

TEST(TenantHistoryDrafter, BoundedPerTenantAndInAll) {
  TenantHistoryDrafter d({/*tokens_per_tenant=*/10, /*total_tokens=*/25});
  d.remember(1, 100, std::vector<TokenId>{1, 2, 3, 4, 5, 6});
  d.remember(1, 101, std::vector<TokenId>{11, 12, 13, 14, 15, 16});
  // 12 tokens > 10: the oldest stream left.
  EXPECT_EQ(d.tokens(), 6);
  EXPECT_TRUE(draft_of(d, 1, {1, 2}, 2).empty());
  EXPECT_EQ(draft_of(d, 1, {11, 12}, 2), (std::vector<TokenId>{13, 14}));
  // A stream longer than a tenant's share keeps its end.
  d.remember(2, 200, std::vector<TokenId>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  EXPECT_TRUE(draft_of(d, 2, {1, 2}, 2).empty());
  EXPECT_EQ(draft_of(d, 2, {5, 6}, 2), (std::vector<TokenId>{7, 8}));
  EXPECT_EQ(d.tokens(), 16);
  // Tenant 2 was used after tenant 1: a third tenant's 10 tokens take the total to 26 > 25, and
  // the least recently used, tenant 1, leaves whole.
  d.remember(3, 300, std::vector<TokenId>{21, 22, 23, 24, 25, 26, 27, 28, 29, 30});
  EXPECT_EQ(d.tenants(), 2);
  EXPECT_TRUE(draft_of(d, 1, {11, 12}, 2).empty());
  EXPECT_EQ(draft_of(d, 2, {5, 6}, 2), (std::vector<TokenId>{7, 8}));
  EXPECT_EQ(d.tokens(), 20);
}

TEST(TenantHistoryDrafter, ConversationIsTheCachesKeyForItsFirstChunk) {
  std::vector<TokenId> a(80, 3);
  std::vector<TokenId> b = a;
  b.push_back(9);  // the same conversation, a turn later
  EXPECT_EQ(TenantHistoryDrafter::conversation_of(1, a, 32), TenantHistoryDrafter::conversation_of(1, b, 32));
  EXPECT_EQ(TenantHistoryDrafter::conversation_of(1, a, 32), PrefixIndex::chunk_key(0, 1, std::span(a).first(32)));
  EXPECT_NE(TenantHistoryDrafter::conversation_of(1, a, 32), TenantHistoryDrafter::conversation_of(2, a, 32));
  b[10] = 4;
  EXPECT_NE(TenantHistoryDrafter::conversation_of(1, a, 32), TenantHistoryDrafter::conversation_of(1, b, 32));
  // Shorter than a chunk: its tokens' hash.
  EXPECT_NE(TenantHistoryDrafter::conversation_of(1, std::vector<TokenId>{1, 2}, 32),
            TenantHistoryDrafter::conversation_of(1, std::vector<TokenId>{1, 3}, 32));
}

}  // namespace
}  // namespace mnemo
