// SSE shaping and whole replies against scripted engine events (no engine runs): chat and
// completions (server/completion.h) and the Responses API (server/responses_shaper.h), and the
// one pump (shaped_body) that drives either from a real RequestStream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "server/completion.h"
#include "server/responses_shaper.h"
#include "support/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

// The events of an SSE text: (event name or "", data), each whole.
std::vector<std::pair<std::string, std::string>> sse_events(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  for (size_t end; (end = text.find("\n\n", at)) != std::string_view::npos; at = end + 2) {
    std::string_view name, data;
    std::string_view block = text.substr(at, end - at);
    while (!block.empty()) {
      const size_t eol = std::min(block.find('\n'), block.size());
      const std::string_view line = block.substr(0, eol);
      if (line.starts_with("event: ")) name = line.substr(7);
      if (line.starts_with("data: ")) data = line.substr(6);
      block.remove_prefix(std::min(eol + 1, block.size()));
    }
    out.emplace_back(std::string(name), std::string(data));
  }
  EXPECT_EQ(at, text.size()) << "a partial event";
  return out;
}

class ReplyShaperTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = testing::tiny_tokenizer().release();
    ASSERT_NE(tokenizer_, nullptr);
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  static ParsedRequest request(int32_t n, bool stream, bool include_usage = false, bool report_tokens = false) {
    ParsedRequest r;
    r.generation.n = n;
    r.stream = stream;
    r.include_usage = include_usage;
    r.report_tokens = report_tokens;
    return r;
  }
  static RequestUsage usage() {
    RequestUsage u;
    u.prompt_tokens = 7;
    u.completion_tokens = 3;
    u.cached_tokens = 4;
    return u;
  }

  static Tokenizer* tokenizer_;
};
Tokenizer* ReplyShaperTest::tokenizer_ = nullptr;

TEST_F(ReplyShaperTest, ChatStreamsARoleChunkPerChoiceThenDeltasFinishesUsageAndDone) {
  Completion chat(Endpoint::kChat, "m", request(2, true, /*include_usage=*/true), *tokenizer_);
  std::string out = chat.open_stream();
  EXPECT_FALSE(chat.stream(TokenDelta{0, "Hel", 11, std::nullopt}, out));
  EXPECT_FALSE(chat.stream(TokenDelta{1, "", 12, std::nullopt}, out));  // held-back text: nothing to say
  EXPECT_FALSE(chat.stream(TokenDelta{1, "Yo", 13, std::nullopt}, out));
  EXPECT_FALSE(chat.stream(ChoiceFinished{0, FinishReason::kLength}, out));
  EXPECT_FALSE(chat.stream(ChoiceFinished{1, FinishReason::kStop}, out));
  EXPECT_TRUE(chat.stream(RequestDone{usage(), ""}, out));
  const auto events = sse_events(out);
  ASSERT_EQ(events.size(), 7u) << out;  // role chunk, 2 deltas, 2 finishes, usage, [DONE]
  const json role = json::parse(events[0].second);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  ASSERT_EQ(role["choices"].size(), 2u);
  EXPECT_EQ(role["choices"][1]["delta"]["role"], "assistant");
  const json first = json::parse(events[1].second);
  EXPECT_EQ(first["id"], role["id"]);
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hel");
  EXPECT_FALSE(first["choices"][0].contains("mnemo_token"));  // only for a router that asked
  EXPECT_EQ(json::parse(events[2].second)["choices"][0]["index"], 1);
  EXPECT_EQ(json::parse(events[3].second)["choices"][0]["finish_reason"], "length");
  const json last = json::parse(events[5].second);
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(events[6].second, "[DONE]");
}

TEST_F(ReplyShaperTest, AStreamForARouterNamesEveryTokenAndTheReplicasProgress) {
  Completion completion(Endpoint::kCompletions, "m", request(1, true, false, /*report_tokens=*/true), *tokenizer_);
  int32_t replicated = 0;
  completion.set_replica_progress([&] { return replicated; });
  std::string out = completion.open_stream();
  EXPECT_TRUE(out.empty());  // completions have no role chunk
  replicated = 32;
  EXPECT_FALSE(completion.stream(TokenDelta{0, "", 5, std::nullopt}, out));  // held back, but named
  EXPECT_FALSE(completion.stream(TokenDelta{0, "a", 6, std::nullopt}, out));  // no change: not repeated
  const auto events = sse_events(out);
  ASSERT_EQ(events.size(), 2u);
  const json held = json::parse(events[0].second)["choices"][0];
  EXPECT_EQ(held["text"], "");
  EXPECT_EQ(held["mnemo_token"], 5);
  EXPECT_EQ(held["mnemo_replicated"], 32);
  EXPECT_FALSE(json::parse(events[1].second)["choices"][0].contains("mnemo_replicated"));
}

