#include "server/api_error.h"

namespace mnemo::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json error = {{"message", message}, {"type", type}};
  error["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  error["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", error}};
}

void send_error(http::Response& res, const ApiError& error) {
  res.status = error.status;
  // Messages may quote the request (an id, a role): invalid UTF-8 is replaced, never thrown on.
  res.set_content(error.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

}  // namespace mnemo::server
