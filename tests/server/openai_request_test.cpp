// The chat-completions and completions parser (server/openai_request.h) on exact inputs: what it
// reads into the generation request, and what it refuses, with the param at fault.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/responses_request.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

ParsedRequest accepted(const json& body, bool chat) {
  auto result = parse_request(body, chat);
  if (const auto* error = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << "refused: " << error->message;
    return {};
  }
  return std::move(std::get<ParsedRequest>(result));
}

ApiError refused(const json& body, bool chat) {
  auto result = parse_request(body, chat);
  EXPECT_TRUE(std::holds_alternative<ApiError>(result)) << "accepted: " << body.dump();
  return std::holds_alternative<ApiError>(result) ? std::get<ApiError>(result) : ApiError{};
}

TEST(ParseRequest, ReadsAChatRequestsMessagesAndSampling) {
  const json body = {{"model", "m"},
                     {"messages", {{{"role", "developer"}, {"content", "rules"}}, {{"role", "user"}, {"content", "hi"}}}},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"max_completion_tokens", 7},
                     {"temperature", 0.25},
                     {"top_p", 0.5},
                     {"top_k", 40},
                     {"n", 3},
                     {"seed", 11},
                     {"stop", "END"},
                     {"logprobs", true},
                     {"top_logprobs", 2},
                     {"cache_salt", "s"}};
  const ParsedRequest r = accepted(body, /*chat=*/true);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is the system role
  EXPECT_EQ(r.messages[1].content, "hi");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.generation.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.generation.sampling.temperature, 0.25f);
  EXPECT_FLOAT_EQ(r.generation.sampling.top_p, 0.5f);
  EXPECT_EQ(r.generation.sampling.top_k, 40);
  EXPECT_EQ(r.generation.n, 3);
  EXPECT_EQ(r.generation.sampling.seed, 11u);
  EXPECT_EQ(r.generation.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.generation.top_logprobs, 2);
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_TRUE(r.replica_endpoints.empty());
  EXPECT_FALSE(r.report_tokens);
}

TEST(ParseRequest, WhatIsLeftOutIsLeftToTheServersDefaults) {
  const ParsedRequest r = accepted({{"prompt", "Once"}}, /*chat=*/false);
  EXPECT_EQ(r.prompt_text, "Once");
  // The server draws a seed and applies its sampling defaults (Server::prepare).
  EXPECT_FALSE(r.seed_given || r.temperature_given || r.top_k_given || r.top_p_given || r.min_p_given);
  EXPECT_TRUE(accepted({{"prompt", "Once"}, {"seed", 0}}, false).seed_given);
  const ParsedRequest given = accepted({{"prompt", "Once"}, {"temperature", 1}, {"top_k", 0}, {"top_p", 1}, {"min_p", 0}}, false);
  EXPECT_TRUE(given.temperature_given && given.top_k_given && given.top_p_given && given.min_p_given);
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_EQ(r.generation.n, 1);
  EXPECT_FALSE(r.stream);
}

TEST(ParseRequest, ACompletionsPromptIsTextOrTokenIdsAndLogprobsACount) {
  const ParsedRequest ids = accepted({{"prompt", {1, 2, 3}}, {"logprobs", 3}}, /*chat=*/false);
  EXPECT_EQ(ids.prompt_tokens, (std::vector<TokenId>{1, 2, 3}));
  EXPECT_TRUE(ids.logprobs);
  EXPECT_EQ(ids.generation.top_logprobs, 3);
  const ParsedRequest one = accepted({{"prompt", {"only one"}}}, /*chat=*/false);
  EXPECT_EQ(one.prompt_text, "only one");
  EXPECT_EQ(refused({{"prompt", {-1}}}, false).param, "prompt");
  EXPECT_EQ(refused({{"prompt", {"a", "b"}}}, false).param, "prompt");  // one prompt per request
  EXPECT_EQ(refused({{"max_tokens", 4}}, false).param, "prompt");       // required
  EXPECT_EQ(refused({{"prompt", "x"}, {"logprobs", 6}}, false).param, "logprobs");
}

