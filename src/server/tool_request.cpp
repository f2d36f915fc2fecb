#include "server/tool_request.h"

#include <fmt/format.h>

namespace mnemo::server {
namespace {

using nlohmann::json;

bool is_string(const json& object, const char* key) { return object.contains(key) && object[key].is_string(); }

// One function's {name, description, parameters, strict}: under "function" in chat
// completions, at the tool's top level in the Responses API.
std::variant<ToolSpec, ApiError> read_function(const json& function, const std::string& where) {
  if (!function.is_object() || !is_string(function, "name") || function["name"].get_ref<const std::string&>().empty()) {
    return bad_request(where + " needs a function 'name'", "tools");
  }
  ToolSpec tool;
  tool.name = function["name"].get<std::string>();
  for (const auto& [key, value] : function.items()) {
    if (key == "name" || key == "type" || value.is_null()) continue;
    if (key == "description" && value.is_string()) {
      tool.description = value.get<std::string>();
    } else if (key == "parameters" && value.is_object()) {
      tool.parameters = value;
    } else if (key == "strict" && value.is_boolean()) {
      tool.strict = value.get<bool>();
    } else {
      return bad_request(fmt::format("{}.{} is not recognized or has the wrong type", where, key), "tools");
    }
  }
  return tool;
}

std::variant<std::vector<ToolSpec>, ApiError> read_tools(const json& tools, ToolApi api) {
  if (!tools.is_array()) return bad_request("'tools' must be an array", "tools");
  if (tools.size() > kMaxTools) return bad_request(fmt::format("'tools' may hold at most {} tools", kMaxTools), "tools");
  std::vector<ToolSpec> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object() || tool.value("type", json()) != "function") {
      return bad_request(fmt::format("{}: only tools of type 'function' are supported", where), "tools");
    }
    if (api == ToolApi::kChat && tool.size() != 2) {
      return bad_request(where + " must be {\"type\": \"function\", \"function\": {...}}", "tools");
    }
    auto spec = read_function(api == ToolApi::kChat ? tool.value("function", json()) : tool,
                              api == ToolApi::kChat ? where + ".function" : where);
    if (auto* error = std::get_if<ApiError>(&spec)) return *error;
    for (const ToolSpec& earlier : out) {
      if (earlier.name == std::get<ToolSpec>(spec).name) return bad_request(where + " repeats a function name", "tools");
    }
    out.push_back(std::move(std::get<ToolSpec>(spec)));
  }
  return out;
}

std::optional<ApiError> read_tool_choice(const json& choice, ToolApi api, ToolUse& use) {
  if (choice.is_string()) {
    const std::string& mode = choice.get_ref<const std::string&>();
    if (mode == "none") use.choice = ToolChoice::kNone;
    else if (mode == "auto") use.choice = ToolChoice::kAuto;
    else if (mode == "required") use.choice = ToolChoice::kRequired;
    else return bad_request(fmt::format("'tool_choice' '{}' is not one of none, auto, required", mode), "tool_choice");
    return std::nullopt;
  }
  // {"type": "function", "function": {"name"}} (chat) or {"type": "function", "name"} (Responses).
  const json* named = nullptr;
  if (choice.is_object() && choice.value("type", json()) == "function") {
    named = api == ToolApi::kChat ? (choice.contains("function") ? &choice["function"] : nullptr) : &choice;
  }
  if (named == nullptr || !named->is_object() || !is_string(*named, "name")) {
    return bad_request("'tool_choice' must be none, auto, required or a named function", "tool_choice");
  }
  use.choice = ToolChoice::kNamed;
  use.forced_name = (*named)["name"].get<std::string>();
  for (const ToolSpec& tool : use.tools) {
    if (tool.name == use.forced_name) return std::nullopt;
  }
  return bad_request(fmt::format("'tool_choice' names '{}', which is not among the tools", use.forced_name), "tool_choice");
}

}  // namespace

std::variant<ToolUse, ApiError> read_tool_use(const json& body, ToolApi api) {
  ToolUse use;
  const auto field = [&body](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* tools = field("tools")) {
    auto read = read_tools(*tools, api);
    if (auto* error = std::get_if<ApiError>(&read)) return *error;
    use.tools = std::move(std::get<std::vector<ToolSpec>>(read));
  }
  if (const json* parallel = field("parallel_tool_calls")) {
    if (!parallel->is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    use.parallel = parallel->get<bool>();
  }
  if (const json* choice = field("tool_choice")) {
    if (use.tools.empty() && *choice != "none") {
      return bad_request("'tool_choice' is only allowed when 'tools' are specified", "tool_choice");
    }
    if (auto error = read_tool_choice(*choice, api, use)) return *error;
  }
  return use;
}

std::variant<std::vector<ToolCall>, ApiError> read_tool_calls(const json& calls, const std::string& where) {
  if (!calls.is_array()) return bad_request(where + ".tool_calls must be an array", where + ".tool_calls");
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& call = calls[i];
    const std::string at = fmt::format("{}.tool_calls[{}]", where, i);
    const json* function = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
    if (function == nullptr || !function->is_object() || !is_string(*function, "name") || !is_string(*function, "arguments")) {
      return bad_request(at + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", at);
    }
    out.push_back({is_string(call, "id") ? call["id"].get<std::string>() : std::string(),
                   (*function)["name"].get<std::string>(), (*function)["arguments"].get<std::string>()});
  }
  return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& call : calls) {
    out.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return out;
}

}  // namespace mnemo::server
