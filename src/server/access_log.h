// One line per request (--access-log text|json|off): its id (also sent as X-Request-Id), tenant,
// method, path, status, prompt / cached / output tokens, time to first token and duration. Never
// a key, a header or any prompt or output text.
//
// The record travels with its exchange (the http::Request's context): a request is read on an
// I/O thread, handled on a handler thread and streamed from the I/O threads again.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "engine/request.h"
#include "http/message.h"

namespace mnemo::server {

enum class AccessLogFormat { kOff, kText, kJson };

struct AccessRecord {
  std::string request_id;
  std::string tenant;
  std::chrono::steady_clock::time_point started;
  double first_token_seconds = -1;  // since started; negative: no token
  bool finished = false;            // a RequestDone was seen (usage below is the request's)
  RequestUsage usage;

  // Follows the request's stream: the first token's time and the final usage.
  void observe(const StreamEvent& event);
};

// Starts the record of `request` (a fresh id, the clock started).
AccessRecord& begin_access_record(http::Request& request);
// The record of a request whose head was admitted; nullptr for one refused by the HTTP layer
// itself (malformed, over a limit).
std::shared_ptr<AccessRecord> access_record_of(const http::Request& request);

std::string format_access_line(const AccessRecord& record, std::string_view method, std::string_view path, int status,
                               AccessLogFormat format);

}  // namespace mnemo::server
