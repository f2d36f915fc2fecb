#include "chat/tool_calls.h"

#include <random>

#include <fmt/format.h>

namespace mnemo {
namespace {

using nlohmann::json;
using grammar::CompiledSchema;
using grammar::SchemaNode;

constexpr int32_t kMaxParallelCalls = 8;

int32_t add_node(CompiledSchema& schema, SchemaNode node) {
  schema.nodes.push_back(std::move(node));
  return static_cast<int32_t>(schema.nodes.size() - 1);
}

SchemaNode object_node(std::vector<SchemaNode::Property> properties) {
  SchemaNode node;
  node.kind = SchemaNode::Kind::kObject;
  node.properties = std::move(properties);
  return node;
}

// The schema of one tool's arguments, appended: its parameters compiled, or any object where
// they do not compile and the tool is not strict.
Result<int32_t> append_arguments(CompiledSchema& schema, const ToolSpec& tool) {
  auto compiled = grammar::compile_schema(tool.parameters);
  if (compiled.ok() && compiled->nodes[0].kind == SchemaNode::Kind::kObject) return grammar::append_schema(schema, *compiled);
  if (tool.strict) {
    return make_error("tool '{}': its parameters cannot be enforced: {}", tool.name,
                      compiled.ok() ? std::string("the root must be of type object") : compiled.error().message());
  }
  return grammar::append_any_object(schema);
}

// {"name": <the tool's name>, "arguments": <its arguments>}
Result<int32_t> append_call(CompiledSchema& schema, const ToolSpec& tool) {
  SchemaNode name;
  name.kind = SchemaNode::Kind::kEnum;
  name.literals = {json(tool.name).dump()};
  const int32_t name_node = add_node(schema, std::move(name));
  MNEMO_ASSIGN_OR_RETURN(const int32_t arguments, append_arguments(schema, tool));
  return add_node(schema, object_node({{"\"name\"", name_node, true}, {"\"arguments\"", arguments, true}}));
}

nlohmann::ordered_json function_json(const ToolSpec& tool) {
  nlohmann::ordered_json function = nlohmann::ordered_json::object();
  function["name"] = tool.name;
  if (!tool.description.empty()) function["description"] = tool.description;
  function["parameters"] = nlohmann::ordered_json::parse(tool.parameters.dump());
  return function;
}

std::string tools_description(const ToolUse& use) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (const ToolSpec& tool : use.tools) {
    if (!use.offers(tool)) continue;
    tools.push_back(function_json(tool));
  }
  std::string text = "You can call these tools:\n" + tools.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                     "\n\nTo call tools, answer with one JSON object: {\"tool_calls\": [{\"name\": \"<tool name>\", "
                     "\"arguments\": {<its arguments>}}]}, each call once. A tool's result comes back in the next message.";
  if (use.choice == ToolChoice::kAuto) text += " To reply to the user instead, answer with {\"response\": \"<your reply>\"}.";
  return text;
}

// An assistant's calls as the envelope it would have written.
std::string envelope_text(const ChatMessage& message) {
  json calls = json::array();
  for (const ToolCall& call : message.tool_calls) {
    json arguments = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    calls.push_back({{"name", call.name}, {"arguments", arguments.is_discarded() ? json(call.arguments) : arguments}});
  }
  return json{{"tool_calls", calls}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string tool_result_text(const ChatMessage& message, const std::vector<ChatMessage>& before) {
  std::string name = message.name;
  for (const ChatMessage& earlier : before) {
    for (const ToolCall& call : earlier.tool_calls) {
      if (name.empty() && call.id == message.tool_call_id) name = call.name;
    }
  }
  // Plain words: small models answer from them better than from another JSON object.
  return fmt::format("The tool {} returned: {}", name.empty() ? std::string("call ") + message.tool_call_id : name, message.content);
}

std::optional<ToolCall> call_from(const json& object, const char* arguments_key) {
  if (!object.is_object()) return std::nullopt;
  const auto name = object.find("name");
  if (name == object.end() || !name->is_string()) return std::nullopt;
  auto arguments = object.find(arguments_key);
  if (arguments == object.end()) arguments = object.find("arguments");
  ToolCall call{new_tool_call_id(), name->get<std::string>(), "{}"};
  if (arguments != object.end()) {
    call.arguments = arguments->is_string() ? arguments->get<std::string>()
                                            : arguments->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return call;
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

// An envelope cut short (a length limit) up to its last whole call, closed: the calls written
// whole are kept. Empty when no call was finished.
std::string closed_at_last_call(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  size_t last_call_end = std::string_view::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      --depth;
      if (depth == 2 && c == '}') last_call_end = i;  // {"tool_calls": [ {...} <- here
    }
  }
  if (last_call_end == std::string_view::npos) return "";
  return std::string(text.substr(0, last_call_end + 1)) + "]}";
}

ParsedReply parse_envelope(std::string_view text) {
  json envelope = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (envelope.is_discarded()) {
    const std::string closed = closed_at_last_call(text);
    if (!closed.empty()) envelope = json::parse(closed, nullptr, /*allow_exceptions=*/false);
  }
  ParsedReply reply;
  if (envelope.is_object() && envelope.contains("tool_calls") && envelope["tool_calls"].is_array()) {
    for (const json& item : envelope["tool_calls"].get_ref<const json::array_t&>()) {
      if (auto call = call_from(item, "arguments")) reply.calls.push_back(std::move(*call));
    }
    return reply;
  }
  if (envelope.is_object() && envelope.contains("response") && envelope["response"].is_string()) {
    reply.content = envelope["response"].get<std::string>();
    return reply;
  }
  reply.content = std::string(text);  // cut short (a length limit): the text as it stands
  return reply;
}

// Qwen 2.5 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number, with
// text around them.
// Small Qwen 2.5 models (Coder among them) often write a Hermes call without its tags: a reply
// that is nothing but one such object (in a ```json fence or not) is that call, as llama-server
// reads it. Text that merely contains JSON stays text.
ParsedReply bare_call_or_text(ParsedReply reply) {
  std::string_view body = trim(reply.content);
  if (body.starts_with("```")) {
    const size_t line = body.find('\n');
    if (line == std::string_view::npos || !body.ends_with("```")) return reply;
    body = trim(body.substr(line + 1, body.size() - line - 4));
  }
  if (body.empty() || body.front() != '{') return reply;
  const json call = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || call.size() != 2 || !call.contains("arguments") || !call["arguments"].is_object()) return reply;
  if (auto parsed = call_from(call, "arguments")) {
    reply.content.clear();
    reply.calls.push_back(std::move(*parsed));
  }
  return reply;
}

ParsedReply parse_hermes(std::string_view text) {
  constexpr std::string_view kOpen = "<tool_call>";
  constexpr std::string_view kClose = "</tool_call>";
  ParsedReply reply;
  size_t at = 0;
  while (true) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    reply.content += text.substr(at, open - at);
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    const json call = json::parse(trim(text.substr(body, close == std::string_view::npos ? text.size() - body : close - body)),
                                  nullptr, /*allow_exceptions=*/false);
    if (auto parsed = call_from(call, "arguments")) {
      reply.calls.push_back(std::move(*parsed));
    } else {
      reply.content += text.substr(open, (close == std::string_view::npos ? text.size() : close + kClose.size()) - open);
    }
    if (close == std::string_view::npos) {
      at = text.size();
      break;
    }
    at = close + kClose.size();
  }
  reply.content += text.substr(at);
  reply.content = std::string(trim(reply.content));
  if (reply.calls.empty()) return bare_call_or_text(std::move(reply));
  return reply;
}

// Llama 3.x: the whole reply one JSON object {"name": ..., "parameters": {...}} (after an
// optional <|python_tag|>), or several separated by ';'.
ParsedReply parse_llama3(std::string_view text) {
  std::string_view body = trim(text);
  constexpr std::string_view kTag = "<|python_tag|>";
  if (body.substr(0, kTag.size()) == kTag) body = trim(body.substr(kTag.size()));
  ParsedReply reply;
  if (!body.empty() && body.front() == '{') {
    size_t at = 0;
    while (at < body.size()) {
      const size_t end = body.find(';', at);
      const std::string_view part = trim(body.substr(at, end == std::string_view::npos ? body.size() - at : end - at));
      auto call = call_from(json::parse(part, nullptr, /*allow_exceptions=*/false), "parameters");
      if (!call) {
        reply.calls.clear();
        break;
      }
      reply.calls.push_back(std::move(*call));
      if (end == std::string_view::npos) break;
      at = end + 1;
    }
    if (!reply.calls.empty()) return reply;
  }
  reply.content = std::string(text);
  return reply;
}

// Mistral: text, then [TOOL_CALLS] and a JSON array of {"name", "arguments"}.
ParsedReply parse_mistral(std::string_view text) {
  constexpr std::string_view kMarker = "[TOOL_CALLS]";
  ParsedReply reply;
  const size_t marker = text.find(kMarker);
  if (marker == std::string_view::npos) {
    reply.content = std::string(text);
    return reply;
  }
  const json calls = json::parse(trim(text.substr(marker + kMarker.size())), nullptr, /*allow_exceptions=*/false);
  if (calls.is_array()) {
    for (const json& item : calls.get_ref<const json::array_t&>()) {
      if (auto call = call_from(item, "arguments")) reply.calls.push_back(std::move(*call));
    }
  }
  if (reply.calls.empty()) {
    reply.content = std::string(text);
    return reply;
  }
  reply.content = std::string(trim(text.substr(0, marker)));
  return reply;
}

}  // namespace

