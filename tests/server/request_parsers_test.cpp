// The Responses API request parser and the internal bodies' parsers (server/responses_request.h,
// server/internal_requests.h), on exact inputs: what each accepts, what it refuses and with
// which status and param.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/metrics_text.h"
#include "server/internal_requests.h"
#include "server/responses_request.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

// By value: the results are temporaries.
template <class T>
T accepted(std::variant<T, ApiError> result) {
  if (const auto* error = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << "refused: " << error->message;
    return T{};
  }
  return std::move(std::get<T>(result));
}

template <class T>
ApiError refused(const std::variant<T, ApiError>& result) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(result)) << "accepted";
  return std::holds_alternative<ApiError>(result) ? std::get<ApiError>(result) : ApiError{};
}

TEST(ParseResponsesRequest, ReadsAStringInputAndItsSettings) {
  const json body = {{"model", "m"},           {"input", "Hello"},     {"instructions", "Be brief"},
                     {"max_output_tokens", 16}, {"temperature", 0.5},  {"stream", true},
                     {"store", false},          {"previous_response_id", "resp_1"}};
  const auto r = accepted(parse_responses_request(body, "m"));
  ASSERT_EQ(r.turn.size(), 1u);
  EXPECT_EQ(r.turn[0].role, "user");
  EXPECT_EQ(r.turn[0].content, "Hello");
  EXPECT_EQ(r.instructions.value_or(""), "Be brief");
  EXPECT_EQ(r.request.generation.max_tokens, 16);
  EXPECT_TRUE(r.request.max_tokens_given);
  EXPECT_FLOAT_EQ(r.request.generation.sampling.temperature, 0.5f);
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.previous_id, "resp_1");
}

TEST(ParseResponsesRequest, ReadsItemsJoiningTextPartsAndCallsIntoTheirTurn) {
  const json body = {{"input",
                      {{{"role", "developer"}, {"content", "rules"}},
                       {{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "a"}}, {{"type", "input_text"}, {"text", "b"}}}}},
                       {{"type", "message"}, {"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "Let me look."}}}}},
                       {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "f"}, {"arguments", "{\"x\":1}"}},
                       {{"type", "function_call"}, {"call_id", "call_2"}, {"name", "g"}, {"arguments", "{}"}},
                       {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "42"}}}}};
  const auto r = accepted(parse_responses_request(body, "m"));
  ASSERT_EQ(r.turn.size(), 4u);
  EXPECT_EQ(r.turn[0].role, "system");  // developer is the system role
  EXPECT_EQ(r.turn[1].content, "ab");
  EXPECT_EQ(r.turn[2].content, "Let me look.");  // the text and the calls are one assistant turn
  ASSERT_EQ(r.turn[2].tool_calls.size(), 2u);
  EXPECT_EQ(r.turn[2].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.turn[2].tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(r.turn[2].tool_calls[1].name, "g");
  EXPECT_EQ(r.turn[3].role, "tool");
  EXPECT_EQ(r.turn[3].tool_call_id, "call_1");
  EXPECT_EQ(r.turn[3].content, "42");
  // Stored as items and read back: the same turn.
  std::vector<ChatMessage> again;
  std::string error;
  ASSERT_TRUE(append_items(items_of(r.turn), again, error)) << error;
  ASSERT_EQ(again.size(), 4u);
  EXPECT_EQ(again[2].tool_calls.size(), 2u);
  EXPECT_EQ(again[3].tool_call_id, "call_1");
  // Items it cannot read are refused, not skipped.
  EXPECT_EQ(refused(parse_responses_request({{"input", {{{"type", "function_call"}, {"name", "f"}}}}}, "m")).param, "input");
  EXPECT_EQ(refused(parse_responses_request({{"input", {{{"type", "computer_call"}, {"action", json::object()}}}}}, "m")).param, "input");
  EXPECT_EQ(refused(parse_responses_request({{"input", {{{"type", "reasoning"}, {"content", "x"}}}}}, "m")).param, "input");
  EXPECT_TRUE(r.store);  // stored unless told otherwise
  EXPECT_FALSE(r.stream);
}

