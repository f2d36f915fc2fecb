// The client's one stream out of a request's successive upstreams (SPEC D7): tokens recorded and
// their field removed, events handled only once whole however the bytes are cut, a resumed
// upstream rewritten into the first one's stream (id, created, no second opening role chunk),
// and the end recognised; Responses streams likewise (one rising sequence_number, the openings
// once, what the resumed instance must answer as).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/sse_stitcher.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

std::string event(const json& payload) { return "data: " + payload.dump() + "\n\n"; }

json chunk(const std::string& id, int created, json delta, int token = -1, json finish = nullptr) {
  json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", std::move(finish)}};
  if (token >= 0) choice["mnemo_token"] = token;
  return {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", "m"}, {"choices", {choice}}};
}

std::vector<json> payloads(const std::string& stream) {
  std::vector<json> out;
  size_t at = 0;
  for (size_t end; (end = stream.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string line = stream.substr(at, end - at);
    EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
    const std::string data = line.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
  }
  EXPECT_EQ(at, stream.size()) << "a partial event went out";
  return out;
}

TEST(SseStitcher, RecordsTokensRemovesTheirFieldAndPassesEventsOnWholeHoweverCut) {
  const std::string upstream = event(chunk("a", 5, {{"role", "assistant"}, {"content", ""}})) +
                               event(chunk("a", 5, {{"content", "Hel"}}, 11)) +
                               event(chunk("a", 5, {{"content", ""}}, 12)) +  // text held back
                               event(chunk("a", 5, {{"content", "lo\n\nworld"}}, 13));
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, upstream.size()}) {
    SseStitcher s;
    std::string out;
    for (size_t at = 0; at < upstream.size(); at += piece) out += s.feed(std::string_view(upstream).substr(at, piece));
    EXPECT_EQ(s.tokens(), (std::vector<int32_t>{11, 12, 13})) << "pieces of " << piece;
    const auto events = payloads(out);
    ASSERT_EQ(events.size(), 4u);
    for (const json& e : events) EXPECT_FALSE(e["choices"][0].contains("mnemo_token"));
    EXPECT_EQ(events[3]["choices"][0]["delta"]["content"], "lo\n\nworld");
    EXPECT_FALSE(s.finished());
    EXPECT_FALSE(s.done());
  }
}

TEST(SseStitcher, AResumedUpstreamContinuesTheFirstStream) {
  SseStitcher s;
  json with_progress = chunk("first", 100, {{"content", "A"}}, 1);
  with_progress["choices"][0]["mnemo_replicated"] = 64;
  std::string out = s.feed(event(chunk("first", 100, {{"role", "assistant"}, {"content", ""}})) + event(with_progress) +
                           "data: {\"id\":\"first\",\"cho");
  EXPECT_EQ(s.replicated_tokens(), 64);
  EXPECT_EQ(out.find("mnemo_replicated"), std::string::npos);
  s.begin_resumed();  // the unfinished event is dropped with its upstream
  EXPECT_EQ(s.resumes(), 1);
  EXPECT_EQ(s.replicated_tokens(), 0);  // the resumed part has no replica
  out += s.feed(event(chunk("second", 200, {{"role", "assistant"}, {"content", ""}})) +
                event(chunk("second", 200, {{"content", "B"}}, 2)) +
                event(chunk("second", 200, json::object(), -1, "length")));
  json usage_chunk = {{"id", "second"}, {"created", 200}, {"choices", json::array()},
                      {"usage", {{"prompt_tokens", 9}, {"completion_tokens", 2}}}};
  out += s.feed(event(usage_chunk) + "data: [DONE]\n\n");
  const auto events = payloads(out);
  ASSERT_EQ(events.size(), 6u);  // role, A, B, finish, usage, [DONE]: one role chunk only
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["id"], "first") << i;
    EXPECT_EQ(events[i]["created"], 100) << i;
  }
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "A");
  EXPECT_EQ(events[2]["choices"][0]["delta"]["content"], "B");
  EXPECT_EQ(events[4]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(events[5], "[DONE]");
  EXPECT_EQ(s.tokens(), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(s.finished());
  EXPECT_TRUE(s.done());
}

TEST(SseStitcher, CompletionsStreamsAndOtherChoicesAndForeignEventsPassUntouched) {
  SseStitcher s;
  json text_chunk = {{"id", "c"}, {"created", 1}, {"object", "text_completion"},
                     {"choices", {{{"index", 0}, {"text", "x"}, {"mnemo_token", 4}, {"finish_reason", nullptr}}}}};
  json other_choice = {{"id", "c"}, {"created", 1}, {"choices", {{{"index", 1}, {"text", "y"}, {"mnemo_token", 5}}}}};
  const std::string comment = ": keep-alive\n\n";
  const std::string named = "event: ping\ndata: {}\n\n";
  const std::string not_json = "data: {not json\n\n";
  const std::string error = event({{"error", {{"message", "boom"}}}});
  const std::string out = s.feed(event(text_chunk) + event(other_choice) + comment + named + not_json + error);
  EXPECT_EQ(s.tokens(), (std::vector<int32_t>{4}));  // choice 1's token is not choice 0's
  EXPECT_NE(out.find(comment), std::string::npos);
  EXPECT_NE(out.find(named), std::string::npos);
  EXPECT_NE(out.find(not_json), std::string::npos);
  EXPECT_NE(out.find("boom"), std::string::npos);
  EXPECT_EQ(out.find("mnemo_token"), std::string::npos);
  EXPECT_FALSE(s.finished());
}

TEST(SseStitcher, AFinishReasonMarksTheReplyWholeEvenWithoutTheEndMarker) {
  SseStitcher s;
  (void)s.feed(event(chunk("a", 1, {{"content", "z"}}, 3, "stop")));
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.done());
}

