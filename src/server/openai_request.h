// Parsing of OpenAI request bodies (chat completions and completions) into what the engine
// runs. Fields of the wrong type or out of range are rejected with an ApiError naming them.
// Bodies are parsed within bounds (util/bounded_json.h): a body nested too deep is a 400 before
// the JSON parser sees it.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "engine/request.h"
#include "server/api_error.h"

namespace mnemo::server {

struct ParsedRequest {
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  GenerationRequest generation;          // everything but the prompt tokens
  bool max_tokens_given = false;
  bool echo = false;                     // completions: the prompt's text leads each choice's text
  bool seed_given = false;               // else the server draws one (ServerConfig::seed)
  // Else the server's defaults apply (ServerConfig::sampling).
  bool temperature_given = false;
  bool top_k_given = false;
  bool top_p_given = false;
  bool min_p_given = false;
  std::vector<ChatMessage> messages;     // chat
  nlohmann::ordered_json template_variables;  // chat: chat_template_kwargs (null: none)
  // Chat: the tags the reply's reasoning comes between (null: none is split off), and whether the
  // prompt already opened them. Set by the server from the model's template and the prompt.
  std::optional<ReasoningTags> reasoning;
  bool reasoning_open = false;
  ToolUse tool_use;                      // chat: tools, tool_choice, parallel_tool_calls
  // Set by prepare_tool_calls (server/prompt.h) from the model's template:
  ToolFormat tool_format = ToolFormat::kGeneric;
  bool tool_envelope = false;            // the output is the JSON envelope (constrained)
  std::string prompt_text;               // completions, as text
  std::vector<TokenId> prompt_tokens;    // completions, given as token ids
  std::string cache_salt;                // tenant separation of cached KV, with the API key
  // Set by a router (SPEC D7), not by clients:
  //   mnemo_replica        where to replicate the request's KV while it runs: a KV transport
  //                        endpoint, or an array of them (one replica each)
  //   mnemo_report_tokens  a streamed chunk for every token, naming it as "mnemo_token"
  //   mnemo_resume_tokens  generation.resume_tokens
  //   mnemo_persist_running  generation.persist_running
  //   mnemo_replica_wait   answer only once the replicas hold all they can (a prefill for a
  //                        decode instance, SPEC D4)
  //   mnemo_replica_known_tokens  per replica, leading tokens it is believed to hold already
  //   mnemo_replica_at_end  per replica, true: send its KV once the request ends, not while it
  //                        runs (a cache for the next turn, not a failover copy: Caching-3)
  std::vector<std::string> replica_endpoints;
  std::vector<int32_t> replica_known_tokens;
  std::vector<bool> replica_at_end;
  bool report_tokens = false;
  bool replica_wait = false;
};

// `chat` selects the chat-completions schema (messages, logprobs as bool + top_logprobs) over
// the completions one (prompt, logprobs as an integer).
std::variant<ParsedRequest, ApiError> parse_request(const nlohmann::json& body, bool chat);
std::variant<ParsedRequest, ApiError> parse_request(std::string_view body, bool chat);
inline std::variant<ParsedRequest, ApiError> parse_request(const std::string& body, bool chat) {
  return parse_request(std::string_view(body), chat);
}

// A request body as JSON within the request limits (nesting depth, size), or a 400.
std::variant<nlohmann::json, ApiError> parse_request_body(std::string_view body);

// Limits on what a request may ask for.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 1024;  // per stop string

}  // namespace mnemo::server
