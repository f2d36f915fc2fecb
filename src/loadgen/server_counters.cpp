#include "loadgen/server_counters.h"

#include <charconv>

#include <httplib.h>

namespace mnemo::loadgen {

std::optional<ServerCounters> parse_server_counters(std::string_view text) {
  ServerCounters c;
  bool passes = false;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, space);
    const std::string_view number = line.substr(space + 1);
    double value = 0;
    if (std::from_chars(number.data(), number.data() + number.size(), value).ec != std::errc{}) continue;
    if (name == "mnemo_generation_tokens_total") c.generation_tokens = value;
    if (name == "mnemo_decode_passes_total") c.decode_passes = value, passes = true;
    if (name.starts_with("mnemo_spec_draft_tokens_total{")) c.drafted += value;
    if (name.starts_with("mnemo_spec_accepted_tokens_total{")) c.accepted += value;
  }
  if (!passes) return std::nullopt;
  return c;
}

std::optional<ServerCounters> fetch_server_counters(const ServerEndpoint& endpoint) {
  httplib::Client http(endpoint.host, endpoint.port);
  http.set_read_timeout(std::chrono::seconds(10));
  httplib::Headers headers;
  if (!endpoint.api_key.empty()) headers.emplace("Authorization", "Bearer " + endpoint.api_key);
  const auto response = http.Get("/metrics", headers);
  if (!response || response->status != 200) return std::nullopt;
  return parse_server_counters(response->body);
}

std::optional<DecodeFigures> decode_figures(const std::optional<ServerCounters>& before, const std::optional<ServerCounters>& after) {
  if (!before || !after) return std::nullopt;
  const double passes = after->decode_passes - before->decode_passes;
  if (passes <= 0) return std::nullopt;
  DecodeFigures f;
  f.tokens_per_forward = (after->generation_tokens - before->generation_tokens) / passes;
  f.drafted = after->drafted - before->drafted;
  f.acceptance = f.drafted > 0 ? (after->accepted - before->accepted) / f.drafted : 0.0;
  return f;
}

}  // namespace mnemo::loadgen