TEST(ParseRequest, RefusesEachBadFieldNamingIt) {
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const auto with = [&](const char* field, json value) {
    json body = chat;
    body[field] = std::move(value);
    return body;
  };
  for (const auto& [field, value] : std::vector<std::pair<const char*, json>>{
           {"model", 3},
           {"temperature", 2.5},
           {"top_p", "high"},
           {"n", 0},
           {"max_tokens", 0},
           {"seed", 1.5},
           {"stop", json::array({1})},
           {"stream", "yes"},
           {"cache_salt", 5},
           {"cache_control", {{"type", "persistent"}}},
           {"cache_control", "end"},
           {"cache_control", {{"type", "end"}, {"ttl", "5m"}}},
           {"cache_control", {{"type", "ephemeral"}, {"ttl", "5 minutes"}}},
           {"cache_control", {{"type", "ephemeral"}, {"ttl", "0s"}}},
           {"cache_control", {{"type", "ephemeral"}, {"ttl", -3}}},
           {"cache_control", {{"type", "ephemeral"}, {"ttl", "9999999h"}}},
           {"cache_control", {{"type", "ephemeral"}, {"ttl", "5m"}, {"scope", "global"}}},
           {"top_logprobs", 3},  // without logprobs
           {"mnemo_resume_tokens", json::array({-3})},
           {"mnemo_replica", json::array({""})}}) {
    const ApiError error = refused(with(field, value), /*chat=*/true);
    EXPECT_EQ(error.status, 400) << field;
    EXPECT_EQ(error.param, field) << field;
    EXPECT_NE(error.message.find(field), std::string::npos) << field << ": " << error.message;
  }
  EXPECT_EQ(refused({{"messages", json::array()}}, true).param, "messages");
  EXPECT_EQ(refused({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, true).param, "messages[0].role");
  EXPECT_EQ(refused(json::array({1}), true).status, 400);  // not an object
}

TEST(ParseRequest, CacheControlEphemeralPinsForItsTtl) {
  const auto ttl_of = [&](json control) {
    return accepted({{"prompt", "x"}, {"cache_control", std::move(control)}}, false).generation.cache_ttl_seconds;
  };
  EXPECT_EQ(accepted({{"prompt", "x"}}, false).generation.cache_ttl_seconds, 0);
  EXPECT_EQ(ttl_of({{"type", "ephemeral"}}), 300);  // Anthropic's default: five minutes
  EXPECT_EQ(ttl_of({{"type", "ephemeral"}, {"ttl", "45s"}}), 45);
  EXPECT_EQ(ttl_of({{"type", "ephemeral"}, {"ttl", "5m"}}), 300);
  EXPECT_EQ(ttl_of({{"type", "ephemeral"}, {"ttl", "1h"}}), 3600);
  EXPECT_EQ(ttl_of({{"type", "ephemeral"}, {"ttl", 90}}), 90);
  EXPECT_EQ(ttl_of({{"type", "ephemeral"}, {"ttl", 2.5}}), 2.5);
  const ParsedRequest chat = accepted(
      {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"cache_control", {{"type", "ephemeral"}, {"ttl", "2m"}}}}, true);
  EXPECT_EQ(chat.generation.cache_ttl_seconds, 120);
  EXPECT_FALSE(chat.generation.end_conversation);
  // An unknown type is named in the error, bounded and cut between characters.
  std::string long_type = "x";  // then byte 40 falls inside a character
  for (int i = 0; i < 30; ++i) long_type += "\u00e9";  // é: two bytes each
  const ApiError error = refused({{"prompt", "x"}, {"cache_control", {{"type", long_type}}}}, false);
  EXPECT_EQ(error.param, "cache_control");
  EXPECT_LT(error.message.size(), 200u) << error.message;
  EXPECT_NE(error.message.find("...'"), std::string::npos) << error.message;
  EXPECT_NO_THROW((void)error.to_json().dump()) << "the message must stay valid UTF-8";
}

TEST(ParseRequest, CacheControlEndsTheConversation) {
  const json end = {{"type", "end"}};
  EXPECT_FALSE(accepted({{"prompt", "x"}}, false).generation.end_conversation);
  EXPECT_TRUE(accepted({{"prompt", "x"}, {"cache_control", end}}, false).generation.end_conversation);
  EXPECT_TRUE(accepted({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"cache_control", end}}, true)
                  .generation.end_conversation);
}

