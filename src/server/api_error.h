// Errors in OpenAI's JSON format: {"error": {"message", "type", "param", "code"}} with the HTTP
// status that goes with them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "http/message.h"

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

inline ApiError bad_request(std::string message, std::string param = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

}  // namespace mnemo::server
