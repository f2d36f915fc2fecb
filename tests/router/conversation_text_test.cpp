// What the router reads of requests and replies: one turn plus its reply is a prefix of the next
// turn's prompt text; replies are read whole or from SSE; garbage is refused, never a crash.
#include <gtest/gtest.h>

#include <random>

#include "router/conversation_text.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

TEST(ConversationText, ATurnAndItsReplyArePrefixOfTheNextTurn) {
  const json first = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}}};
  const json second = {{"messages",
                        {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi"}},
                         {{"role", "assistant"}, {"content", "Hello!"}},
                         {{"role", "user"}, {"content", "And then?"}}}}};
  const auto a = view_request(Api::kChat, first);
  const auto b = view_request(Api::kChat, second);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string after = with_reply(Api::kChat, a->prompt_text, "Hello!");
  EXPECT_EQ(b->prompt_text.substr(0, after.size()), after);
  EXPECT_GT(b->prompt_text.size(), after.size());
  EXPECT_EQ(a->session_key, b->session_key);  // the same conversation
  // Another reply is another branch.
  EXPECT_NE(b->prompt_text.substr(0, after.size()), with_reply(Api::kChat, a->prompt_text, "Hey!"));
}

TEST(ConversationText, ContentPartsAndCompletionsAndResponses) {
  const json parts = {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "He"}}, {{"type", "text"}, {"text", "llo"}}}}}}}};
  const json plain = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}};
  EXPECT_EQ(view_request(Api::kChat, parts)->prompt_text, view_request(Api::kChat, plain)->prompt_text);
  const auto completion = view_request(Api::kCompletions, json{{"prompt", "Once upon"}, {"stream", true}});
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ(completion->prompt_text, "Once upon");
  EXPECT_TRUE(completion->stream);
  EXPECT_EQ(with_reply(Api::kCompletions, "Once upon", " a time"), "Once upon a time");
  const auto resp = view_request(Api::kResponses, json{{"input", "Hi"}, {"previous_response_id", "resp_1"}});
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->previous_response_id, "resp_1");
  EXPECT_EQ(resp->session_key, "resp_1");
}

