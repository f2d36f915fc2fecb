// The wire format: request bodies, server-sent-event framing, and reading Mnemo's,
// llama-server's and the Responses API's streamed replies into records.
#include <gtest/gtest.h>

#include "loadgen/openai_client.h"
#include "loadgen/openai_protocol.h"
#include "loadgen/sse_reader.h"

namespace mnemo::loadgen {
namespace {

using nlohmann::json;

std::vector<SseEvent> read_all(const std::vector<std::string>& pieces) {
  std::vector<SseEvent> events;
  SseReader reader([&](const SseEvent& e) {
    events.push_back(e);
    return true;
  });
  for (const std::string& piece : pieces) EXPECT_TRUE(reader.feed(piece));
  return events;
}

TEST(SseReader, EventsSplitAcrossPiecesAndLineEndings) {
  const auto events = read_all({"data: {\"a\"", ":1}\n\nda", "ta: two\r\n\r\n: a comment\n\nevent: ping\ndata: x\ndata: y\n\n", "data: [DONE]\n", "\n"});
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[1].data, "two");
  EXPECT_EQ(events[2].event, "ping");
  EXPECT_EQ(events[2].data, "x\ny");
  EXPECT_EQ(events[3].data, "[DONE]");
}

TEST(SseReader, HandlerCanStopTheParse) {
  int seen = 0;
  SseReader reader([&](const SseEvent&) { return ++seen < 1; });
  EXPECT_FALSE(reader.feed("data: 1\n\ndata: 2\n\n"));
  EXPECT_EQ(seen, 1);
}

PlannedConversation two_turns() {
  PlannedConversation c;
  c.id = "c";
  c.messages = {{"user", "q1"}, {"assistant", "r1"}, {"user", "q2"}};
  c.turns = {{1, 5, 10}, {3, 7, 20}};
  return c;
}

TEST(RequestBodies, ChatSendsTheHistoryAndForcesTheLength) {
  const json body = chat_request_body(two_turns(), 1, RequestOptions{"m", 0.0});
  EXPECT_EQ(body["model"], "m");
  ASSERT_EQ(body["messages"].size(), 3u);
  EXPECT_EQ(body["messages"][1], (json{{"role", "assistant"}, {"content", "r1"}}));
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(chat_request_body(two_turns(), 0, RequestOptions{"m", 0.0})["messages"].size(), 1u);
}

TEST(RequestBodies, ModelHistorySendsTheServersOwnReplies) {
  PlannedConversation c = two_turns();
  c.messages.push_back({"assistant", "r2"});
  c.messages.push_back({"user", "q3"});
  c.turns.push_back({5, 4, 30});
  RequestOptions options{"m", 0.0, History::kModel};
  const json third = chat_request_body(c, 2, options, ConversationState{"", {"own 1", "own 2"}});
  ASSERT_EQ(third["messages"].size(), 5u);
  EXPECT_EQ(third["messages"][0], (json{{"role", "user"}, {"content", "q1"}}));
  EXPECT_EQ(third["messages"][1], (json{{"role", "assistant"}, {"content", "own 1"}}));
  EXPECT_EQ(third["messages"][2], (json{{"role", "user"}, {"content", "q2"}}));
  EXPECT_EQ(third["messages"][3], (json{{"role", "assistant"}, {"content", "own 2"}}));
  EXPECT_EQ(third["messages"][4], (json{{"role", "user"}, {"content", "q3"}}));
  // With the data set's history the same state changes nothing.
  options.history = History::kDataset;
  const json dataset = chat_request_body(c, 2, options, ConversationState{"", {"own 1", "own 2"}});
  EXPECT_EQ(dataset["messages"][1]["content"], "r1");
  EXPECT_EQ(dataset["messages"][3]["content"], "r2");
}

TEST(RequestBodies, ResponsesSendOnlyTheNewQuestionAndChain) {
  const json first = responses_request_body(two_turns(), 0, "", RequestOptions{"m", 0.0});
  EXPECT_FALSE(first.contains("previous_response_id"));
  EXPECT_EQ(first["store"], true);
  const json second = responses_request_body(two_turns(), 1, "resp_1", RequestOptions{"m", 0.0});
  EXPECT_EQ(second["previous_response_id"], "resp_1");
  ASSERT_EQ(second["input"].size(), 1u);
  EXPECT_EQ(second["input"][0]["content"], "q2");
  EXPECT_EQ(second["max_output_tokens"], 7);
  EXPECT_EQ(second["ignore_eos"], true);
}

SseEvent data(const json& payload) { return {"", payload.dump()}; }

TEST(StreamedReply, MnemoChatStreamWithUsage) {
  StreamedReply reply(Api::kChatCompletions);
  RequestRecord r;
  r.sent_s = 0.5;
  EXPECT_TRUE(reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}}}}}}}), 1.0, r));
  EXPECT_TRUE(reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", ""}}}}}}}), 1.5, r));
  EXPECT_TRUE(reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", "Hi"}}}}}}}), 2.0, r));
  EXPECT_TRUE(reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", " there"}}}}}}}), 2.5, r));
  EXPECT_TRUE(reply.on_event(data({{"choices", json::array()},
                                   {"usage",
                                    {{"prompt_tokens", 40},
                                     {"completion_tokens", 2},
                                     {"prompt_tokens_details", {{"cached_tokens", 32}}}}}}),
                             3.0, r));
  EXPECT_FALSE(reply.on_event({"", "[DONE]"}, 3.25, r));
  reply.finish(r);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.first_token_s, 2.0);
  EXPECT_DOUBLE_EQ(r.finished_s, 3.25);
  EXPECT_DOUBLE_EQ(r.ttft(), 1.5);
  EXPECT_EQ(r.prompt_tokens, 40);
  EXPECT_EQ(r.cached_tokens, 32);
  EXPECT_EQ(r.completion_tokens, 2);
  EXPECT_EQ(r.reply_text, "Hi there");
}

TEST(StreamedReply, ReasoningIsNotPartOfTheReplyText) {
  StreamedReply reply(Api::kChatCompletions);
  RequestRecord r;
  EXPECT_TRUE(reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"reasoning_content", "hmm"}}}}}}}), 1.0, r));
  EXPECT_TRUE(reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", "Yes"}}}}}}}), 2.0, r));
  EXPECT_FALSE(reply.on_event({"", "[DONE]"}, 3.0, r));
  reply.finish(r);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.first_token_s, 1.0);
  EXPECT_EQ(r.completion_tokens, 2);
  EXPECT_EQ(r.reply_text, "Yes");
}

