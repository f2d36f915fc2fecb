#include "router/conversation_text.h"
#include "util/bounded_json.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr char kField = '\x1f';
constexpr char kRecord = '\x1e';

// A message's content: a string, or a list of parts whose text parts count.
std::string content_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const json& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
      if (part.is_string()) out += part.get<std::string>();
    }
  }
  return out;
}

void append_message(std::string& out, std::string_view role, std::string_view content) {
  out += role;
  out += kField;
  out += content;
  out += kRecord;
}

// Calls `visit` with each JSON object of a body or of an SSE stream's data lines.
template <class Visit>
void for_each_object(std::string_view body, bool sse, Visit visit) {
  if (!sse) {
    const json j = parse_bounded_json_or_discarded(body);
    if (j.is_object()) visit(j);
    return;
  }
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find('\n', at);
    if (end == std::string_view::npos) end = body.size();
    std::string_view line = body.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 6) != "data: ") continue;
    const json j = parse_bounded_json_or_discarded(line.substr(6));
    if (j.is_object()) visit(j);
  }
}

}  // namespace

Result<ConversationView> view_request(Api api, const json& body) {
  if (!body.is_object()) return make_error("the request body must be a JSON object");
  ConversationView v;
  v.stream = body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  switch (api) {
    case Api::kChat: {
      const auto messages = body.find("messages");
      if (messages == body.end() || !messages->is_array()) return make_error("'messages' must be a list");
      for (const json& m : *messages) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return make_error("each message needs a 'role'");
        const std::string role = m["role"].get<std::string>();
        const std::string content = m.contains("content") ? content_text(m["content"]) : "";
        append_message(v.prompt_text, role, content);
        if (v.session_key.empty() && role == "user") v.session_key = v.prompt_text;
      }
      break;
    }
    case Api::kCompletions: {
      const auto prompt = body.find("prompt");
      if (prompt == body.end()) return make_error("'prompt' is required");
      if (prompt->is_string()) {
        v.prompt_text = prompt->get<std::string>();
      } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_string()) {
        v.prompt_text = (*prompt)[0].get<std::string>();
      } else {
        return make_error("'prompt' must be a string or a list of strings");
      }
      v.session_key = v.prompt_text.substr(0, 256);
      break;
    }
    case Api::kResponses: {
      if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
        if (!body["previous_response_id"].is_string()) return make_error("'previous_response_id' must be a string");
        v.previous_response_id = body["previous_response_id"].get<std::string>();
      }
      if (body.contains("instructions") && body["instructions"].is_string()) {
        append_message(v.prompt_text, "system", body["instructions"].get<std::string>());
      }
      const auto input = body.find("input");
      if (input == body.end()) return make_error("'input' is required");
      if (input->is_string()) {
        append_message(v.prompt_text, "user", input->get<std::string>());
      } else if (input->is_array()) {
        for (const json& item : *input) {
          if (!item.is_object()) continue;
          const bool has_role = item.contains("role") && item["role"].is_string();
          append_message(v.prompt_text, has_role ? item["role"].get<std::string>() : "user",
                         item.contains("content") ? content_text(item["content"]) : "");
        }
      } else {
        return make_error("'input' must be a string or a list of items");
      }
      v.session_key = v.previous_response_id.empty() ? v.prompt_text : v.previous_response_id;
      break;
    }
  }
  return v;
}

std::string with_reply(Api api, const std::string& prompt_text, std::string_view reply) {
  if (api == Api::kCompletions) return prompt_text + std::string(reply);
  std::string out = prompt_text;
  append_message(out, "assistant", reply);
  return out;
}

namespace {

// The generated text one reply object (a whole body, or one event of a stream) carries.
std::string text_of(Api api, const json& j, bool sse) {
  std::string text;
  if (api == Api::kResponses) {
    if (sse) {
      const bool is_delta = j.contains("type") && j["type"].is_string() && j["type"].get<std::string>() == "response.output_text.delta";
      if (is_delta && j.contains("delta") && j["delta"].is_string()) text = j["delta"].get<std::string>();
      return text;
    }
    const auto output = j.find("output");
    if (output == j.end() || !output->is_array()) return text;
    for (const json& item : *output) {
      if (item.is_object() && item.contains("content")) text += content_text(item["content"]);
    }
    return text;
  }
  const auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return text;
  // Through the array itself: GCC's -Wnull-dereference (under TSan's flags) reads json's own
  // operator[] as possibly null.
  const json::array_t& list = choices->get_ref<const json::array_t&>();
  if (list.empty() || !list.front().is_object()) return text;
  const json& c = list.front();
  if (api == Api::kCompletions) {
    if (c.contains("text") && c["text"].is_string()) text = c["text"].get<std::string>();
  } else if (sse) {
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
      text = c["delta"]["content"].get<std::string>();
    }
  } else if (c.contains("message") && c["message"].is_object() && c["message"].contains("content")) {
    text = content_text(c["message"]["content"]);
  }
  return text;
}

}  // namespace

ReplyDigest read_reply(Api api, std::string_view body, bool sse) {
  ReplyDigest d;
  int64_t reported = -1;
  int64_t text_events = 0;
  for_each_object(body, sse, [&](const json& j) {
    const std::string text = text_of(api, j, sse);
    d.text += text;
    if (sse && !text.empty()) ++text_events;
    const json* response = sse ? (j.contains("response") && j["response"].is_object() ? &j["response"] : nullptr) : &j;
    if (response != nullptr && d.response_id.empty() && response->contains("id") && (*response)["id"].is_string()) {
      d.response_id = (*response)["id"].get<std::string>();
    }
    const std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
    if (!sse || ((type == "response.completed" || type == "response.incomplete") && response != nullptr)) {
      d.final_response = *response;
    }
    const json* usage = j.contains("usage") && j["usage"].is_object() ? &j["usage"]
                        : response != nullptr && response->contains("usage") && (*response)["usage"].is_object()
                            ? &(*response)["usage"]
                            : nullptr;
    const char* name = api == Api::kResponses ? "output_tokens" : "completion_tokens";
    if (usage != nullptr && usage->contains(name) && (*usage)[name].is_number_integer()) {
      reported = (*usage)[name].get<int64_t>();
    }
  });
  d.generated_tokens = reported >= 0 ? reported : sse ? text_events : -1;
  return d;
}

std::string reply_text(Api api, std::string_view body, bool sse) { return read_reply(api, body, sse).text; }

bool carries_text(std::string_view chunk) {
  if (chunk.find("\"response.output_text.delta\"") != std::string_view::npos) return true;
  for (const std::string_view field : {std::string_view("\"text\":\""), std::string_view("\"content\":\"")}) {
    for (size_t at = chunk.find(field); at != std::string_view::npos; at = chunk.find(field, at + 1)) {
      const size_t next = at + field.size();
      if (next < chunk.size() && chunk[next] != '"') return true;
    }
  }
  return false;
}

std::string response_id(std::string_view body, bool sse) { return read_reply(Api::kResponses, body, sse).response_id; }

}  // namespace mnemo::router
