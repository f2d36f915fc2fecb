// The drafters and the draft-length policy, with exact expected drafts and lengths.
#include <gtest/gtest.h>

#include "engine/drafter.h"
#include "engine/speculation.h"

namespace mnemo {
namespace {

std::vector<TokenId> draft_of(const PromptLookupDrafter& d, const std::vector<TokenId>& context, int32_t max_tokens) {
  std::vector<TokenId> out;
  const int32_t n = d.draft(context, max_tokens, out);
  EXPECT_EQ(n, static_cast<int32_t>(out.size()));
  return out;
}

TEST(PromptLookupDrafter, DraftsWhatFollowedTheLatestEarlierOccurrenceOfTheSuffix) {
  const PromptLookupDrafter d(2, 4);
  // "7 8" occurs twice before the end; the latest (followed by 30 31) wins over the first.
  EXPECT_EQ(draft_of(d, {7, 8, 20, 21, 22, 7, 8, 30, 31, 32, 5, 7, 8}, 3), (std::vector<TokenId>{30, 31, 32}));
  // The longest suffix first: "5 7 8" occurred once, followed by 9; "7 8" alone later by 40.
  EXPECT_EQ(draft_of(d, {5, 7, 8, 9, 1, 7, 8, 40, 2, 5, 7, 8}, 2), (std::vector<TokenId>{9, 1}));
}

TEST(PromptLookupDrafter, StopsAtTheContextsEndAndAtMaxTokens) {
  const PromptLookupDrafter d(2, 4);
  EXPECT_EQ(draft_of(d, {1, 2, 3, 4, 1, 2}, 8), (std::vector<TokenId>{3, 4, 1, 2}));
  EXPECT_EQ(draft_of(d, {1, 2, 3, 4, 1, 2}, 1), (std::vector<TokenId>{3}));
  EXPECT_TRUE(draft_of(d, {1, 2, 3, 4, 1, 2}, 0).empty());
}

TEST(PromptLookupDrafter, ARunDraftsItsOwnContinuation) {
  const PromptLookupDrafter d(2, 4);
  // The suffix "6 6 6 6" occurs one token back, overlapping itself: the draft is one more 6.
  EXPECT_EQ(draft_of(d, {1, 6, 6, 6, 6, 6}, 5), (std::vector<TokenId>{6}));
}

TEST(PromptLookupDrafter, NoMatchNoDraft) {
  const PromptLookupDrafter d(2, 4);
  EXPECT_TRUE(draft_of(d, {1, 2, 3, 4, 5, 6}, 4).empty());
  EXPECT_TRUE(draft_of(d, {9}, 4).empty());
  EXPECT_TRUE(draft_of(d, {}, 4).empty());
  // A single token recurs, but the minimum n-gram is 2.
  EXPECT_TRUE(draft_of(d, {3, 1, 2, 4, 3}, 4).empty());
  EXPECT_EQ(draft_of(PromptLookupDrafter(1, 4), {3, 1, 2, 4, 3}, 4), (std::vector<TokenId>{1, 2, 4, 3}));
}

TEST(Speculation, ExpectedAcceptedIsTheGeometricSum) {
  EXPECT_DOUBLE_EQ(expected_accepted(0.5, 0), 0.0);
  EXPECT_DOUBLE_EQ(expected_accepted(0.5, 3), 0.5 + 0.25 + 0.125);
  EXPECT_DOUBLE_EQ(expected_accepted(1.0, 5), 5.0);
  EXPECT_DOUBLE_EQ(expected_accepted(0.0, 5), 0.0);
}

TEST(Speculation, RowCostIsLearntFromSteps) {
  RowCostEstimator e;
  EXPECT_DOUBLE_EQ(e.row_cost(0.1), 0.1);
  // Steps of one row only: no slope to fit.
  for (int i = 0; i < 20; ++i) e.observe(1, 0.010);
  EXPECT_DOUBLE_EQ(e.row_cost(0.1), 0.1);
  // seconds = 0.006 + 0.004 * rows: a row is 0.004 / 0.010 of a one-row pass.
  RowCostEstimator f;
  for (int i = 0; i < 40; ++i) f.observe(1 + i % 5, 0.006 + 0.004 * (1 + i % 5));
  EXPECT_NEAR(f.row_cost(0.1), 0.4, 1e-9);
  // The machine changes (rows nearly free now): the old steps are forgotten.
  for (int i = 0; i < 400; ++i) f.observe(1 + i % 5, 0.0095 + 0.0005 * (1 + i % 5));
  EXPECT_NEAR(f.row_cost(0.1), 0.05, 1e-3);
}

TEST(Speculation, ARowCostsMoreInALargerBatch) {
  EXPECT_DOUBLE_EQ(shared_row_cost(0.05, 1), 0.05);
  EXPECT_DOUBLE_EQ(shared_row_cost(0.05, 0), 0.05);
  EXPECT_DOUBLE_EQ(shared_row_cost(0.05, 8), 8 * 0.05 / (1 + 0.05 * 7));
  EXPECT_DOUBLE_EQ(shared_row_cost(1.0, 32), 1.0);  // rows as dear as passes: each costs a pass
  // At batch 32 a draft needs a high acceptance rate to pay; at batch 1 the prior's does.
  AcceptanceTracker prior;
  EXPECT_GT(prior.draft_length(8, shared_row_cost(0.05, 1)), 0);
  EXPECT_EQ(prior.draft_length(8, shared_row_cost(0.05, 32)), 0);
}

TEST(Speculation, DraftLengthFollowsTheAcceptanceRate) {
  AcceptanceTracker t;
  EXPECT_DOUBLE_EQ(t.rate(), AcceptanceTracker::kPrior);
  // At the prior (0.5) and a row costing 8% of a pass: k = 3 yields 1.875 / 1.24 = 1.512 tokens
  // per unit of time, k = 2 1.509 and k = 4 1.468.
  EXPECT_EQ(t.draft_length(8, 0.08), 3);
  // Free rows: every extra token with p > 0 pays, up to the cap.
  EXPECT_EQ(t.draft_length(8, 0.0), 8);
  // Rows as dear as a pass: nothing pays at p = 0.5.
  EXPECT_EQ(t.draft_length(8, 1.0), 0);
  // All kept, twice: the rate rises (each draft of 4 all kept is 4 trials, weight 1), and the
  // draft grows to the cap.
  t.observe(4, 4);
  EXPECT_DOUBLE_EQ(t.rate(), 1.0);
  EXPECT_EQ(t.draft_length(8, 0.08), 8);
  // Rejected at once: 1 trial, weight 0.25, towards 0.
  t.observe(4, 0);
  EXPECT_DOUBLE_EQ(t.rate(), 0.75);
  for (int i = 0; i < 20; ++i) t.observe(4, 0);
  EXPECT_LT(t.rate(), 0.01);
  EXPECT_EQ(t.draft_length(8, 0.08), 0);
  // A sequence that does not draft probes with one token every kProbeEvery steps.
  AcceptanceTracker dear;
  for (int i = 0; i < AcceptanceTracker::kProbeEvery - 1; ++i) dear.idle();
  EXPECT_FALSE(dear.should_probe());
  dear.idle();
  EXPECT_TRUE(dear.should_probe());
  dear.observe(1, 1);  // the probe was kept: the rate rises and the count starts again
  EXPECT_FALSE(dear.should_probe());
  EXPECT_DOUBLE_EQ(dear.rate(), 0.5 + 0.5 * 0.25);
  // Idle steps drift back towards the prior until drafting pays again.
  int steps = 0;
  while (t.draft_length(8, 0.08) == 0) {
    t.idle();
    ++steps;
  }
  EXPECT_GT(steps, 1);
  EXPECT_LT(steps, 40);
  // Two of four kept: 3 trials, 2 kept, weight 0.75.
  AcceptanceTracker u;
  u.observe(4, 2);
  EXPECT_DOUBLE_EQ(u.rate(), 0.5 + (2.0 / 3.0 - 0.5) * 0.75);
  // Nothing drafted: nothing learnt.
  u.observe(0, 0);
  EXPECT_DOUBLE_EQ(u.rate(), 0.5 + (2.0 / 3.0 - 0.5) * 0.75);
}

}  // namespace
}  // namespace mnemo
