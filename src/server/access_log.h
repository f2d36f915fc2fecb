// One line per request (--access-log text|json|off): its id (also sent as X-Request-Id), tenant,
// method, path, status, prompt / cached / output tokens, time to first token and duration. Never
// a key, a header or any prompt or output text.
//
// httplib serves a request, streams its body and calls the logger on one thread, so the record
// being filled is the calling thread's (current_access_record()).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "engine/request.h"

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

// Starts a new record for the calling thread's request (a fresh id, the clock started).
AccessRecord& begin_access_record();
AccessRecord& current_access_record();

std::string format_access_line(const AccessRecord& record, std::string_view method, std::string_view path, int status,
                               AccessLogFormat format);

}  // namespace mnemo::server
