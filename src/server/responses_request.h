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
std::variant<ResponsesRequest, ApiError> parse_responses_request(const nlohmann::json& body, const std::string& model_id);

}  // namespace mnemo::server