TEST_F(ReplyShaperTest, AWholeCompletionGathersEachChoicesTextReasonAndUsage) {
  Completion completion(Endpoint::kCompletions, "m", request(2, false), *tokenizer_);
  EXPECT_FALSE(completion.gather(TokenDelta{0, "one ", 1, std::nullopt}));
  EXPECT_FALSE(completion.gather(TokenDelta{1, "two", 2, std::nullopt}));
  EXPECT_FALSE(completion.gather(TokenDelta{0, "more", 3, std::nullopt}));
  EXPECT_FALSE(completion.gather(ChoiceFinished{0, FinishReason::kLength}));
  EXPECT_TRUE(completion.gather(RequestDone{usage(), ""}));
  const ReplyShaper::Whole whole = completion.whole();
  EXPECT_EQ(whole.status, 200);
  const json r = json::parse(whole.body);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "one more");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][1]["text"], "two");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");  // not told otherwise
  EXPECT_EQ(r["usage"]["total_tokens"], 10);
  EXPECT_FALSE(r.contains("error"));
}

TEST_F(ReplyShaperTest, EchoLeadsEachCompletionWithThePromptWholeAndStreamedButNotWhenResumed) {
  ParsedRequest r = request(2, false);
  r.echo = true;
  r.prompt_text = "Once upon";
  Completion whole(Endpoint::kCompletions, "m", r, *tokenizer_);
  whole.gather(TokenDelta{0, " a time", 1, std::nullopt});
  whole.gather(TokenDelta{1, " the hill", 2, std::nullopt});
  EXPECT_TRUE(whole.gather(RequestDone{usage(), ""}));
  const json body = json::parse(whole.whole().body);
  EXPECT_EQ(body["choices"][0]["text"], "Once upon a time");
  EXPECT_EQ(body["choices"][1]["text"], "Once upon the hill");

  r.stream = true;
  Completion streamed(Endpoint::kCompletions, "m", r, *tokenizer_);
  std::string out = streamed.open_stream();
  streamed.stream(TokenDelta{0, " a", 1, std::nullopt}, out);
  const auto events = sse_events(out);
  ASSERT_EQ(events.size(), 2u) << out;
  const json opening = json::parse(events[0].second);
  ASSERT_EQ(opening["choices"].size(), 2u);
  EXPECT_EQ(opening["choices"][1]["text"], "Once upon");
  EXPECT_EQ(json::parse(events[1].second)["choices"][0]["text"], " a");

  r.generation.resume_tokens = {5, 6};  // a failover's continuation: the client has the prompt
  Completion resumed(Endpoint::kCompletions, "m", r, *tokenizer_);
  EXPECT_EQ(resumed.open_stream(), "");
}

ResponseIdentity identity() {
  ResponseIdentity id;
  id.id = "resp_1";
  id.message_id = "msg_1";
  id.created_at = 1700000000;
  id.model = "test-model";  // (a one-letter literal trips GCC 12's false -Wrestrict here)
  id.previous_id = "resp_0";
  id.max_output_tokens = 3;
  return id;
}