TEST(StreamedReply, LlamaServerTimingsFillWhatUsageLacks) {
  StreamedReply reply(Api::kChatCompletions);
  RequestRecord r;
  reply.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", "a"}}}}}}}), 1.0, r);
  reply.on_event(data({{"choices", json::array()},
                       {"usage", {{"prompt_tokens", 50}, {"completion_tokens", 8}}},
                       {"timings", {{"cache_n", 40}, {"prompt_n", 10}, {"predicted_n", 8}}}}),
                 2.0, r);
  reply.on_event({"", "[DONE]"}, 2.0, r);
  reply.finish(r);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.cached_tokens, 40);
  EXPECT_EQ(r.prompt_tokens, 50);
  EXPECT_EQ(r.completion_tokens, 8);

  // Only timings: the prompt is what was processed plus what was reused.
  StreamedReply bare(Api::kChatCompletions);
  RequestRecord b;
  bare.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", "a"}}}}}}}), 1.0, b);
  bare.on_event(data({{"choices", {{{"index", 0}, {"delta", {{"content", "b"}}}, {"finish_reason", "length"}}}},
                      {"timings", {{"cache_n", 30}, {"prompt_n", 5}, {"predicted_n", 2}}}}),
                1.5, b);
  bare.on_event({"", "[DONE]"}, 1.5, b);
  bare.finish(b);
  EXPECT_EQ(b.prompt_tokens, 35);
  EXPECT_EQ(b.cached_tokens, 30);
  EXPECT_EQ(b.completion_tokens, 2);
}

