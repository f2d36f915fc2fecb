#include "server/api_error.h"

namespace mnemo::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json error = {{"message", message}, {"type", type}};
  error["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  error["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", error}};
}

ApiError api_error_of(const Error& error, std::string param) {
  const auto status_of = [](ErrorCode code) {
    switch (code) {
      case ErrorCode::kInvalidArgument: return 400;
      case ErrorCode::kNotFound: return 404;
      case ErrorCode::kPermissionDenied: return 403;
      case ErrorCode::kUnavailable: return 503;
      case ErrorCode::kResourceExhausted: return 507;
      case ErrorCode::kCorruption:
      case ErrorCode::kIoError:
      case ErrorCode::kInternal: return 500;
    }
    return 500;
  };
  const int status = status_of(error.code());
  const std::string code = error.code() == ErrorCode::kInvalidArgument ? "" : std::string(error_code_name(error.code()));
  return ApiError{status, error.message(), status >= 500 ? "server_error" : "invalid_request_error", std::move(param), code};
}

void send_error(http::Response& res, const ApiError& error) {
  res.status = error.status;
  // Messages may quote the request (an id, a role): invalid UTF-8 is replaced, never thrown on.
  res.set_content(error.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

}  // namespace mnemo::server
