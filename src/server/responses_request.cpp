#include "server/responses_request.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "server/supported_fields.h"
#include "server/tool_request.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

// A message item's text: a string, or text parts.
bool read_message_text(const json& item, ChatMessage& message, std::string& error) {
  const auto content = item.find("content");
  if (content != item.end() && content->is_string()) {
    message.content = content->get<std::string>();
    return true;
  }
  if (content == item.end() || !content->is_array()) {
    error = "input message content must be a string or a list of text parts";
    return false;
  }
  for (const json& part : *content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if ((type == "input_text" || type == "output_text" || type == "text") && part.contains("text") && part["text"].is_string()) {
      message.content += part["text"].get<std::string>();
    } else if (type != "refusal") {
      error = "content parts must be input_text or output_text";
      return false;
    }
  }
  return true;
}

bool string_field(const json& item, const char* key, std::string& out) {
  const auto it = item.find(key);
  if (it == item.end() || !it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

// A function_call item joins the assistant turn it follows (a reply's text and its calls are one
// turn), else opens one.
bool append_function_call(const json& item, std::vector<ChatMessage>& out, std::string& error) {
  ToolCall call;
  if (!string_field(item, "call_id", call.id) || !string_field(item, "name", call.name) ||
      !string_field(item, "arguments", call.arguments)) {
    error = "function_call items need string 'call_id', 'name' and 'arguments'";
    return false;
  }
  if (out.empty() || out.back().role != "assistant") {
    out.emplace_back("assistant", "");
    out.back().content_null = true;
  }
  out.back().tool_calls.push_back(std::move(call));
  return true;
}

bool append_function_output(const json& item, std::vector<ChatMessage>& out, std::string& error) {
  ChatMessage message("tool", "");
  if (!string_field(item, "call_id", message.tool_call_id) || !string_field(item, "output", message.content)) {
    error = "function_call_output items need string 'call_id' and 'output'";
    return false;
  }
  out.push_back(std::move(message));
  return true;
}

// mnemo_resume_response {"id", "message_id", "created_at", "text"}, each optional: what the client
// of a failed instance was told, for this turn to continue as the same response.
std::optional<ApiError> read_resumed_response(const json& resumed, ResumedResponse& out) {
  constexpr const char* kParam = "mnemo_resume_response";
  if (!resumed.is_object()) return bad_request("'mnemo_resume_response' must be an object", kParam);
  auto string_field = [&](const char* name, const char* prefix, std::string& field) -> std::optional<ApiError> {
    const auto it = resumed.find(name);
    if (it == resumed.end()) return std::nullopt;
    if (!it->is_string() || it->get_ref<const std::string&>().rfind(prefix, 0) != 0) {
      return bad_request(fmt::format("'mnemo_resume_response.{}' must be a string starting with '{}'", name, prefix), kParam);
    }
    field = it->get<std::string>();
    return std::nullopt;
  };
  if (auto error = string_field("id", "resp_", out.id)) return error;
  if (auto error = string_field("message_id", "msg_", out.message_id)) return error;
  if (auto error = string_field("text", "", out.text)) return error;
  if (const auto created = resumed.find("created_at"); created != resumed.end()) {
    if (!created->is_number_integer() || created->get<int64_t>() < 0) {
      return bad_request("'mnemo_resume_response.created_at' must be a non-negative integer", kParam);
    }
    out.created_at = created->get<int64_t>();
  }
  return std::nullopt;
}

}  // namespace

bool append_items(const json& items, std::vector<ChatMessage>& out, std::string& error) {
  if (!items.is_array()) {
    error = "items must be a list";
    return false;
  }
  // A reasoning item (an earlier reply's, sent back or stored) goes with the assistant message
  // that follows it, as its reasoning_content.
  std::string reasoning;
  for (const json& item : items.get_ref<const json::array_t&>()) {
    if (!item.is_object()) {
      error = "input items must be objects";
      return false;
    }
    const std::string type = item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>() : "message";
    if (type == "reasoning") {
      const json content = item.value("content", json::array());
      if (!content.is_array()) {
        error = "reasoning items' content must be a list";
        return false;
      }
      for (const json& part : content) {
        if (part.is_object() && part.value("type", "") == "reasoning_text" && part.contains("text") && part["text"].is_string()) {
          reasoning += part["text"].get<std::string>();
        }
      }
      continue;
    }
    if (type == "function_call") {
      if (!append_function_call(item, out, error)) return false;
      continue;
    }
    if (type == "function_call_output") {
      if (!append_function_output(item, out, error)) return false;
      continue;
    }
    if (type != "message") {
      error = "input item type '" + type + "' is not supported (message, reasoning, function_call, function_call_output)";
      return false;
    }
    ChatMessage message;
    if (!string_field(item, "role", message.role)) {
      error = "input message items need a role";
      return false;
    }
    if (message.role == "developer") message.role = "system";
    if (message.role != "user" && message.role != "assistant" && message.role != "system") {
      error = "input role '" + message.role + "' is not one of user, assistant, system, developer";
      return false;
    }
    if (!read_message_text(item, message, error)) return false;
    if (message.role == "assistant") message.reasoning_content = std::move(reasoning);
    reasoning.clear();
    out.push_back(std::move(message));
  }
  return true;
}

json items_of(const std::vector<ChatMessage>& messages) {
  json items = json::array();
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      items.push_back({{"type", "function_call_output"}, {"call_id", m.tool_call_id}, {"output", m.content}});
      continue;
    }
    if (!m.content_null) items.push_back({{"role", m.role}, {"content", m.content}});
    for (const ToolCall& call : m.tool_calls) {
      items.push_back({{"type", "function_call"}, {"call_id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
    }
  }
  return items;
}

std::variant<ResponsesRequest, ApiError> parse_responses_request(const json& body, const std::vector<std::string>& model_ids) {
  if (auto refused = refuse_unsupported_fields(body, ApiEndpoint::kResponses)) return *refused;
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  for (const char* name : {"stream", "store"}) {
    if (body.contains(name) && !body[name].is_null() && !body[name].is_boolean()) {
      return bad_request(fmt::format("'{}' must be a boolean", name), name);
    }
  }
  if (body.contains("instructions") && !body["instructions"].is_null() && !body["instructions"].is_string()) {
    return bad_request("'instructions' must be a string", "instructions");
  }
  std::string model;
  if (body.contains("model") && !body["model"].is_null()) {
    const bool served = body["model"].is_string() &&
                        std::find(model_ids.begin(), model_ids.end(), body["model"].get<std::string>()) != model_ids.end();
    if (!served) {
      return ApiError{404, fmt::format("The model does not exist; this server serves '{}'.", fmt::join(model_ids, "', '")),
                      "invalid_request_error", "model", "model_not_found"};
    }
    model = body["model"].get<std::string>();
  }
  // Sampling and limits share the chat-completions parser (field names mapped), and so do a
  // router's replica fields (a decode instance sending a turn's KV back, SPEC M4).
  json as_chat = {{"messages", json::array({{{"role", "user"}, {"content", ""}}})}};
  for (const char* field : {"temperature", "top_p", "top_k", "min_p", "seed", "stop", "ignore_eos", "cache_salt",
                            "cache_control", "speculation", "presence_penalty", "frequency_penalty", "repetition_penalty", "mnemo_replica",
                            "mnemo_replica_known_tokens", "mnemo_replica_at_end", "mnemo_report_tokens",
                            "mnemo_resume_tokens", "mnemo_persist_running"}) {
    if (body.contains(field)) as_chat[field] = body[field];
  }
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) as_chat["max_tokens"] = body["max_output_tokens"];
  // text.format (checked by refuse_unsupported_fields: text or json_object) is chat's response_format.
  if (const auto text = body.find("text"); text != body.end() && text->is_object() && text->contains("format")) {
    json format = (*text)["format"];
    // The Responses API flattens json_schema's fields into the format; chat nests them.
    if (format.is_object() && format.value("type", json()) == "json_schema") {
      json spec = json::object();
      for (const auto& [key, value] : format.items()) {
        if (key != "type") spec[key] = value;
      }
      format = {{"type", "json_schema"}, {"json_schema", std::move(spec)}};
    }
    as_chat["response_format"] = std::move(format);
  }
  auto parsed = parse_request(as_chat, /*chat=*/true);
  if (auto* error = std::get_if<ApiError>(&parsed)) {
    if (error->param == "max_tokens") error->param = "max_output_tokens";
    if (error->param == "response_format") error->param = "text";
    return *error;
  }
  ResponsesRequest t;
  t.request = std::move(std::get<ParsedRequest>(parsed));
  t.request.model = std::move(model);
  t.stream = body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  t.store = body.contains("store") && body["store"].is_boolean() ? body["store"].get<bool>() : true;
  if (body.contains("instructions") && body["instructions"].is_string()) t.instructions = body["instructions"].get<std::string>();
  if (const auto resumed = body.find("mnemo_resume_response"); resumed != body.end() && !resumed->is_null()) {
    if (auto error = read_resumed_response(*resumed, t.resumed)) return *error;
  }
  const auto input = body.find("input");
  if (input == body.end()) return bad_request("'input' is required", "input");
  if (input->is_string()) {
    t.turn.push_back({"user", input->get<std::string>()});
  } else if (input->is_array()) {
    std::string error;
    if (!append_items(*input, t.turn, error)) return bad_request(error, "input");
  } else {
    return bad_request("'input' must be a string or a list of items", "input");
  }
  auto tools = read_tool_use(body, ToolApi::kResponses);
  if (auto* error = std::get_if<ApiError>(&tools)) return *error;
  t.request.tool_use = std::move(std::get<ToolUse>(tools));
  if (const auto previous = body.find("previous_response_id"); previous != body.end() && !previous->is_null()) {
    if (!previous->is_string()) return bad_request("'previous_response_id' must be a string", "previous_response_id");
    t.previous_id = previous->get<std::string>();
  }
  return t;
}

}  // namespace mnemo::server