ToolFormat tool_format_of(std::string_view source) {
  if (source.find("<tool_call>") != std::string_view::npos) return ToolFormat::kHermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::kMistral;
  if (source.find("<|start_header_id|>") != std::string_view::npos && source.find("tools") != std::string_view::npos) {
    return ToolFormat::kLlama3;
  }
  return ToolFormat::kGeneric;
}

std::string_view tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kGeneric: return "generic";
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3: return "llama3";
    case ToolFormat::kMistral: return "mistral";
  }
  return "generic";
}

bool envelope_forced(ToolFormat format, const ToolUse& use) {
  if (!use.calls_possible()) return false;
  return format == ToolFormat::kGeneric || use.choice == ToolChoice::kRequired || use.choice == ToolChoice::kNamed;
}

Result<CompiledSchema> envelope_schema(const ToolUse& use) {
  CompiledSchema schema;
  schema.nodes.emplace_back();  // the root, filled last
  std::vector<int32_t> calls;
  for (const ToolSpec& tool : use.tools) {
    if (!use.offers(tool)) continue;
    MNEMO_ASSIGN_OR_RETURN(const int32_t call, append_call(schema, tool));
    calls.push_back(call);
  }
  if (calls.empty()) return make_error("tool_choice names '{}', which is not among the tools", use.forced_name);
  if (calls.size() > grammar::kMaxAnyOf) return make_error("at most {} tools may be offered at once", grammar::kMaxAnyOf);
  int32_t item = calls[0];
  if (calls.size() > 1) {
    SchemaNode any;
    any.kind = SchemaNode::Kind::kAnyOf;
    any.alternatives = calls;
    item = add_node(schema, std::move(any));
    schema.has_any_of = true;
  }
  SchemaNode array;
  array.kind = SchemaNode::Kind::kArray;
  array.items = item;
  array.min_items = 1;
  array.max_items = use.parallel ? kMaxParallelCalls : 1;
  const int32_t array_node = add_node(schema, std::move(array));
  SchemaNode with_calls = object_node({{"\"tool_calls\"", array_node, true}});
  if (use.choice != ToolChoice::kAuto) {
    schema.nodes[0] = std::move(with_calls);
    return schema;
  }
  const int32_t calls_node = add_node(schema, std::move(with_calls));
  SchemaNode text;
  text.kind = SchemaNode::Kind::kString;
  const int32_t text_node = add_node(schema, std::move(text));
  const int32_t response_node = add_node(schema, object_node({{"\"response\"", text_node, true}}));
  schema.nodes[0].kind = SchemaNode::Kind::kAnyOf;
  schema.nodes[0].alternatives = {calls_node, response_node};
  schema.has_any_of = true;
  return schema;
}

