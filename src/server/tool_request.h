// The tool fields of a request, read with the same checks as every other field: chat
// completions' `tools` ({"type": "function", "function": {...}}), `tool_choice`, and
// `parallel_tool_calls`; the Responses API's flattened `tools` ({"type": "function", "name", ...})
// and `tool_choice`; an assistant message's `tool_calls`.
#pragma once

#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.h"
#include "server/api_error.h"

namespace mnemo::server {

enum class ToolApi { kChat, kResponses };

inline constexpr size_t kMaxTools = 16;  // the envelope's anyOf bound (grammar::kMaxAnyOf)

// The request's tools, choice and parallelism (no tools: an empty ToolUse), or a 400 naming the field.
std::variant<ToolUse, ApiError> read_tool_use(const nlohmann::json& body, ToolApi api);

// An assistant message's `tool_calls` (chat completions' shape), `where` naming it in errors.
std::variant<std::vector<ToolCall>, ApiError> read_tool_calls(const nlohmann::json& calls, const std::string& where);

// A reply's calls as chat completions' `tool_calls`.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace mnemo::server
