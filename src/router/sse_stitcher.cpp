#include "router/sse_stitcher.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr std::string_view kData = "data:";

// The payload of an event's data line(s); events of other kinds come back whole in `other`.
bool data_of(std::string_view event, std::string& data) {
  data.clear();
  size_t at = 0;
  bool any = false;
  while (at <= event.size()) {
    size_t end = event.find('\n', at);
    if (end == std::string_view::npos) end = event.size();
    std::string_view line = event.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, kData.size()) == kData) {
      line.remove_prefix(kData.size());
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (any) data += '\n';
      data += line;
      any = true;
    } else if (!line.empty() && line.front() != ':') {
      return false;  // another field (event:, id:, retry:): passed on as it is
    }
    at = end + 1;
  }
  return any;
}

}  // namespace

std::string SseStitcher::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t end = pending_.find("\n\n", start);
    if (end == std::string::npos) break;
    out += event(std::string_view(pending_).substr(start, end - start));
    start = end + 2;
  }
  pending_.erase(0, start);
  return out;
}

void SseStitcher::begin_resumed() {
  pending_.clear();
  replicated_ = 0;  // the resumed part has no replica
  resumed_ = true;
  opening_seen_ = false;
  ++resumes_;
}

std::string SseStitcher::event(std::string_view text) {
  const std::string whole = std::string(text) + "\n\n";
  std::string data;
  if (!data_of(text, data)) return whole;
  if (data == "[DONE]") {
    done_ = true;
    return whole;
  }
  json payload = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!payload.is_object()) return whole;
  const bool opening = !opening_seen_;
  opening_seen_ = true;
  if (!resumed_) {
    if (id_.is_null() && payload.contains("id")) id_ = payload["id"];
    if (created_.is_null() && payload.contains("created")) created_ = payload["created"];
  } else {
    if (!id_.is_null() && payload.contains("id")) payload["id"] = id_;
    if (!created_.is_null() && payload.contains("created")) payload["created"] = created_;
  }
  if (payload.contains("choices") && payload["choices"].is_array()) {
    for (json& choice : payload["choices"]) {
      if (!choice.is_object()) continue;
      const bool first_choice = !choice.contains("index") || choice["index"] == 0;
      if (const auto token = choice.find("mnemo_token"); token != choice.end()) {
        if (first_choice && token->is_number_integer()) tokens_.push_back(token->get<int32_t>());
        choice.erase(token);
      }
      if (const auto replicated = choice.find("mnemo_replicated"); replicated != choice.end()) {
        if (first_choice && replicated->is_number_integer()) replicated_ = replicated->get<int32_t>();
        choice.erase(replicated);
      }
      if (first_choice && choice.contains("finish_reason") && !choice["finish_reason"].is_null()) finished_ = true;
    }
    // A resumed chat stream opens with a role-only chunk, as every stream does: the client
    // already had it.
    if (resumed_ && opening && payload["choices"].size() == 1) {
      const json& only = payload["choices"][0];
      if (only.is_object() && only.contains("delta") && only["delta"].is_object() && only["delta"].contains("role") &&
          only["delta"].value("content", std::string()).empty() && only.value("finish_reason", json()).is_null()) {
        return "";
      }
    }
  }
  return "data: " + payload.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace mnemo::router
