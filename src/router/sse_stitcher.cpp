#include "router/sse_stitcher.h"
#include "util/bounded_json.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr std::string_view kData = "data:";
constexpr std::string_view kEvent = "event:";

std::string_view field_value(std::string_view line, std::string_view field) {
  line.remove_prefix(field.size());
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  return line;
}

// An event's name (its "event:" field) and the payload of its data line(s). False for an event
// with no data or with another field (id:, retry:): it is passed on as it is.
bool parse_event(std::string_view event, std::string& name, std::string& data) {
  name.clear();
  data.clear();
  size_t at = 0;
  bool any = false;
  while (at <= event.size()) {
    size_t end = event.find('\n', at);
    if (end == std::string_view::npos) end = event.size();
    std::string_view line = event.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, kData.size()) == kData) {
      if (any) data += '\n';
      data += field_value(line, kData);
      any = true;
    } else if (line.substr(0, kEvent.size()) == kEvent) {
      name = field_value(line, kEvent);
    } else if (!line.empty() && line.front() != ':') {
      return false;
    }
    at = end + 1;
  }
  return any;
}

std::string dump(const json& payload) { return payload.dump(-1, ' ', false, json::error_handler_t::replace); }

bool is_opening(const std::string& type) {
  return type == "response.created" || type == "response.in_progress" || type == "response.output_item.added" ||
         type == "response.content_part.added";
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
  ++resumes_;
}

json SseStitcher::resume_response() const {
  if (!responses_) return nullptr;
  json r = {{"text", text_}};
  if (!response_id_.empty()) r["id"] = response_id_;
  if (!message_id_.empty()) r["message_id"] = message_id_;
  if (created_at_ >= 0) r["created_at"] = created_at_;
  return r;
}

std::string SseStitcher::event(std::string_view text) {
  const std::string whole = std::string(text) + "\n\n";
  std::string name, data;
  if (!parse_event(text, name, data)) return whole;
  if (name.empty() && data == "[DONE]") {
    done_ = true;
    return whole;
  }
  json payload = parse_bounded_json_or_discarded(data);
  if (!payload.is_object()) return whole;
  if (name.empty()) return chunk_event(std::move(payload));
  // Responses events name their type twice; any other named event passes untouched.
  if (name.rfind("response.", 0) == 0 && payload.value("type", json()) == name) return responses_event(name, std::move(payload));
  return whole;
}

std::string SseStitcher::chunk_event(json payload) {
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
    // A chat stream opens with a role-only chunk: a resumed one's is dropped if the client had one.
    if (payload["choices"].size() == 1) {
      const json& only = payload["choices"][0];
      if (only.is_object() && only.contains("delta") && only["delta"].is_object() && only["delta"].contains("role") &&
          only["delta"].value("content", std::string()).empty() && only.value("finish_reason", json()).is_null()) {
        if (role_chunk_sent_) return "";
        role_chunk_sent_ = true;
      }
    }
  }
  return "data: " + dump(payload) + "\n\n";
}

std::string SseStitcher::responses_event(const std::string& type, json payload) {
  responses_ = true;
  if (is_opening(type)) {
    // Each item's (and part's) opening once: a resumed upstream's repeats are the client's already.
    const std::string key = type + "/" + payload.value("output_index", json(0)).dump() + "/" + payload.value("content_index", json(0)).dump();
    if (!openings_sent_.insert(key).second) return "";
    // What the resumed instance answers as (an upstream that failed before sending them leaves
    // the next one's to be the client's).
    if (type == "response.created" && payload.contains("response") && payload["response"].is_object()) {
      const json& response = payload["response"];
      if (response.contains("id") && response["id"].is_string()) response_id_ = response["id"].get<std::string>();
      if (response.contains("created_at") && response["created_at"].is_number_integer()) {
        created_at_ = response["created_at"].get<int64_t>();
      }
    } else if (type == "response.output_item.added" && payload.contains("item") && payload["item"].is_object() &&
               payload["item"].value("type", json("message")) == "message" && payload["item"].contains("id") &&
               payload["item"]["id"].is_string()) {
      message_id_ = payload["item"]["id"].get<std::string>();
    }
  } else if (type == "response.output_text.delta") {
    if (const auto token = payload.find("mnemo_token"); token != payload.end()) {
      if (token->is_number_integer()) tokens_.push_back(token->get<int32_t>());
      payload.erase(token);
    }
    if (const auto replicated = payload.find("mnemo_replicated"); replicated != payload.end()) {
      if (replicated->is_number_integer()) replicated_ = replicated->get<int32_t>();
      payload.erase(replicated);
    }
    const json delta = payload.value("delta", json());
    if (delta.is_string()) {
      if (delta.get_ref<const std::string&>().empty()) return "";  // named its token only
      text_ += delta.get_ref<const std::string&>();
    }
  } else if (type == "response.completed" || type == "response.incomplete" || type == "response.failed") {
    finished_ = true;
    done_ = true;  // a Responses stream has no end marker: this is its last event
  }
  if (payload.contains("sequence_number")) payload["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + dump(payload) + "\n\n";
}

}  // namespace mnemo::router
