// Errors in OpenAI's JSON format: {"error": {"message", "type", "param", "code"}} with the HTTP
// status that goes with them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "http/message.h"
#include "util/result.h"

namespace mnemo::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault, if any
  std::string code;

  nlohmann::json to_json() const;
};

// Sets the response to the error: its status and its JSON body.
void send_error(http::Response& res, const ApiError& error);

// The one place an Error's code becomes an HTTP status and OpenAI's error type:
//   invalid_argument 400, not_found 404, permission_denied 403, unavailable 503 (Retry-After:
//   the caller sets it), resource_exhausted 507, corruption / io_error / internal 500.
// The code's name goes in the body's "code" (invalid_argument: none, as OpenAI's 400s have none).
ApiError api_error_of(const Error& error, std::string param = "");

inline ApiError bad_request(std::string message, std::string param = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

}  // namespace mnemo::server