TEST_F(ReplyShaperTest, AResponsesStreamIsOpenAIsEventSequenceWithRisingSequenceNumbers) {
  std::vector<json> stored;
  ResponsesShaper shaper(identity(), "", false, [&](const json& r) -> std::optional<ApiError> {
    stored.push_back(r);
    return std::nullopt;
  });
  std::string out = shaper.open_stream();
  EXPECT_FALSE(shaper.stream(TokenDelta{0, "Hi", 1, std::nullopt}, out));
  EXPECT_FALSE(shaper.stream(TokenDelta{0, "", 2, std::nullopt}, out));  // nothing for the client
  EXPECT_FALSE(shaper.stream(TokenDelta{0, " there", 3, std::nullopt}, out));
  EXPECT_FALSE(shaper.stream(ChoiceFinished{0, FinishReason::kStop}, out));
  EXPECT_TRUE(shaper.stream(RequestDone{usage(), ""}, out));
  const auto events = sse_events(out);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    const json data = json::parse(events[i].second);
    EXPECT_EQ(data["type"], events[i].first);
    EXPECT_EQ(data["sequence_number"], i);
    types.push_back(events[i].first);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta",
                                             "response.output_text.delta", "response.output_text.done",
                                             "response.content_part.done", "response.output_item.done",
                                             "response.completed"}));
  const json created = json::parse(events[0].second)["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_TRUE(created["output"].empty());
  EXPECT_EQ(json::parse(events[6].second)["text"], "Hi there");
  const json done = json::parse(events.back().second)["response"];
  EXPECT_EQ(done["id"], "resp_1");
  EXPECT_EQ(done["previous_response_id"], "resp_0");
  EXPECT_EQ(done["output"][0]["id"], "msg_1");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hi there");
  EXPECT_EQ(done["usage"]["input_tokens"], 7);
  ASSERT_EQ(stored.size(), 1u);  // stored before it was reported completed
  EXPECT_EQ(stored[0], done);
}

TEST_F(ReplyShaperTest, AResponsesTurnNotStoredIsNeverReportedCompleted) {
  const auto refuse = [](const json&) -> std::optional<ApiError> {
    return ApiError{507, "disk full", "server_error", "", "insufficient_storage"};
  };
  ResponsesShaper streamed(identity(), "", false, refuse);
  std::string out = streamed.open_stream();
  EXPECT_TRUE(streamed.stream(RequestDone{usage(), ""}, out));
  const auto events = sse_events(out);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].first, "error");
  EXPECT_EQ(json::parse(events[events.size() - 2].second)["code"], "insufficient_storage");
  EXPECT_EQ(events.back().first, "response.failed");
  EXPECT_EQ(json::parse(events.back().second)["response"]["status"], "failed");

  ResponsesShaper whole(identity(), "", false, refuse);
  EXPECT_TRUE(whole.gather(RequestDone{usage(), ""}));
  EXPECT_EQ(whole.whole().status, 507);
  EXPECT_EQ(json::parse(whole.whole().body)["error"]["code"], "insufficient_storage");
}

TEST_F(ReplyShaperTest, AWholeResponseCutByItsLimitIsIncompleteAndGoesOnFromAResumedText) {
  ResponsesShaper shaper(identity(), "Once upon", false, [](const json&) { return std::optional<ApiError>(); });
  EXPECT_FALSE(shaper.gather(TokenDelta{0, " a time", 1, std::nullopt}));
  EXPECT_FALSE(shaper.gather(ChoiceFinished{0, FinishReason::kLength}));
  EXPECT_TRUE(shaper.gather(RequestDone{usage(), ""}));
  const json r = json::parse(shaper.whole().body);
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Once upon a time");
}

// ---- Reasoning split off the reply (chat/reasoning.h)

ParsedRequest reasoning_request(bool stream) {
  ParsedRequest r;
  r.generation.n = 1;
  r.stream = stream;
  r.include_usage = true;
  r.reasoning = ReasoningTags{};
  return r;
}

