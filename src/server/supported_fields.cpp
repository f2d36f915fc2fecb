#include "server/supported_fields.h"

#include <algorithm>
#include <span>

#include <fmt/format.h>

namespace mnemo::server {
namespace {

using nlohmann::json;

// What the server implements, per endpoint (mnemo_* fields are the cluster's: caller.h checks
// who sends them).
constexpr std::string_view kSamplingFields[] = {
    "model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "seed", "stop", "ignore_eos", "cache_salt", "cache_control",
    "speculation", "mnemo_replica", "mnemo_replica_known_tokens", "mnemo_replica_at_end", "mnemo_replica_wait", "mnemo_report_tokens",
    "mnemo_resume_tokens", "mnemo_persist_running"};
constexpr std::string_view kChatFields[] = {"messages", "max_tokens", "max_completion_tokens", "n", "logprobs",
                                            "top_logprobs", "logit_bias", "response_format",
                                            "tools", "tool_choice", "parallel_tool_calls", "grammar",
                                            "chat_template_kwargs"};
constexpr std::string_view kCompletionFields[] = {"prompt", "max_tokens", "n", "logprobs", "logit_bias", "echo", "grammar"};
constexpr std::string_view kResponsesFields[] = {"input", "instructions", "previous_response_id", "max_output_tokens",
                                                 "mnemo_resume_response", "tools", "tool_choice",
                                                 "parallel_tool_calls"};

// OpenAI parameters this server knows but does not implement yet: named as such in the error.
constexpr std::string_view kKnownUnimplemented[] = {
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "response_format", "logit_bias",
    "echo", "suffix", "best_of", "text", "reasoning", "reasoning_effort", "include", "truncation", "background",
    "audio", "modalities", "prediction", "web_search_options", "max_tool_calls", "conversation", "prompt",
    "top_logprobs", "verbosity"};

bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_type(const json& value, std::string_view type) {
  return value.is_object() && value.size() == 1 && value.contains("type") && value["type"] == type;
}

// A value of an unimplemented field that asks for what the server does anyway.
bool asks_for_the_default(std::string_view name, const json& value) {
  if (name == "tools" || name == "functions" || name == "include") return value.is_array() && value.empty();
  if (name == "tool_choice" || name == "function_call") return value == "none";
  if (name == "parallel_tool_calls") return value.is_boolean();  // meaningless without tools
  if (name == "response_format") return is_type(value, "text");
  if (name == "logit_bias") return value.is_object() && value.empty();
  if (name == "echo" || name == "background") return value == false;
  if (name == "suffix") return value == "";
  if (name == "best_of") return value == 1;
  if (name == "truncation") return value == "disabled";
  if (name == "text") {
    // The Responses API's output format: plain text, or a JSON object (read by its parser).
    return value.is_object() && value.size() == 1 && value.contains("format") && value["format"].is_object() &&
           (is_type(value["format"], "text") || is_type(value["format"], "json_object") ||
            value["format"].value("type", json()) == "json_schema");
  }
  return false;
}

ApiError unrecognized(const std::string& key) {
  return bad_request(fmt::format("Unrecognized request argument supplied: {}", key), key);
}

bool implemented(ApiEndpoint endpoint, std::string_view name) {
  if (contains(kNoOpFields, name)) return true;
  switch (endpoint) {
    case ApiEndpoint::kChat: return contains(kSamplingFields, name) || contains(kChatFields, name);
    case ApiEndpoint::kCompletions: return contains(kSamplingFields, name) || contains(kCompletionFields, name);
    case ApiEndpoint::kResponses: return contains(kSamplingFields, name) || contains(kResponsesFields, name);
  }
  return false;
}

}  // namespace

std::optional<ApiError> refuse_unsupported_fields(const json& body, ApiEndpoint endpoint) {
  if (!body.is_object()) return std::nullopt;
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || implemented(endpoint, key) || asks_for_the_default(key, value)) continue;
    if (!contains(kKnownUnimplemented, key)) return unrecognized(key);
    ApiError error = bad_request(key == "suffix" ? std::string("'suffix' needs a model with fill-in-the-middle tokens; the models "
                                                                 "served here have none")
                                                 : fmt::format("'{}' is not supported by this server", key),
                                 key);
    error.code = "unsupported_parameter";
    return error;
  }
  return std::nullopt;
}

std::optional<ApiError> refuse_fields_outside(const json& body, std::initializer_list<std::string_view> known) {
  if (!body.is_object()) return std::nullopt;
  for (const auto& item : body.items()) {
    if (!contains(std::span<const std::string_view>(known.begin(), known.size()), item.key())) return unrecognized(item.key());
  }
  return std::nullopt;
}

}  // namespace mnemo::server
