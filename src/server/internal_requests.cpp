#include "server/internal_requests.h"

namespace mnemo::server {

using nlohmann::json;

std::variant<KvPushBody, ApiError> parse_kv_push_body(const json& body) {
  if (!body.is_object() || !body.contains("target") || !body["target"].is_string() || !body.contains("request") ||
      !body["request"].is_object()) {
    return ApiError{400, "a push needs 'target' (a transport endpoint) and 'request' (an OpenAI request)",
                    "invalid_request_error", "", ""};
  }
  const std::string api = body.contains("api") && body["api"].is_string() ? body["api"].get<std::string>() : "chat";
  if (api != "chat" && api != "completions") return ApiError{400, "'api' must be chat or completions", "invalid_request_error", "api", ""};
  KvPushBody push;
  push.target = body["target"].get<std::string>();
  push.endpoint = api == "chat" ? Endpoint::kChat : Endpoint::kCompletions;
  auto parsed = parse_request(body["request"], push.endpoint == Endpoint::kChat);
  if (auto* error = std::get_if<ApiError>(&parsed)) return *error;
  push.request = std::move(std::get<ParsedRequest>(parsed));
  return push;
}

std::variant<ImportBody, ApiError> parse_import_body(const json& body) {
  if (!body.is_object() || !body.contains("request") || !body.contains("response")) {
    return bad_request("the body must be an object with 'request' and 'response'");
  }
  const json& response = body["response"];
  if (!response.is_object() || !response.contains("id") || !response["id"].is_string() ||
      response["id"].get_ref<const std::string&>().rfind("resp_", 0) != 0 || !response.contains("output") ||
      !response["output"].is_array()) {
    return bad_request("'response' must be a response object (an id 'resp_...', an output list)", "response");
  }
  ImportBody import{body["request"], response, response["id"].get<std::string>()};
  // The request was the client's: its internal fields are the router's, and not what is stored.
  if (import.request.is_object()) {
    for (auto it = import.request.begin(); it != import.request.end();) {
      it = it.key().rfind("mnemo_", 0) == 0 ? import.request.erase(it) : std::next(it);
    }
  }
  return import;
}

}  // namespace mnemo::server