TEST(ParseRequest, AStopListIsBoundedInCountAndLength) {
  json body = {{"prompt", "x"}, {"stop", json::array()}};
  for (size_t i = 0; i < kMaxStopStrings; ++i) body["stop"].push_back(std::string(i + 1, 'x'));
  EXPECT_EQ(accepted(body, false).generation.stop.size(), kMaxStopStrings);
  body["stop"].push_back(std::string(kMaxStopStrings + 1, 'x'));
  EXPECT_EQ(refused(body, false).param, "stop");
  body["stop"] = std::string(kMaxStopBytes, 'x');
  EXPECT_EQ(accepted(body, false).generation.stop.size(), 1u);
  body["stop"] = std::string(kMaxStopBytes + 1, 'x');
  EXPECT_EQ(refused(body, false).param, "stop");
}

TEST(ParseRequest, ARoutersFieldsAreRead) {
  const json body = {{"prompt", "x"},
                     {"mnemo_report_tokens", true},
                     {"mnemo_resume_tokens", {5, 6}},
                     {"mnemo_replica", {"127.0.0.1:7000", "127.0.0.1:7001"}},
                     {"mnemo_replica_known_tokens", {32, 0}},
                     {"mnemo_replica_at_end", {true, false}},
                     {"mnemo_replica_wait", true}};
  const ParsedRequest r = accepted(body, false);
  EXPECT_TRUE(r.report_tokens);
  EXPECT_EQ(r.generation.resume_tokens, (std::vector<TokenId>{5, 6}));
  EXPECT_EQ(r.replica_endpoints, (std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001"}));
  EXPECT_EQ(r.replica_known_tokens, (std::vector<int32_t>{32, 0}));
  EXPECT_EQ(r.replica_at_end, (std::vector<bool>{true, false}));
  EXPECT_TRUE(r.replica_wait);
}

TEST(ParseRequest, AParameterNotImplementedIsRefusedByName) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}};
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"tools", json::array({{{"type", "web_search"}}})},
           {"tool_choice", "required"},  // without tools
           {"response_format", {{"type", "grammar"}}},
           {"prediction", {{"type", "content"}, {"content", "x"}}},
           {"function_call", "auto"},
           {"no_such_field", {{"deep", json::array({1, 2})}}}}) {
    const ApiError e = refused({{"messages", messages}, {field, value}}, /*chat=*/true);
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.param, field);
    EXPECT_NE(e.message.find(field), std::string::npos) << e.message;
  }
  EXPECT_TRUE(accepted({{"prompt", "x"}, {"echo", true}}, false).echo);
  EXPECT_EQ(refused({{"prompt", "x"}, {"echo", true}, {"logprobs", 2}}, false).param, "echo");  // prompt logprobs
  EXPECT_EQ(refused({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"echo", true}}, true).param, "echo");
  EXPECT_EQ(refused({{"prompt", "x"}, {"suffix", "end"}}, false).param, "suffix");
  // Chat's fields are not completions' and the other way round.
  EXPECT_EQ(refused({{"prompt", "x"}, {"top_logprobs", 2}}, false).param, "top_logprobs");
  EXPECT_EQ(refused({{"messages", messages}, {"prompt", "x"}}, true).param, "prompt");
}

TEST(ParseRequest, ReadsLogitBiasSortedAndRefusesBadEntries) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  const ParsedRequest r = accepted({{"messages", messages}, {"logit_bias", {{"15", 5}, {"3", -100}, {"200", 0.5}}}}, true);
  using Bias = std::vector<std::pair<int32_t, float>>;
  EXPECT_EQ(r.generation.sampling.logit_bias, (Bias{{3, -100.0f}, {15, 5.0f}, {200, 0.5f}}));
  for (const json& bad : {json{{"x", 1}}, json{{"-1", 1}}, json{{"1", 101}}, json{{"1", "1"}}, json{{"1", 1}, {"01", 2}},
                          json::array({1})}) {
    EXPECT_EQ(refused({{"messages", messages}, {"logit_bias", bad}}, true).param, "logit_bias") << bad.dump();
  }
}