TEST(ParseResponsesRequest, ReasoningItemsGoWithTheAssistantMessageAfterThem) {
  const json input = {{{"role", "user"}, {"content", "2+2?"}},
                      {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()},
                       {"content", {{{"type", "reasoning_text"}, {"text", "Add "}}, {{"type", "reasoning_text"}, {"text", "them."}}}}},
                      {{"role", "assistant"}, {"content", "4"}},
                      {{"role", "user"}, {"content", "And 3+3?"}}};
  auto parsed = parse_responses_request({{"input", input}}, "m");
  ASSERT_TRUE(std::holds_alternative<ResponsesRequest>(parsed));
  const ResponsesRequest& r = std::get<ResponsesRequest>(parsed);
  ASSERT_EQ(r.turn.size(), 3u);
  EXPECT_EQ(r.turn[1].role, "assistant");
  EXPECT_EQ(r.turn[1].reasoning_content, "Add them.");
  EXPECT_EQ(r.turn[2].reasoning_content, "");
}

TEST(ParseResponsesRequest, RefusesWrongTypesNamingTheField) {
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"stream", "yes"}}, "m")).param, "stream");
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"store", 1}}, "m")).param, "store");
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"instructions", 5}}, "m")).param, "instructions");
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"previous_response_id", 7}}, "m")).param, "previous_response_id");
  EXPECT_EQ(refused(parse_responses_request({{"input", 3}}, "m")).param, "input");
  EXPECT_EQ(refused(parse_responses_request(json::object(), "m")).param, "input");
  EXPECT_EQ(refused(parse_responses_request({{"input", {{{"role", "robot"}, {"content", "x"}}}}}, "m")).param, "input");
  // The limit is named as the Responses API names it.
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"max_output_tokens", 0}}, "m")).param, "max_output_tokens");
  const ApiError model = refused(parse_responses_request({{"input", "x"}, {"model", "other"}}, "m"));
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.code, "model_not_found");
  EXPECT_EQ(refused(parse_responses_request(json::array(), "m")).status, 400);
}

TEST(ParseResponsesRequest, ReadsAResumedResponseOnlyWithItsPrefixes) {
  const json good = {{"input", "x"},
                     {"mnemo_resume_response", {{"id", "resp_1"}, {"message_id", "msg_2"}, {"created_at", 5}, {"text", "so far"}}}};
  const auto r = accepted(parse_responses_request(good, "m"));
  EXPECT_EQ(r.resumed.id, "resp_1");
  EXPECT_EQ(r.resumed.message_id, "msg_2");
  EXPECT_EQ(r.resumed.created_at, 5);
  EXPECT_EQ(r.resumed.text, "so far");
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"mnemo_resume_response", {{"id", "x_1"}}}}, "m")).param,
            "mnemo_resume_response");
  EXPECT_EQ(refused(parse_responses_request({{"input", "x"}, {"mnemo_resume_response", {{"created_at", -1}}}}, "m")).param,
            "mnemo_resume_response");
}

TEST(ParseKvPushBody, ReadsTargetApiAndRequest) {
  const json body = {{"target", "127.0.0.1:7000"}, {"api", "completions"}, {"request", {{"prompt", {1, 2, 3}}}}};
  const auto push = accepted(parse_kv_push_body(body));
  EXPECT_EQ(push.target, "127.0.0.1:7000");
  EXPECT_EQ(push.endpoint, Endpoint::kCompletions);
  EXPECT_EQ(push.request.prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
  const auto chat = accepted(parse_kv_push_body({{"target", "t"}, {"request", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}}}));
  EXPECT_EQ(chat.endpoint, Endpoint::kChat);  // chat unless told otherwise
}

