// The request fields each endpoint implements. OpenAI rejects an argument it does not
// recognise, and so does this server: a field it does not implement is a 400 naming it, never
// silently ignored (a client would believe it got a tool call or structured output and get
// plain text). Only documented no-ops are accepted without effect; a field set to null counts
// as not given, and a field whose value asks for the behaviour the server has anyway (no tools,
// plain-text format, an empty logit_bias) is accepted.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace mnemo::server {

enum class ApiEndpoint { kChat, kCompletions, kResponses };

// Fields accepted by every endpoint without effect (documented in the README).
inline constexpr std::string_view kNoOpFields[] = {"user", "metadata", "store", "service_tier", "prompt_cache_key"};

// The first field of `body` the endpoint does not implement, as a 400 naming it.
std::optional<ApiError> refuse_unsupported_fields(const nlohmann::json& body, ApiEndpoint endpoint);
// The first field of `body` outside `known`, as OpenAI words an unrecognised argument (for the
// endpoints that are not OpenAI's, e.g. /tokenize).
std::optional<ApiError> refuse_fields_outside(const nlohmann::json& body, std::initializer_list<std::string_view> known);

}  // namespace mnemo::server
