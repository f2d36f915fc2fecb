// From data-set text to a trace: token lengths per turn (the chars/4 estimate, worked out by
// hand), Poisson arrivals and think times (deterministic per seed, turns in order), and the
// working-set statistics used to pick capacities.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "loadgen/dataset.h"
#include "sim/arrival_schedule.h"
#include "sim/conversation_lengths.h"
#include "sim/estimated_token_counter.h"
#include "sim/trace_stats.h"
#include "sim_test_support.h"

namespace mnemo::sim {
namespace {

using testing::conversation;
using testing::turn;

loadgen::DatasetConversation dataset_conversation(std::string id, std::vector<std::pair<std::string, std::string>> turns) {
  loadgen::DatasetConversation c;
  c.id = std::move(id);
  for (auto& [user, reply] : turns) c.turns.push_back({user, reply});
  return c;
}

TEST(EstimatedTokenCounter, CountsFourBytesPerTokenPlusTemplateMarkup) {
  const EstimatedTokenCounter counter;
  EXPECT_EQ(counter.count_text(""), 0);
  EXPECT_EQ(counter.count_text("abcd"), 1);
  EXPECT_EQ(counter.count_text("abcde"), 2);
  EXPECT_EQ(counter.truncate_text("abcdefghij", 2), "abcdefgh");
  const std::vector<ChatMessage> messages = {{"user", "abcdefgh"}, {"assistant", "abc"}};
  EXPECT_EQ(*counter.count_prompt(messages), 3 + (2 + 4) + (1 + 4));
}

TEST(ConversationLengths, PromptIsTheWholeHistoryPlusTheQuestion) {
  // Turn 0: prompt 3 + (2 + 4) = 9, reply 1. Turn 1: 3 + (2 + 4) + (1 + 4) + (3 + 4) = 21, reply 5.
  const std::vector<loadgen::DatasetConversation> dataset = {
      dataset_conversation("a", {{"12345678", "abcd"}, {"123456789012", std::string(17, 'x')}})};
  const EstimatedTokenCounter counter;
  const auto lengths = measure_conversations(dataset, counter, 0, 0, 1000);
  ASSERT_TRUE(lengths.ok()) << lengths.error().message();
  ASSERT_EQ(lengths->size(), 1u);
  ASSERT_EQ((*lengths)[0].turns.size(), 2u);
  EXPECT_EQ((*lengths)[0].turns[0].prompt_tokens, 9);
  EXPECT_EQ((*lengths)[0].turns[0].reply_tokens, 1);
  EXPECT_EQ((*lengths)[0].turns[1].prompt_tokens, 21);
  EXPECT_EQ((*lengths)[0].turns[1].reply_tokens, 5);
}

TEST(ConversationLengths, EndsAConversationBeforeATurnLongerThanTheContext) {
  // Turn 1 would need 21 + 5 = 26 tokens: with a context of 25 only turn 0 is kept.
  const std::vector<loadgen::DatasetConversation> dataset = {
      dataset_conversation("a", {{"12345678", "abcd"}, {"123456789012", std::string(17, 'x')}})};
  const EstimatedTokenCounter counter;
  EXPECT_EQ((*measure_conversations(dataset, counter, 0, 0, 26))[0].turns.size(), 2u);
  EXPECT_EQ((*measure_conversations(dataset, counter, 0, 0, 25))[0].turns.size(), 1u);
}

TEST(ConversationLengths, TakesTheSeededOrderAndCount) {
  std::vector<loadgen::DatasetConversation> dataset;
  for (int i = 0; i < 20; ++i) dataset.push_back(dataset_conversation(std::to_string(i), {{"q", "r"}}));
  const EstimatedTokenCounter counter;
  const auto file_order = *measure_conversations(dataset, counter, 5, 0, 100);
  ASSERT_EQ(file_order.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(file_order[i].id, std::to_string(i));
  const auto shuffled = *measure_conversations(dataset, counter, 5, 7, 100);
  const auto again = *measure_conversations(dataset, counter, 5, 7, 100);
  std::vector<std::string> a, b;
  for (size_t i = 0; i < 5; ++i) {
    a.push_back(shuffled[i].id);
    b.push_back(again[i].id);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
}

std::vector<ConversationLengths> uniform_lengths(int conversations, int turns) {
  std::vector<ConversationLengths> out;
  for (int i = 0; i < conversations; ++i) {
    ConversationLengths c{std::to_string(i), {}};
    for (int t = 0; t < turns; ++t) c.turns.push_back({100 * (t + 1), 10 + t});
    out.push_back(c);
  }
  return out;
}

TEST(ArrivalSchedule, TurnsFollowThinkTimesAndDecodeDurations) {
  ArrivalOptions options;
  options.conversations_per_second = 0.5;
  options.think = loadgen::ThinkTime::exponential(30);
  options.decode_seconds_per_token = 0.1;
  options.seed = 3;
  const Trace trace = schedule_arrivals(uniform_lengths(200, 3), options);
  ASSERT_EQ(trace.size(), 200u);
  double previous_arrival = 0;
  double arrival_gaps = 0;
  double think_sum = 0;
  int thinks = 0;
  for (const TraceConversation& c : trace) {
    ASSERT_EQ(c.turns.size(), 3u);
    EXPECT_GT(c.turns[0].start_s, previous_arrival);
    arrival_gaps += c.turns[0].start_s - previous_arrival;
    previous_arrival = c.turns[0].start_s;
    for (size_t t = 0; t < c.turns.size(); ++t) {
      EXPECT_NEAR(c.turns[t].end_s - c.turns[t].start_s, 0.1 * static_cast<double>(c.turns[t].reply_tokens), 1e-9);
      EXPECT_EQ(c.turns[t].prompt_tokens, 100 * static_cast<int64_t>(t + 1));
      if (t > 0) {
        EXPECT_GE(c.turns[t].start_s, c.turns[t - 1].end_s);
        think_sum += c.turns[t].start_s - c.turns[t - 1].end_s;
        ++thinks;
      }
    }
  }
  // Means within ~4 standard errors of the exponential's: 2 s between arrivals, 30 s of thought.
  EXPECT_NEAR(arrival_gaps / 200, 2.0, 4 * 2.0 / std::sqrt(200.0));
  EXPECT_NEAR(think_sum / thinks, 30.0, 4 * 30.0 / std::sqrt(static_cast<double>(thinks)));
}

TEST(ArrivalSchedule, SameSeedSameTraceOtherSeedOtherTrace) {
  ArrivalOptions options;
  const auto lengths = uniform_lengths(10, 2);
  const Trace a = schedule_arrivals(lengths, options);
  const Trace b = schedule_arrivals(lengths, options);
  options.seed = 2;
  const Trace c = schedule_arrivals(lengths, options);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].turns[1].start_s, b[i].turns[1].start_s);
    EXPECT_NE(a[i].turns[1].start_s, c[i].turns[1].start_s);
  }
}

TEST(TraceStats, CountsVolumeAndTheLiveWorkingSet) {
  // 4-token chunks. a: 8-token prompt (2 chunks) from 0 to 1, then 3 chunks until its second turn
  // (prompt 16: 4 chunks, 2 to 3), then 5 chunks until it ends at 3. b: 2 chunks from 1 to 2.
  const Trace trace = {conversation("a", {turn(0, 1, 8, 4), turn(2, 3, 16, 4)}), conversation("b", {turn(1, 2, 8, 1)})};
  const TraceStats s = trace_stats(trace, testing::kChunk);
  EXPECT_EQ(s.conversations, 2);
  EXPECT_EQ(s.turns, 3);
  EXPECT_EQ(s.prompt_tokens, 32);
  EXPECT_EQ(s.reply_tokens, 9);
  EXPECT_EQ(s.max_context_tokens, 20);
  EXPECT_DOUBLE_EQ(s.duration_s, 3);
  // Live chunks: [0,1) 2; [1,2) a 3 + b 2 = 5; [2,3) a 4; peak 5, mean (2 + 5 + 4) / 3.
  EXPECT_EQ(s.peak_live_chunks, 5);
  EXPECT_DOUBLE_EQ(s.mean_live_chunks, 11.0 / 3.0);
  // Running prompts: a's 2 chunks over [0,1), then b's 2 over [1,2), then a's 4 over [2,3).
  EXPECT_EQ(s.peak_running_chunks, 4);
}

}  // namespace
}  // namespace mnemo::sim
