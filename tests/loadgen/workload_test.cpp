// Planning conversations: forced reply lengths, histories, and fitting the context budget (with
// a word-count tokenizer, so every expected number is worked out by hand).
#include <gtest/gtest.h>

#include <set>

#include "fake_token_counter.h"
#include "loadgen/workload.h"

namespace mnemo::loadgen {
namespace {

const WordCounter kCounter;

DatasetConversation conversation(std::vector<std::pair<int, int>> turn_words) {
  DatasetConversation c;
  c.id = "c";
  for (size_t i = 0; i < turn_words.size(); ++i) {
    const std::string index = std::to_string(i);
    c.turns.push_back({n_words(turn_words[i].first, std::string("q").append(index).append("_")),
                       n_words(turn_words[i].second, std::string("r").append(index).append("_"))});
  }
  return c;
}

TEST(Workload, ForcesReplyLengthsAndCarriesCutRepliesInTheHistory) {
  // Turn 0: reply 20 words, capped at 8; prompt (10 + 4) + 2 = 16.
  // Turn 1: reply 3; prompt 14 + (8 + 4) + (5 + 4) + 2 = 37; 37 + 3 <= 60.
  // Turn 2: prompt 37 - 2 + (3 + 4) + (20 + 4) + 2 = 68 > 60 - 8: the conversation ends.
  const auto planned = plan_conversation(conversation({{10, 20}, {5, 3}, {20, 10}}), kCounter,
                                         WorkloadLimits{.max_context = 60, .max_output_tokens = 8, .max_turns = 0});
  ASSERT_TRUE(planned.ok());
  ASSERT_EQ(planned->turns.size(), 2u);
  EXPECT_EQ(planned->turns[0].max_tokens, 8);
  EXPECT_EQ(planned->turns[0].prompt_tokens, 16);
  EXPECT_EQ(planned->turns[0].n_messages, 1);
  EXPECT_EQ(planned->turns[1].max_tokens, 3);
  EXPECT_EQ(planned->turns[1].prompt_tokens, 37);
  EXPECT_EQ(planned->turns[1].n_messages, 3);
  // user, assistant (cut to the 8 tokens the server generates), user; no trailing reply.
  ASSERT_EQ(planned->messages.size(), 3u);
  EXPECT_EQ(planned->messages[0].role, "user");
  EXPECT_EQ(planned->messages[1].role, "assistant");
  EXPECT_EQ(planned->messages[1].content, n_words(8, "r0_"));
  EXPECT_EQ(planned->messages[2].content, n_words(5, "q1_"));
  EXPECT_EQ(planned->question(1).content, n_words(5, "q1_"));
}

TEST(Workload, CutsAnOverlongFirstQuestionToFit) {
  // Budget 60 - 4 = 56 prompt tokens: the question keeps 56 - 4 - 2 = 50 words.
  const auto planned = plan_conversation(conversation({{100, 4}}), kCounter, WorkloadLimits{60, 8, 0});
  ASSERT_TRUE(planned.ok());
  ASSERT_EQ(planned->turns.size(), 1u);
  EXPECT_EQ(planned->turns[0].prompt_tokens, 56);
  EXPECT_EQ(planned->turns[0].max_tokens, 4);
  EXPECT_EQ(planned->messages[0].content, n_words(50, "q0_"));
}

TEST(Workload, NoTurnWhenEvenAnEmptyQuestionCannotFit) {
  const auto planned = plan_conversation(conversation({{3, 1}}), kCounter, WorkloadLimits{6, 8, 0});
  ASSERT_TRUE(planned.ok());
  EXPECT_TRUE(planned->turns.empty());
  EXPECT_TRUE(planned->messages.empty());
}

TEST(Workload, EmptyReplyStillAsksForOneTokenAndMaxTurnsCaps) {
  const auto planned = plan_conversation(conversation({{2, 0}, {2, 2}, {2, 2}}), kCounter, WorkloadLimits{1000, 8, 2});
  ASSERT_TRUE(planned.ok());
  ASSERT_EQ(planned->turns.size(), 2u);
  EXPECT_EQ(planned->turns[0].max_tokens, 1);
  EXPECT_EQ(planned->turns[1].max_tokens, 2);
  EXPECT_EQ(planned->messages.size(), 3u);
}

TEST(Workload, SeededOrderIsAPermutationAndRepeatable) {
  const std::vector<size_t> a = conversation_order(50, 7);
  EXPECT_EQ(a, conversation_order(50, 7));
  EXPECT_NE(a, conversation_order(50, 8));
  EXPECT_EQ(std::set<size_t>(a.begin(), a.end()).size(), 50u);
  const std::vector<size_t> identity = conversation_order(3, 0);
  EXPECT_EQ(identity, (std::vector<size_t>{0, 1, 2}));
}

TEST(Workload, PlansSlicesOfTheOrderSkippingConversationsThatDoNotFit) {
  std::vector<DatasetConversation> dataset;
  for (int i = 0; i < 5; ++i) {
    dataset.push_back(conversation({{2, 2}, {2, 2}}));
    dataset.back().id = std::to_string(i);
  }
  dataset[1].turns[0].user = "";  // still fits: an empty question
  const std::vector<size_t> order = conversation_order(5, 0);
  const auto first = plan_workload(dataset, order, 0, 2, kCounter, WorkloadLimits{1000, 8, 0});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].id, "0");
  EXPECT_EQ((*first)[1].id, "1");
  EXPECT_EQ(total_turns(*first), 4);

  // From position 4 it wraps around to the start.
  const auto wrapped = plan_workload(dataset, order, 4, 2, kCounter, WorkloadLimits{1000, 8, 0});
  ASSERT_TRUE(wrapped.ok());
  ASSERT_EQ(wrapped->size(), 2u);
  EXPECT_EQ((*wrapped)[0].id, "4");
  EXPECT_EQ((*wrapped)[1].id, "0");

  // A budget no conversation fits gives an empty workload, not an endless search.
  const auto none = plan_workload(dataset, order, 0, 3, kCounter, WorkloadLimits{5, 8, 0});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace mnemo::loadgen