TEST_F(ReplyShaperTest, AChatReplysReasoningIsReasoningContentWholeAndStreamed) {
  const std::vector<std::string> pieces = {"<th", "ink>\nThe user", " greets.\n</think>", "\n\nHel", "lo!"};
  Completion whole(Endpoint::kChat, "m", reasoning_request(false), *tokenizer_);
  int32_t token = 1;
  for (const std::string& p : pieces) EXPECT_FALSE(whole.gather(TokenDelta{0, p, token++, std::nullopt}));
  EXPECT_TRUE(whole.gather(RequestDone{usage(), ""}));
  const json message = json::parse(whole.whole().body)["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "The user greets.");
  EXPECT_EQ(message["content"], "Hello!");
  // The tokens through the closing tag are reasoning tokens.
  EXPECT_EQ(json::parse(whole.whole().body)["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);

  Completion streamed(Endpoint::kChat, "m", reasoning_request(true), *tokenizer_);
  std::string out = streamed.open_stream();
  token = 1;
  for (const std::string& p : pieces) EXPECT_FALSE(streamed.stream(TokenDelta{0, p, token++, std::nullopt}, out));
  EXPECT_FALSE(streamed.stream(ChoiceFinished{0, FinishReason::kStop}, out));
  EXPECT_TRUE(streamed.stream(RequestDone{usage(), ""}, out));
  std::string reasoning, content;
  for (const auto& [name, data] : sse_events(out)) {
    if (data == "[DONE]") continue;
    const json chunk = json::parse(data);
    if (chunk["choices"].empty()) continue;
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "The user greets.");
  EXPECT_EQ(content, "Hello!");
}

TEST_F(ReplyShaperTest, AChatReplyWithoutTagsIsAllContentAndAPromptThatOpenedThemStartsInside) {
  Completion plain(Endpoint::kChat, "m", reasoning_request(false), *tokenizer_);
  EXPECT_FALSE(plain.gather(TokenDelta{0, "Just <think> text", 1, std::nullopt}));
  EXPECT_TRUE(plain.gather(RequestDone{usage(), ""}));
  const json message = json::parse(plain.whole().body)["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Just <think> text");
  EXPECT_FALSE(message.contains("reasoning_content"));
  EXPECT_EQ(json::parse(plain.whole().body)["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

  ParsedRequest opened = reasoning_request(false);
  opened.reasoning_open = true;
  Completion inside(Endpoint::kChat, "m", opened, *tokenizer_);
  EXPECT_FALSE(inside.gather(TokenDelta{0, "Hmm.</think>Yes.", 1, std::nullopt}));
  EXPECT_TRUE(inside.gather(RequestDone{usage(), ""}));
  const json answer = json::parse(inside.whole().body)["choices"][0]["message"];
  EXPECT_EQ(answer["reasoning_content"], "Hmm.");
  EXPECT_EQ(answer["content"], "Yes.");
}

TEST_F(ReplyShaperTest, AResponsesReplysReasoningIsAReasoningItemBeforeTheMessage) {
  ResponseIdentity id = identity();
  id.reasoning = ReasoningTags{};
  id.reasoning_id = "rs_1";
  const std::vector<std::string> pieces = {"<think>", "Two and two.", "</think>\n", "Four."};
  std::vector<json> stored;
  ResponsesShaper streamed(id, "", false, [&](const json& r) -> std::optional<ApiError> {
    stored.push_back(r);
    return std::nullopt;
  });
  std::string out = streamed.open_stream();
  int32_t token = 1;
  for (const std::string& p : pieces) EXPECT_FALSE(streamed.stream(TokenDelta{0, p, token++, std::nullopt}, out));
  EXPECT_FALSE(streamed.stream(ChoiceFinished{0, FinishReason::kStop}, out));
  EXPECT_TRUE(streamed.stream(RequestDone{usage(), ""}, out));
  std::vector<std::string> types;
  std::string reasoning, text;
  for (const auto& [name, data] : sse_events(out)) {
    types.push_back(name);
    const json event = json::parse(data);
    if (name == "response.reasoning_text.delta") reasoning += event["delta"].get<std::string>();
    if (name == "response.output_text.delta") {
      EXPECT_EQ(event["output_index"], 1);
      text += event["delta"].get<std::string>();
    }
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                       "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
                       "response.output_item.done", "response.output_item.added", "response.content_part.added",
                       "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  EXPECT_EQ(reasoning, "Two and two.");
  EXPECT_EQ(text, "Four.");
  ASSERT_EQ(stored.size(), 1u);
  const json& output = stored[0]["output"];
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["type"], "reasoning");
  EXPECT_EQ(output[0]["id"], "rs_1");
  EXPECT_EQ(output[0]["content"][0], (json{{"type", "reasoning_text"}, {"text", "Two and two."}}));
  EXPECT_EQ(output[1]["type"], "message");
  EXPECT_EQ(output[1]["content"][0]["text"], "Four.");
  EXPECT_EQ(stored[0]["usage"]["output_tokens_details"]["reasoning_tokens"], 3);

  ResponsesShaper whole(id, "", false, [](const json&) { return std::optional<ApiError>(); });
  for (const std::string& p : pieces) EXPECT_FALSE(whole.gather(TokenDelta{0, p, token++, std::nullopt}));
  EXPECT_TRUE(whole.gather(RequestDone{usage(), ""}));
  EXPECT_EQ(json::parse(whole.whole().body)["output"], output);
}

TEST_F(ReplyShaperTest, ThePumpDrivesAShaperFromARealStreamAsEventsArrive) {
  auto stream = std::make_shared<RequestStream>();
  std::vector<std::string> observed;
  auto chat = std::make_shared<Completion>(Endpoint::kChat, "m", request(1, true), *tokenizer_);
  auto body = shaped_body(stream, nullptr, chat, /*streamed=*/true, [&](const StreamEvent& e) {
    observed.push_back(std::holds_alternative<TokenDelta>(e) ? "delta" : "other");
  });
  std::string out;
  EXPECT_FALSE(body->pull(out));  // the role chunk, nothing more yet
  EXPECT_EQ(sse_events(out).size(), 1u);
  stream->push(TokenDelta{0, "x", 1, std::nullopt});
  EXPECT_FALSE(body->pull(out));
  EXPECT_EQ(sse_events(out).size(), 2u);
  stream->push(ChoiceFinished{0, FinishReason::kStop});
  stream->push(RequestDone{usage(), ""});
  EXPECT_TRUE(body->pull(out));
  EXPECT_EQ(sse_events(out).back().second, "[DONE]");
  EXPECT_EQ(observed, (std::vector<std::string>{"delta", "other", "other"}));

  auto whole_stream = std::make_shared<RequestStream>();
  auto whole = shaped_body(whole_stream, nullptr,
                           std::make_shared<Completion>(Endpoint::kChat, "m", request(1, false), *tokenizer_), false, {});
  std::string answer;
  whole_stream->push(TokenDelta{0, "y", 1, std::nullopt});
  EXPECT_FALSE(whole->pull(answer));
  EXPECT_TRUE(answer.empty());  // nothing until the end
  whole_stream->push(RequestDone{usage(), ""});
  EXPECT_TRUE(whole->pull(answer));
  EXPECT_EQ(json::parse(answer)["choices"][0]["message"]["content"], "y");
  EXPECT_EQ(whole->status(), 200);
}

// A failover resumes a tool-call reply on another instance: its client got none of the held-back
// text, so the reply must be whole from the resumed tokens plus what is generated after.
TEST_F(ReplyShaperTest, AResumedToolCallReplyStartsWithTheResumedTokensText) {
  const std::string envelope = R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})";
  std::vector<TokenId> tokens;  // the tiny vocabulary's byte tokens, <0x00> at id 3
  for (const char c : envelope) tokens.push_back(3 + static_cast<uint8_t>(c));
  const size_t split = tokens.size() / 2;
  for (const bool stream : {false, true}) {
    ParsedRequest r = request(1, stream);
    r.tool_use.tools = {ToolSpec{"get_weather", "", json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}})")}};
    r.tool_envelope = true;
    r.generation.resume_tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(split));
    Completion chat(Endpoint::kChat, "m", r, *tokenizer_);
    const std::string first = streamed_text(*tokenizer_, {}, r.generation.resume_tokens);
    ASSERT_TRUE(envelope.starts_with(first)) << first;
    std::vector<StreamEvent> events = {TokenDelta{0, envelope.substr(first.size()), tokens.back(), std::nullopt},
                                       ChoiceFinished{0, FinishReason::kStop}, RequestDone{usage(), ""}};
    json call;
    if (stream) {
      std::string out = chat.open_stream();
      for (const StreamEvent& e : events) chat.stream(e, out);
      std::string arguments;
      for (const auto& [name, data] : sse_events(out)) {
        if (data == "[DONE]") continue;
        const json chunk = json::parse(data);
        for (const json& c : chunk["choices"]) {
          if (!c["delta"].contains("tool_calls")) continue;
          const json& d = c["delta"]["tool_calls"][0];
          if (d.contains("function") && d["function"].contains("name")) call["name"] = d["function"]["name"];
          if (d.contains("function") && d["function"].contains("arguments")) arguments += d["function"]["arguments"].get<std::string>();
        }
      }
      call["arguments"] = arguments;
    } else {
      for (const StreamEvent& e : events) chat.gather(e);
      const json body = json::parse(chat.whole().body);
      call = body["choices"][0]["message"]["tool_calls"][0]["function"];
    }
    EXPECT_EQ(call["name"], "get_weather") << (stream ? "streamed" : "whole");
    EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json::parse(R"({"city": "Paris"})")) << (stream ? "streamed" : "whole");
  }
}

}  // namespace
}  // namespace mnemo::server