TEST(ParseRequest, ResponseFormatsCompileTheirSchemaOrSayWhatIsWrong) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(accepted({{"messages", messages}, {"response_format", {{"type", "json_object"}}}}, true).generation.format,
            OutputFormat::kJsonObject);
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  const ParsedRequest r = accepted(
      {{"messages", messages}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}, {"strict", true}}}}}},
      true);
  EXPECT_EQ(r.generation.format, OutputFormat::kJsonSchema);
  ASSERT_NE(r.generation.schema, nullptr);
  EXPECT_EQ(r.generation.schema->nodes.size(), 2u);
  for (const char* bad : {R"({"type": "json_schema"})",
                          R"({"type": "json_schema", "json_schema": {"schema": {"type": "array", "items": {"type": "string"}}}})",
                          R"({"type": "json_schema", "json_schema": {"schema": {"type": "object"}, "extra": 1}})",
                          R"({"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "number", "minimum": 2}}}}})",
                          R"({"type": "xml"})", R"("json_object")"}) {
    EXPECT_EQ(refused({{"messages", messages}, {"response_format", json::parse(bad)}}, true).param, "response_format") << bad;
  }
}

TEST(ParseRequest, NoOpsNullsAndValuesAskingForTheDefaultAreAccepted) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  accepted({{"messages", messages},
            {"user", "u1"},
            {"metadata", {{"k", "v"}}},
            {"store", false},
            {"service_tier", "auto"},
            {"prompt_cache_key", "p"},
            {"tools", json::array()},
            {"tool_choice", "none"},
            {"parallel_tool_calls", true},
            {"response_format", {{"type", "text"}}},
            {"logit_bias", json::object()},
            {"functions", nullptr},
            {"no_such_field", nullptr}},
           /*chat=*/true);
  accepted({{"prompt", "x"}, {"echo", false}, {"suffix", ""}, {"best_of", 1}}, false);
}

TEST(ParseResponsesRequest, ToolsAndStructuredFormatsAreRefusedPlainTextAccepted) {
  const auto error_of = [](const json& body) {
    auto result = parse_responses_request(body, "m");
    return std::holds_alternative<ApiError>(result) ? std::get<ApiError>(result).param : std::string("(accepted)");
  };
  EXPECT_EQ(error_of({{"input", "hi"}, {"tools", json::array({{{"type", "web_search"}}})}}), "tools");
  EXPECT_EQ(error_of({{"input", "hi"}, {"text", {{"format", {{"type", "yaml"}}}}}}), "text");
  EXPECT_EQ(error_of({{"input", "hi"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "x"}}}}}}), "text");  // no schema
  EXPECT_EQ(error_of({{"input", "hi"}, {"text", {{"format", {{"type", "json_object"}}}}}}), "(accepted)");
  EXPECT_EQ(error_of({{"input", "hi"}, {"reasoning", {{"effort", "low"}}}}), "reasoning");
  EXPECT_EQ(error_of({{"input", "hi"}, {"messages", json::array()}}), "messages");  // chat's field, not this API's
  EXPECT_EQ(error_of({{"input", "hi"}, {"text", {{"format", {{"type", "text"}}}}}, {"store", true}, {"metadata", json::object()}}),
            "(accepted)");
  EXPECT_EQ(error_of({{"input", "hi"}, {"cache_control", {{"type", "end"}}}}), "(accepted)");
  EXPECT_EQ(error_of({{"input", "hi"}, {"cache_control", {{"type", "keep"}}}}), "cache_control");
  EXPECT_EQ(error_of({{"input", "hi"}, {"cache_control", {{"type", "ephemeral"}, {"ttl", "1h"}}}}), "(accepted)");
  auto pinned = parse_responses_request({{"input", "hi"}, {"cache_control", {{"type", "ephemeral"}, {"ttl", "1h"}}}}, "m");
  ASSERT_TRUE(std::holds_alternative<ResponsesRequest>(pinned));
  EXPECT_EQ(std::get<ResponsesRequest>(pinned).request.generation.cache_ttl_seconds, 3600);
  auto ended = parse_responses_request({{"input", "hi"}, {"cache_control", {{"type", "end"}}}}, "m");
  ASSERT_TRUE(std::holds_alternative<ResponsesRequest>(ended));
  EXPECT_TRUE(std::get<ResponsesRequest>(ended).request.generation.end_conversation);
}

}  // namespace
}  // namespace mnemo::server