// A Responses event as an instance sends it.
std::string response_event(const std::string& type, json payload, int64_t sequence) {
  payload["type"] = type;
  payload["sequence_number"] = sequence;
  return "event: " + type + "\ndata: " + payload.dump() + "\n\n";
}

// The opening events of a Responses stream, numbered from 0 as every instance numbers them.
std::string response_openings(const std::string& id, int64_t created_at, const std::string& message_id) {
  const json response = {{"id", id}, {"object", "response"}, {"created_at", created_at}, {"status", "in_progress"}};
  return response_event("response.created", {{"response", response}}, 0) +
         response_event("response.in_progress", {{"response", response}}, 1) +
         response_event("response.output_item.added", {{"output_index", 0}, {"item", {{"id", message_id}, {"type", "message"}}}}, 2) +
         response_event("response.content_part.added", {{"item_id", message_id}, {"output_index", 0}, {"content_index", 0}}, 3);
}

json text_delta(const std::string& message_id, const std::string& text, int token) {
  json d = {{"item_id", message_id}, {"output_index", 0}, {"content_index", 0}, {"delta", text}};
  if (token >= 0) d["mnemo_token"] = token;
  return d;
}

struct NamedEvent {
  std::string name;
  json payload;
};

std::vector<NamedEvent> named_events(const std::string& stream) {
  std::vector<NamedEvent> out;
  size_t at = 0;
  for (size_t end; (end = stream.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string text = stream.substr(at, end - at);
    const size_t newline = text.find('\n');
    EXPECT_EQ(text.rfind("event: ", 0), 0u) << text;
    EXPECT_EQ(text.compare(newline + 1, 6, "data: "), 0) << text;
    out.push_back({text.substr(7, newline - 7), json::parse(text.substr(newline + 7))});
  }
  EXPECT_EQ(at, stream.size()) << "a partial event went out";
  return out;
}

TEST(SseStitcher, AResumedResponsesStreamIsOneResponseWithOneRisingSequence) {
  SseStitcher s;
  EXPECT_TRUE(s.resume_response().is_null());
  json progress = text_delta("msg_a", "Hel", 7);
  progress["mnemo_replicated"] = 32;
  std::string out = s.feed(response_openings("resp_a", 100, "msg_a") + response_event("response.output_text.delta", progress, 4) +
                           response_event("response.output_text.delta", text_delta("msg_a", "", 8), 5) +  // held back
                           response_event("response.output_text.delta", text_delta("msg_a", "lo", 9), 6) + "event: response.out");
  EXPECT_EQ(s.tokens(), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(s.replicated_tokens(), 32);
  EXPECT_EQ(s.resume_response(), (json{{"id", "resp_a"}, {"message_id", "msg_a"}, {"created_at", 100}, {"text", "Hello"}}));
  s.begin_resumed();
  // The resumed instance answers as resp_a, numbering its own events from 0.
  out += s.feed(response_openings("resp_a", 100, "msg_a") +
                response_event("response.output_text.delta", text_delta("msg_a", " world", 10), 4) +
                response_event("response.output_text.done", {{"item_id", "msg_a"}, {"text", "Hello world"}}, 5));
  EXPECT_FALSE(s.finished());
  out += s.feed(response_event("response.completed", {{"response", {{"id", "resp_a"}, {"status", "completed"}}}}, 6));
  EXPECT_TRUE(s.finished());
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.tokens(), (std::vector<int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(out.find("mnemo_"), std::string::npos) << out;

  const auto events = named_events(out);
  std::vector<std::string> names;
  for (size_t i = 0; i < events.size(); ++i) {
    names.push_back(events[i].name);
    EXPECT_EQ(events[i].payload["type"], events[i].name);
    EXPECT_EQ(events[i].payload["sequence_number"], static_cast<int64_t>(i)) << events[i].name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta",
                                             "response.output_text.delta", "response.output_text.delta",
                                             "response.output_text.done", "response.completed"}));
  EXPECT_EQ(events[4].payload["delta"], "Hel");
  EXPECT_EQ(events[6].payload["delta"], " world");
}

TEST(SseStitcher, AResponsesUpstreamThatFailedBeforeItsOpeningsLeavesTheNextOnesToTheClient) {
  SseStitcher s;
  (void)s.feed(response_event("response.created", {{"response", {{"id", "resp_a"}, {"created_at", 5}}}}, 0));
  EXPECT_EQ(s.resume_response(), (json{{"id", "resp_a"}, {"created_at", 5}, {"text", ""}}));  // no message id yet
  s.begin_resumed();
  const auto events = named_events(s.feed(response_openings("resp_a", 5, "msg_b")));
  ASSERT_EQ(events.size(), 3u);  // response.created went out already; the others had not
  EXPECT_EQ(events[0].name, "response.in_progress");
  EXPECT_EQ(events[1].payload["item"]["id"], "msg_b");
  EXPECT_EQ(events[2].payload["sequence_number"], 3);
  EXPECT_EQ(s.resume_response()["message_id"], "msg_b");
  EXPECT_FALSE(s.finished());
}

TEST(SseStitcher, AResumedChatStreamKeepsItsRoleChunkIfTheClientHadNone) {
  SseStitcher s;
  s.begin_resumed();  // the first upstream failed before its first chunk
  const auto events = payloads(s.feed(event(chunk("b", 2, {{"role", "assistant"}, {"content", ""}})) +
                                      event(chunk("b", 2, {{"content", "x"}}, 1))));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0]["choices"][0]["delta"].contains("role"));
}

}  // namespace
}  // namespace mnemo::router