std::vector<ChatMessage> messages_for_template(ToolFormat format, const std::vector<ChatMessage>& messages, const ToolUse& use) {
  if (format == ToolFormat::kMistral) {
    std::vector<ChatMessage> out = messages;
    for (ChatMessage& m : out) {
      for (ToolCall& call : m.tool_calls) call.id = mistral_call_id(call.id);
      if (!m.tool_call_id.empty()) m.tool_call_id = mistral_call_id(m.tool_call_id);
    }
    return out;
  }
  if (format != ToolFormat::kGeneric) return messages;
  std::vector<ChatMessage> out;
  if (use.calls_possible()) {
    const std::string description = tools_description(use);
    if (!messages.empty() && messages[0].role == "system") {
      out.push_back({"system", messages[0].content + "\n\n" + description});
    } else {
      out.push_back({"system", description});
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (i == 0 && m.role == "system" && use.calls_possible()) continue;  // merged above
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      out.push_back({"assistant", envelope_text(m)});
    } else if (m.role == "tool") {
      const std::string result = tool_result_text(m, messages);
      if (!out.empty() && out.back().role == "user" && i > 0 && messages[i - 1].role == "tool") {
        out.back().content += "\n" + result;
      } else {
        out.push_back({"user", result});
      }
    } else {
      out.push_back({m.role, m.content});
    }
  }
  return out;
}

nlohmann::ordered_json tools_for_template(ToolFormat format, const ToolUse& use) {
  if (format == ToolFormat::kGeneric || !use.calls_possible()) return nullptr;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (const ToolSpec& tool : use.tools) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["type"] = "function";
    entry["function"] = function_json(tool);
    tools.push_back(std::move(entry));
  }
  return tools;
}

ParsedReply parse_reply(ToolFormat format, bool forced_envelope, std::string_view text) {
  if (forced_envelope) return parse_envelope(text);
  switch (format) {
    case ToolFormat::kHermes: return parse_hermes(text);
    case ToolFormat::kLlama3: return parse_llama3(text);
    case ToolFormat::kMistral: return parse_mistral(text);
    case ToolFormat::kGeneric: break;
  }
  return ParsedReply{std::string(text), {}};
}

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

std::string mistral_call_id(std::string_view id) {
  const bool fits = id.size() == 9 && id.find_first_not_of(kAlphabet) == std::string_view::npos;
  if (fits) return std::string(id);
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a: stable across processes, unlike std::hash
  for (const char c : id) hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  std::string out;
  for (int i = 0; i < 9; ++i, hash /= kAlphabet.size()) out += kAlphabet[hash % kAlphabet.size()];
  return out;
}

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % kAlphabet.size()];
  return id;
}

}  // namespace mnemo
