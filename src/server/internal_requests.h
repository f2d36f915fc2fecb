// The bodies of the cluster's internal endpoints, read apart from the server (pure functions,
// fuzzed by fuzz/internal_request_fuzz.cpp). Only signed peers reach them, but a peer's bytes are
// still checked: a bug or a version skew in one member must not crash another.
//
//   POST /v1/internal/kv_push           {"target", "api": "chat"|"completions", "request"}
//   POST /v1/internal/responses_import  {"request": <a Responses request>, "response": <its response>}
#pragma once

#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/completion.h"
#include "server/openai_request.h"

namespace mnemo::server {

struct KvPushBody {
  std::string target;  // the receiver's transport endpoint (the router's, from membership)
  Endpoint endpoint = Endpoint::kChat;
  ParsedRequest request;
};
std::variant<KvPushBody, ApiError> parse_kv_push_body(const nlohmann::json& body);

struct ImportBody {
  nlohmann::json request;   // the client's Responses request, its mnemo_* fields (the router's) removed
  nlohmann::json response;  // an object with an id "resp_..." and an output list
  std::string id;
};
std::variant<ImportBody, ApiError> parse_import_body(const nlohmann::json& body);

}  // namespace mnemo::server
