// POST /v1/responses bodies read into what the server runs, apart from the store (the history a
// previous_response_id names is the server's to load): a pure function, fuzzed
// (fuzz/responses_request_fuzz.cpp).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace mnemo::server {

// A router resuming a streamed turn whose instance failed (mnemo_resume_response, SPEC D7): the
// response the client was getting, which this one continues as the same response.
struct ResumedResponse {
  std::string id, message_id, text;
  int64_t created_at = -1;
};

struct ResponsesRequest {
  ParsedRequest request;          // sampling and limits (messages: filled by the server)
  std::vector<ChatMessage> turn;  // the new turn's messages, from `input`
  std::optional<std::string> instructions;
  std::string previous_id;
  bool stream = false;
  bool store = true;
  ResumedResponse resumed;
};

// Types checked, sampling and limits through the chat parser (names mapped), `model` against the
// served one (404), `input` as a string or items. Internal fields are the caller's to refuse.
// `model_ids`: the models served (the first is the default); request.model is the one named.
std::variant<ResponsesRequest, ApiError> parse_responses_request(const nlohmann::json& body, const std::vector<std::string>& model_ids);
inline std::variant<ResponsesRequest, ApiError> parse_responses_request(const nlohmann::json& body, const std::string& model_id) {
  return parse_responses_request(body, std::vector<std::string>{model_id});
}

// Items (input items, a stored turn's inputs, a response's output) appended as chat messages:
// message items; function_call items as the calls of the assistant turn they follow;
// function_call_output items as tool messages. False with `error` set on an item it cannot read.
bool append_items(const nlohmann::json& items, std::vector<ChatMessage>& out, std::string& error);
// Messages as items (what the store keeps of a turn's inputs).
nlohmann::json items_of(const std::vector<ChatMessage>& messages);

}  // namespace mnemo::server
