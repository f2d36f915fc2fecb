// What every request-parser fuzz target asks of a refusal: an OpenAI error the server can send
// (a 4xx/5xx status, a message, JSON that dumps whatever the message quotes from the request).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace mnemo::fuzz {

[[noreturn]] inline void fail(const char* target, const char* what) {
  std::fprintf(stderr, "%s: %s\n", target, what);
  std::abort();
}

inline void check_api_error(const char* target, const server::ApiError& e) {
  if (e.status < 400 || e.status > 599) fail(target, "an error outside 4xx/5xx");
  if (e.message.empty()) fail(target, "an error without a message");
  (void)e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mnemo::fuzz