TEST(StreamedReply, WithoutAnyCountsTheTextChunksAreTheTokens) {
  StreamedReply reply(Api::kChatCompletions);
  RequestRecord r;
  for (int i = 0; i < 3; ++i) reply.on_event(data({{"choices", {{{"delta", {{"content", "x"}}}}}}}), 1.0 + i, r);
  reply.on_event({"", "[DONE]"}, 4.0, r);
  reply.finish(r);
  EXPECT_EQ(r.completion_tokens, 3);
  EXPECT_EQ(r.cached_tokens, -1);
}

TEST(StreamedReply, ErrorsAndTruncatedStreamsFail) {
  StreamedReply errored(Api::kChatCompletions);
  RequestRecord e;
  EXPECT_FALSE(errored.on_event(data({{"error", {{"message", "out of memory"}}}}), 1.0, e));
  errored.finish(e);
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.error, "out of memory");

  StreamedReply cut(Api::kChatCompletions);
  RequestRecord c;
  cut.on_event(data({{"choices", {{{"delta", {{"content", "x"}}}}}}}), 1.0, c);
  cut.finish(c);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find("ended before"), std::string::npos);
}

TEST(StreamedReply, ResponsesApiEvents) {
  StreamedReply reply(Api::kResponses);
  RequestRecord r;
  const json in_progress = {{"id", "resp_7"}, {"object", "response"}, {"status", "in_progress"}, {"output", json::array()}};
  EXPECT_TRUE(reply.on_event({"response.created", json({{"type", "response.created"}, {"sequence_number", 0}, {"response", in_progress}}).dump()}, 1.0, r));
  EXPECT_TRUE(reply.on_event({"response.output_text.delta", json({{"type", "response.output_text.delta"}, {"delta", "Hel"}}).dump()}, 1.5, r));
  EXPECT_TRUE(reply.on_event({"response.output_text.delta", json({{"type", "response.output_text.delta"}, {"delta", "lo"}}).dump()}, 1.75, r));
  const json done = {{"id", "resp_7"},
                     {"object", "response"},
                     {"status", "incomplete"},
                     {"usage",
                      {{"input_tokens", 30},
                       {"input_tokens_details", {{"cached_tokens", 16}}},
                       {"output_tokens", 2},
                       {"total_tokens", 32}}}};
  EXPECT_FALSE(reply.on_event({"response.completed", json({{"type", "response.completed"}, {"response", done}}).dump()}, 2.0, r));
  reply.finish(r);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.response_id, "resp_7");
  EXPECT_DOUBLE_EQ(r.first_token_s, 1.5);
  EXPECT_DOUBLE_EQ(r.finished_s, 2.0);
  EXPECT_EQ(r.prompt_tokens, 30);
  EXPECT_EQ(r.cached_tokens, 16);
  EXPECT_EQ(r.completion_tokens, 2);
}

TEST(ServerUrl, HostPortAndOptionalV1) {
  const auto a = parse_server_url("http://127.0.0.1:8080/v1/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  const auto b = parse_server_url("localhost:9");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "localhost");
  EXPECT_EQ(b->port, 9);
  EXPECT_EQ(parse_server_url("http://example.com")->port, 80);
  EXPECT_FALSE(parse_server_url("https://example.com").ok());
  EXPECT_FALSE(parse_server_url("http://h:99999").ok());
  EXPECT_FALSE(parse_server_url("http://h:80/other").ok());
}

}  // namespace
}  // namespace mnemo::loadgen