TEST(ConversationText, RepliesAreReadWholeAndFromEventStreams) {
  const std::string chat = R"({"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"}}]})";
  EXPECT_EQ(reply_text(Api::kChat, chat, false), "Hello there");
  const std::string chat_sse =
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n"
      "data: [DONE]\n\n";
  EXPECT_EQ(reply_text(Api::kChat, chat_sse, true), "Hello");
  EXPECT_EQ(reply_text(Api::kCompletions, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\n", true), "ab");
  const std::string resp = R"({"id":"resp_9","output":[{"type":"message","content":[{"type":"output_text","text":"Yes"}]}]})";
  EXPECT_EQ(reply_text(Api::kResponses, resp, false), "Yes");
  EXPECT_EQ(response_id(resp, false), "resp_9");
  const std::string resp_sse =
      "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_7\"}}\n\n"
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Y\"}\n\n"
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"es\"}\n\n";
  EXPECT_EQ(reply_text(Api::kResponses, resp_sse, true), "Yes");
  EXPECT_EQ(response_id(resp_sse, true), "resp_7");
  // One pass reads all of it; a stream's final response is its response.completed event's.
  const ReplyDigest whole = read_reply(Api::kResponses, resp, false);
  EXPECT_EQ(whole.text, "Yes");
  EXPECT_EQ(whole.response_id, "resp_9");
  EXPECT_EQ(whole.final_response["id"], "resp_9");
  const std::string completed =
      resp_sse + "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":"
                 "{\"id\":\"resp_7\",\"output\":[],\"usage\":{\"output_tokens\":2}}}\n\n";
  const ReplyDigest streamed = read_reply(Api::kResponses, completed, true);
  EXPECT_EQ(streamed.text, "Yes");
  EXPECT_EQ(streamed.response_id, "resp_7");
  EXPECT_EQ(streamed.final_response["usage"]["output_tokens"], 2);
  EXPECT_EQ(streamed.generated_tokens, 2);
  EXPECT_TRUE(read_reply(Api::kResponses, resp_sse, true).final_response.is_null());  // no terminal event
}

TEST(ConversationText, GeneratedTokensFromUsageElseFromTheTextEvents) {
  const std::string chat_sse =
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
      "data: [DONE]\n\n";
  EXPECT_EQ(read_reply(Api::kChat, chat_sse, true).generated_tokens, 2);  // no usage: the events with text
  const std::string with_usage = chat_sse + "data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n";
  EXPECT_EQ(read_reply(Api::kChat, with_usage, true).generated_tokens, 3);
  EXPECT_EQ(read_reply(Api::kCompletions, R"({"choices":[{"text":"ab"}],"usage":{"completion_tokens":5}})", false).generated_tokens, 5);
  EXPECT_EQ(read_reply(Api::kChat, R"({"choices":[{"message":{"content":"ab"}}]})", false).generated_tokens, -1);  // unknown
  const std::string resp_sse =
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Y\"}\n\n"
      "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"output_tokens\":4}}}\n\n";
  EXPECT_EQ(read_reply(Api::kResponses, resp_sse, true).generated_tokens, 4);
  EXPECT_EQ(read_reply(Api::kChat, "", true).generated_tokens, 0);
}

TEST(ConversationText, ChunksCarryingTextAreToldFromRolesAndFinishes) {
  EXPECT_FALSE(carries_text("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"));
  EXPECT_TRUE(carries_text("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"));
  EXPECT_TRUE(carries_text("data: {\"choices\":[{\"text\":\" a\",\"index\":0}]}\n\n"));
  EXPECT_FALSE(carries_text("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n"));
  EXPECT_TRUE(carries_text("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\"}\n\n"));
  EXPECT_FALSE(carries_text("event: response.created\ndata: {\"type\":\"response.created\"}\n\n"));
  EXPECT_FALSE(carries_text("data: [DONE]\n\n"));
  EXPECT_FALSE(carries_text("data: {\"choices\":[{\"delta\":{\"content\":\""));  // cut off: nothing seen yet
}

TEST(ConversationText, MalformedRequestsAreRefusedWithAReason) {
  const std::vector<std::pair<Api, json>> bad = {
      {Api::kChat, json::array()},
      {Api::kChat, json{{"messages", "hi"}}},
      {Api::kChat, json{{"messages", {{{"content", "no role"}}}}}},
      {Api::kChat, json{{"messages", {42}}}},
      {Api::kCompletions, json{{"prompt", 7}}},
      {Api::kCompletions, json::object()},
      {Api::kResponses, json{{"input", 3}}},
      {Api::kResponses, json{{"input", "x"}, {"previous_response_id", 5}}},
  };
  for (const auto& [api, body] : bad) {
    const auto v = view_request(api, body);
    ASSERT_FALSE(v.ok()) << body.dump();
    EXPECT_FALSE(v.error().message().empty());
  }
}

TEST(ConversationText, RandomBytesNeverCrashTheReaders) {
  std::mt19937 rng(7);
  const std::string seed = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"response\":{\"id\":\"r\"}}\n\n";
  for (int i = 0; i < 3000; ++i) {
    std::string s = seed;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng()); break;
        case 1: s.erase(at, 1 + rng() % 4); break;
        default: s.insert(at, 1, static_cast<char>(rng())); break;
      }
      if (s.empty()) s.push_back('{');
    }
    for (Api api : {Api::kChat, Api::kCompletions, Api::kResponses}) {
      (void)reply_text(api, s, true);
      (void)reply_text(api, s, false);
      const json j = json::parse(s.substr(s.find('{') == std::string::npos ? 0 : s.find('{')), nullptr, false);
      if (!j.is_discarded()) (void)view_request(api, j);
    }
    (void)response_id(s, true);
    (void)response_id(s, false);
  }
  SUCCEED();
}

}  // namespace
}  // namespace mnemo::router
