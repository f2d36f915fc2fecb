// Chat templates: OpenAI-style messages rendered into a prompt by the model's Jinja template
// (the GGUF's tokenizer.chat_template, as in HuggingFace tokenizer configs), or by a built-in
// one when the file has none.
//
// Rendering matches HF's apply_chat_template: trim_blocks and lstrip_blocks on, the variables
// messages, bos_token, eos_token, add_generation_prompt, tools (the options', else none) and documents (none), and
// raise_exception(). The rendered prompt contains the special tokens as text (e.g. "<bos>"), so
// the caller tokenizes it with special-token parsing and does not add another BOS.
//
// Templates are untrusted input: a template that fails to parse, raises, loops or recurses
// without end, or builds huge values gets an Error (with the template's line and column), never a
// crash or a hang. See jinja_builtins.h for the limits.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "gguf/gguf_file.h"
#include "util/result.h"

namespace mnemo {

// A function call an assistant made: `arguments` is JSON text, as OpenAI's API carries it.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}

  std::string role;  // system, user, assistant, tool
  std::string content;
  bool content_null = false;            // an assistant turn of calls only: content is None to the template
  std::vector<ToolCall> tool_calls;     // assistant
  std::string tool_call_id;             // tool: the call answered
  std::string name;                     // tool: the function's name, where known
  std::string reasoning_content;        // assistant: its reasoning, where the client sent it back
};

struct ChatTemplateOptions {
  std::string bos_token;
  std::string eos_token;
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;  // the Jinja `tools` variable (null: none), keys in the order written
  // More variables (a request's chat_template_kwargs, e.g. Qwen 3's enable_thinking): an object,
  // or null. They cannot replace the ones above (chat_template_reserved_variable).
  nlohmann::ordered_json variables;
};

// Whether `name` is a variable the renderer sets itself (messages, tools, ...).
bool chat_template_reserved_variable(std::string_view name);

class ChatTemplate {
 public:
  // Parses a Jinja template; syntax errors name the line and column.
  static Result<ChatTemplate> parse(std::string_view source);
  // The built-in template of a family: "gemma", "llama3", "chatml", "mistral", "llama2".
  static Result<ChatTemplate> builtin(std::string_view family);
  // The file's tokenizer.chat_template if present and parseable, else the built-in template of
  // the family the architecture or vocabulary shows: gemma*; <|im_start|> -> chatml;
  // <|start_header_id|> -> llama3; [INST] -> mistral; other llama -> llama2. An Error when
  // none applies.
  static Result<ChatTemplate> for_model(const gguf::File& file);

  Result<std::string> render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const;
  // The same under explicit limits (tests, fuzzing).
  Result<std::string> render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options,
                             const jinja::Limits& limits) const;

  const std::string& source() const { return source_; }
  // Where the template came from, for logs: "tokenizer.chat_template", "builtin gemma", or
  // "builtin chatml (the file's tokenizer.chat_template did not parse: line 3, ...)".
  const std::string& origin() const { return origin_; }

 private:
  ChatTemplate(std::string source, std::shared_ptr<const jinja::Body> body, std::string origin)
      : source_(std::move(source)), body_(std::move(body)), origin_(std::move(origin)) {}

  std::string source_;
  std::shared_ptr<const jinja::Body> body_;  // shared: copies of a ChatTemplate are cheap
  std::string origin_;
};

// Options for a model: its BOS and EOS token texts from the vocabulary (empty when unknown),
// add_generation_prompt set.
Result<ChatTemplateOptions> chat_template_options_for_model(const gguf::File& file);

// The fuzz target's body: parses arbitrary bytes as a template and renders a short fixed
// conversation with small limits. Returns the text or an Error; it must never crash or hang.
Result<std::string> parse_and_render_for_fuzzing(std::string_view source);

}  // namespace mnemo
