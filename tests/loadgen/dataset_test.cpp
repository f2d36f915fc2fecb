// ShareGPT parsing: regular conversations become (question, reply) turns; irregular ones stop at
// the first irregularity; bad lines are errors naming the line.
#include <gtest/gtest.h>

#include "loadgen/dataset.h"

namespace mnemo::loadgen {
namespace {

TEST(ShareGpt, AlternatingMessagesBecomeTurns) {
  const auto parsed = parse_sharegpt(
      R"({"id": "a", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "r1"},)"
      R"( {"from": "human", "value": "q2"}, {"from": "gpt", "value": "r2"}]})"
      "\n",
      "test");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  ASSERT_EQ(parsed->size(), 1u);
  const DatasetConversation& c = (*parsed)[0];
  EXPECT_EQ(c.id, "a");
  ASSERT_EQ(c.turns.size(), 2u);
  EXPECT_EQ(c.turns[0].user, "q1");
  EXPECT_EQ(c.turns[0].reply, "r1");
  EXPECT_EQ(c.turns[1].user, "q2");
  EXPECT_EQ(c.turns[1].reply, "r2");
}

TEST(ShareGpt, IrregularConversationsStopAtTheIrregularity) {
  const auto parsed = parse_sharegpt(
      // A greeting before the first question is skipped; a question without reply is dropped.
      R"({"id": "greeting", "conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": "q"},)"
      R"( {"from": "gpt", "value": "r"}, {"from": "human", "value": "unanswered"}]})"
      "\n"
      // Two questions in a row: the conversation ends before the second.
      R"({"id": "double", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "r1"},)"
      R"( {"from": "human", "value": "q2"}, {"from": "human", "value": "q3"}, {"from": "gpt", "value": "r3"}]})"
      "\n"
      // An unknown speaker ends it too.
      R"({"id": "system", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "r"},)"
      R"( {"from": "system", "value": "s"}, {"from": "human", "value": "q2"}, {"from": "gpt", "value": "r2"}]})"
      "\n\n"
      // No complete turn at all: dropped.
      R"({"id": "empty", "conversations": [{"from": "human", "value": "q"}]})"
      "\n",
      "test");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].id, "greeting");
  ASSERT_EQ((*parsed)[0].turns.size(), 1u);
  EXPECT_EQ((*parsed)[0].turns[0].user, "q");
  EXPECT_EQ((*parsed)[1].turns.size(), 1u);
  EXPECT_EQ((*parsed)[2].turns.size(), 1u);
}

TEST(ShareGpt, BadLinesAreErrorsNamingTheLine) {
  const auto not_json = parse_sharegpt("{\"id\": \"a\", \"conversations\": []}\n{oops\n", "data.jsonl");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.error().message(), "data.jsonl:2: not valid JSON");

  const auto no_list = parse_sharegpt("{\"id\": \"a\"}\n", "data.jsonl");
  ASSERT_FALSE(no_list.ok());
  EXPECT_EQ(no_list.error().message(), "data.jsonl:1: no 'conversations' array");

  const auto bad_message = parse_sharegpt(R"({"conversations": [{"from": "human", "value": 3}]})", "data.jsonl");
  ASSERT_FALSE(bad_message.ok());
  EXPECT_NE(bad_message.error().message().find("data.jsonl:1:"), std::string::npos);

  EXPECT_FALSE(load_sharegpt("/nonexistent/data.jsonl").ok());
}

}  // namespace
}  // namespace mnemo::loadgen