TEST(ParseKvPushBody, RefusesAMissingTargetAnUnknownApiAndABadRequest) {
  EXPECT_EQ(refused(parse_kv_push_body({{"request", {{"prompt", "x"}}}})).status, 400);
  EXPECT_EQ(refused(parse_kv_push_body({{"target", 5}, {"request", {{"prompt", "x"}}}})).status, 400);
  EXPECT_EQ(refused(parse_kv_push_body({{"target", "t"}, {"api", "embeddings"}, {"request", {{"prompt", "x"}}}})).param, "api");
  EXPECT_EQ(refused(parse_kv_push_body({{"target", "t"}, {"api", "completions"}, {"request", {{"prompt", "x"}, {"n", 0}}}})).status,
            400);
}

TEST(ParseImportBody, KeepsTheRequestWithoutTheRoutersFields) {
  const json body = {{"request", {{"input", "hi"}, {"mnemo_replica", {"a"}}, {"mnemo_report_tokens", true}}},
                     {"response", {{"id", "resp_2"}, {"output", json::array()}}}};
  const auto import = accepted(parse_import_body(body));
  EXPECT_EQ(import.id, "resp_2");
  EXPECT_EQ(import.request, (json{{"input", "hi"}}));
  EXPECT_EQ(import.response["id"], "resp_2");
}

TEST(ParseImportBody, RefusesAResponseThatIsNotOne) {
  EXPECT_EQ(refused(parse_import_body({{"request", json::object()}})).status, 400);
  EXPECT_EQ(refused(parse_import_body({{"request", json::object()}, {"response", {{"id", "x_2"}, {"output", json::array()}}}})).param,
            "response");
  EXPECT_EQ(refused(parse_import_body({{"request", json::object()}, {"response", {{"id", "resp_2"}, {"output", json::object()}}}})).param,
            "response");
  EXPECT_EQ(refused(parse_import_body({{"request", json::object()}, {"response", {{"id", 2}, {"output", json::array()}}}})).param,
            "response");
}

TEST(ApiErrorOf, MapsEveryCodeToItsStatusInOnePlace) {
  const auto of = [](ErrorCode code) { return api_error_of(Error("m", code)); };
  EXPECT_EQ(of(ErrorCode::kInvalidArgument).status, 400);
  EXPECT_EQ(of(ErrorCode::kInvalidArgument).type, "invalid_request_error");
  EXPECT_EQ(of(ErrorCode::kInvalidArgument).code, "");
  EXPECT_EQ(of(ErrorCode::kNotFound).status, 404);
  EXPECT_EQ(of(ErrorCode::kPermissionDenied).status, 403);
  EXPECT_EQ(of(ErrorCode::kUnavailable).status, 503);
  EXPECT_EQ(of(ErrorCode::kUnavailable).type, "server_error");
  EXPECT_EQ(of(ErrorCode::kUnavailable).code, "unavailable");
  EXPECT_EQ(of(ErrorCode::kResourceExhausted).status, 507);
  for (ErrorCode code : {ErrorCode::kCorruption, ErrorCode::kIoError, ErrorCode::kInternal}) EXPECT_EQ(of(code).status, 500);
  const ApiError named = api_error_of(Error("bad", ErrorCode::kInvalidArgument), "messages");
  EXPECT_EQ(named.param, "messages");
  EXPECT_EQ(named.message, "bad");
}

TEST(MetricsText, ChunkCountersUseTheWordChunkAndKeepTheirOldNamesOneRelease) {
  MetricsSnapshot m;
  m.cache_demoted_chunks = 3;
  m.cache_ahead_copied_chunks = 5;
  m.cache_dropped_chunks = 7;
  const std::string text = render_metrics(m);
  for (const auto& [name, value] : std::vector<std::pair<std::string, int>>{{"cache_demoted", 3}, {"cache_ahead_copied", 5},
                                                                            {"cache_dropped", 7}}) {
    EXPECT_NE(text.find("mnemo_" + name + "_chunks_total " + std::to_string(value) + "\n"), std::string::npos) << name;
    EXPECT_NE(text.find("mnemo_" + name + "_blocks_total " + std::to_string(value) + "\n"), std::string::npos) << name;
    EXPECT_NE(text.find("# HELP mnemo_" + name + "_blocks_total Deprecated"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace mnemo::server
