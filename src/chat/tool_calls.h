// Tool calling: the tools a request offers, how the model is told of them, and how its calls are
// read back from its output.
//
// Two ways, chosen by the model's template (tool_format_of):
//  - native: a template that renders the Jinja `tools` variable (Qwen/Hermes `<tool_call>`,
//    Llama 3.x JSON, Mistral `[TOOL_CALLS]`) is given the tools, and the model's output is read in
//    that family's format;
//  - generic, for templates that know no tools (SmolLM2's, Gemma 3's): the tools are described in
//    the system prompt, tool results become user turns, and the output is a JSON envelope
//    ({"tool_calls": [...]} or {"response": "..."}) forced by constrained decoding with the
//    envelope's schema (envelope_schema), so it always parses.
// tool_choice "required" or a named function forces the envelope in either way (as vLLM forces
// a JSON array of calls whatever the model's format).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "grammar/json_schema.h"
#include "util/result.h"

namespace mnemo {

struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::json parameters = nlohmann::json::object();  // a JSON Schema of the arguments
  bool strict = false;  // the arguments must follow `parameters` exactly (else any object where it does not compile)
};

enum class ToolChoice : uint8_t { kNone, kAuto, kRequired, kNamed };

struct ToolUse {
  std::vector<ToolSpec> tools;
  ToolChoice choice = ToolChoice::kAuto;
  std::string forced_name;        // kNamed: the function that must be called
  bool parallel = true;           // several calls in one reply
  bool calls_possible() const { return !tools.empty() && choice != ToolChoice::kNone; }
  // Whether the model may call `tool` (a named choice offers that one only).
  bool offers(const ToolSpec& tool) const { return choice != ToolChoice::kNamed || tool.name == forced_name; }
};

enum class ToolFormat : uint8_t { kGeneric, kHermes, kLlama3, kMistral };

// The format a template's source shows: the markers its tool-call turns are written with.
ToolFormat tool_format_of(std::string_view template_source);
std::string_view tool_format_name(ToolFormat format);

// Whether the model's output must be the JSON envelope (constrained by envelope_schema).
bool envelope_forced(ToolFormat format, const ToolUse& use);
// The envelope's schema: calls of the offered tools (only the named one for kNamed; at most one
// call unless parallel) with each tool's arguments schema, or, when the model may choose
// (kAuto), a plain response. An Error names a strict tool whose parameters cannot be compiled.
Result<grammar::CompiledSchema> envelope_schema(const ToolUse& use);

// The messages as the template is given them. Generic format: the tools described in the
// system prompt (when calls are possible), an assistant's calls written as the envelope it would
// produce, tool results as user turns (consecutive ones merged, so templates that require
// alternating roles accept them). Native: unchanged.
std::vector<ChatMessage> messages_for_template(ToolFormat format, const std::vector<ChatMessage>& messages, const ToolUse& use);
// The `tools` variable a native template is given (OpenAI's {"type": "function", "function":
// {"name", "description", "parameters"}} entries, in that order, as HF's tojson writes them), or null.
nlohmann::ordered_json tools_for_template(ToolFormat format, const ToolUse& use);

// A reply read back: its text (without the calls' markup) and its calls, each with a fresh id.
struct ParsedReply {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedReply parse_reply(ToolFormat format, bool forced_envelope, std::string_view text);

// "call_" and 24 random letters and digits, as OpenAI's ids look; Mistral's templates want 9
// letters and digits, which mistral_call_id makes of any id (the same for the same id).
std::string new_tool_call_id();
std::string mistral_call_id(std::string_view id);

}  // namespace mnemo
