#include "server/access_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "auth/crypto.h"

namespace mnemo::server {
void AccessRecord::observe(const StreamEvent& event) {
  if (const auto* delta = std::get_if<TokenDelta>(&event)) {
    if (first_token_seconds < 0 && delta->token >= 0) {
      first_token_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
  } else if (const auto* done = std::get_if<RequestDone>(&event)) {
    finished = true;
    usage = done->usage;
  }
}

AccessRecord& begin_access_record(http::Request& request) {
  auto record = std::make_shared<AccessRecord>();
  record->request_id = "req_" + auth::random_hex(12);
  record->started = std::chrono::steady_clock::now();
  request.context = record;
  return *record;
}

std::shared_ptr<AccessRecord> access_record_of(const http::Request& request) {
  // Only begin_access_record sets the context of the server's requests.
  return std::static_pointer_cast<AccessRecord>(request.context);
}

std::string format_access_line(const AccessRecord& r, std::string_view method, std::string_view path, int status,
                               AccessLogFormat format) {
  const double duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.started).count();
  const double ttft_ms = r.first_token_seconds < 0 ? -1 : r.first_token_seconds * 1000;
  if (format == AccessLogFormat::kJson) {
    nlohmann::json line = {{"request_id", r.request_id}, {"tenant", r.tenant},       {"method", method},
                           {"path", path},               {"status", status},         {"duration_ms", duration_ms}};
    if (r.finished) {
      line["prompt_tokens"] = r.usage.prompt_tokens;
      line["cached_tokens"] = r.usage.cached_tokens;
      line["output_tokens"] = r.usage.completion_tokens;
    }
    if (ttft_ms >= 0) line["ttft_ms"] = ttft_ms;
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string text = fmt::format("access id={} tenant={} {} {} status={}", r.request_id, r.tenant.empty() ? "-" : r.tenant,
                                 method, path, status);
  if (r.finished) {
    text += fmt::format(" prompt_tokens={} cached_tokens={} output_tokens={}", r.usage.prompt_tokens, r.usage.cached_tokens,
                        r.usage.completion_tokens);
  }
  if (ttft_ms >= 0) text += fmt::format(" ttft_ms={:.1f}", ttft_ms);
  text += fmt::format(" duration_ms={:.1f}", duration_ms);
  return text;
}

}  // namespace mnemo::server
