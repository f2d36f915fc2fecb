#include "chat/chat_template.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "chat/builtin_templates.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_parser.h"

namespace mnemo {

namespace {

constexpr std::string_view kTemplateKey = "tokenizer.chat_template";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";

// Whether the vocabulary has a token spelled exactly `text` (read in place: no copy of the
// vocabulary, which has 262k entries for Gemma).
bool has_token(const gguf::File& file, std::string_view text) {
  const gguf::Value* tokens = file.find(kTokensKey);
  if (tokens == nullptr) return false;
  const auto* array = std::get_if<gguf::Array>(&tokens->v);
  if (array == nullptr) return false;
  for (const gguf::Value& token : array->items) {
    const auto* spelling = std::get_if<std::string>(&token.v);
    if (spelling != nullptr && *spelling == text) return true;
  }
  return false;
}

std::string token_text(const gguf::File& file, std::string_view id_key) {
  auto id = file.get_int(id_key);
  const gguf::Value* tokens = file.find(kTokensKey);
  if (!id.ok() || tokens == nullptr) return "";
  const auto* array = std::get_if<gguf::Array>(&tokens->v);
  if (array == nullptr || *id < 0 || static_cast<size_t>(*id) >= array->items.size()) return "";
  const auto* spelling = std::get_if<std::string>(&array->items[static_cast<size_t>(*id)].v);
  return spelling != nullptr ? *spelling : "";
}

Result<std::string> infer_family(const gguf::File& file) {
  const std::string architecture = file.get_string_or("general.architecture", "").ok()
                                       ? *file.get_string_or("general.architecture", "")
                                       : "";
  if (architecture.rfind("gemma", 0) == 0) return std::string("gemma");
  if (has_token(file, "<|im_start|>")) return std::string("chatml");
  if (has_token(file, "<|start_header_id|>")) return std::string("llama3");
  if (has_token(file, "[INST]")) return std::string("mistral");
  if (architecture == "llama") return std::string("llama2");
  return make_error("{}: no chat template in the file and no built-in one for architecture '{}'", file.name(),
                    architecture);
}

template <class Json>
jinja::Value from_json(const Json& v) {
  switch (v.type()) {
    case nlohmann::detail::value_t::boolean: return jinja::Value::from_bool(v.template get<bool>());
    case nlohmann::detail::value_t::number_integer: return jinja::Value::from_int(v.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned:
      return v.template get<uint64_t>() <= uint64_t{INT64_MAX} ? jinja::Value::from_int(static_cast<int64_t>(v.template get<uint64_t>()))
                                                      : jinja::Value::from_float(v.template get<double>());
    case nlohmann::detail::value_t::number_float: return jinja::Value::from_float(v.template get<double>());
    case nlohmann::detail::value_t::string: return jinja::Value::from_string(v.template get<std::string>());
    case nlohmann::detail::value_t::array: {
      jinja::List items;
      for (const Json& item : v.template get_ref<const typename Json::array_t&>()) items.push_back(from_json(item));
      return jinja::Value::from_list(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      jinja::Dict entries;
      for (const auto& [key, value] : v.template get_ref<const typename Json::object_t&>()) entries.emplace_back(key, from_json(value));
      return jinja::Value::from_distinct_keys(std::move(entries));
    }
    default: return jinja::Value::none();
  }
}

// A call as templates read it (HF's convention): arguments as a mapping where they parse as one.
jinja::Value tool_call_value(const ToolCall& call) {
  nlohmann::json arguments = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  jinja::Value args = arguments.is_object() ? from_json(arguments) : jinja::Value::from_string(call.arguments);
  jinja::Value function = jinja::Value::from_distinct_keys({{"name", jinja::Value::from_string(call.name)}, {"arguments", args}});
  return jinja::Value::from_distinct_keys({{"id", jinja::Value::from_string(call.id)},
                                           {"type", jinja::Value::from_string("function")},
                                           {"function", std::move(function)}});
}

jinja::Value message_list(const std::vector<ChatMessage>& messages) {
  jinja::List items;
  items.reserve(messages.size());
  for (const ChatMessage& message : messages) {
    jinja::Dict entries = {{"role", jinja::Value::from_string(message.role)},
                           {"content", message.content_null ? jinja::Value::none() : jinja::Value::from_string(message.content)}};
    if (!message.tool_calls.empty()) {
      jinja::List calls;
      for (const ToolCall& call : message.tool_calls) calls.push_back(tool_call_value(call));
      entries.emplace_back("tool_calls", jinja::Value::from_list(std::move(calls)));
    }
    if (!message.tool_call_id.empty()) entries.emplace_back("tool_call_id", jinja::Value::from_string(message.tool_call_id));
    if (!message.name.empty()) entries.emplace_back("name", jinja::Value::from_string(message.name));
    if (!message.reasoning_content.empty()) {
      entries.emplace_back("reasoning_content", jinja::Value::from_string(message.reasoning_content));
    }
    items.push_back(jinja::Value::from_distinct_keys(std::move(entries)));
  }
  return jinja::Value::from_list(std::move(items));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  auto body = jinja::parse_template(source);
  if (!body.ok()) return body.error().with_context("chat template");
  return ChatTemplate(std::string(source), std::make_shared<const jinja::Body>(std::move(*body)), "parsed");
}

Result<ChatTemplate> ChatTemplate::builtin(std::string_view family) {
  const std::optional<std::string_view> source = builtin_template_source(family);
  if (!source) {
    return make_error("no built-in chat template for '{}' (known: {})", family,
                      fmt::join(builtin_template_families(), ", "));
  }
  MNEMO_ASSIGN_OR_RETURN(ChatTemplate chat_template, parse(*source));
  chat_template.origin_ = fmt::format("builtin {}", family);
  return chat_template;
}

Result<ChatTemplate> ChatTemplate::for_model(const gguf::File& file) {
  auto source = file.get_string_or(kTemplateKey, "");
  std::string rejected;
  if (!source.ok()) {
    rejected = source.error().message();
  } else if (!source->empty()) {
    auto parsed = parse(*source);
    if (parsed.ok()) {
      parsed->origin_ = std::string(kTemplateKey);
      return parsed;
    }
    rejected = parsed.error().message();
  }
  MNEMO_ASSIGN_OR_RETURN(const std::string family, infer_family(file));
  MNEMO_ASSIGN_OR_RETURN(ChatTemplate chat_template, builtin(family));
  if (!rejected.empty()) {
    chat_template.origin_ = fmt::format("builtin {} (the file's {} was not usable: {})", family, kTemplateKey, rejected);
  }
  return chat_template;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         const ChatTemplateOptions& options) const {
  return render(messages, options, jinja::Limits{});
}

bool chat_template_reserved_variable(std::string_view name) {
  for (const std::string_view reserved : {"messages", "bos_token", "eos_token", "add_generation_prompt", "tools", "documents"}) {
    if (name == reserved) return true;
  }
  return false;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options,
                                         const jinja::Limits& limits) const {
  jinja::Dict globals = {
      {"messages", message_list(messages)},
      {"bos_token", jinja::Value::from_string(options.bos_token)},
      {"eos_token", jinja::Value::from_string(options.eos_token)},
      {"add_generation_prompt", jinja::Value::from_bool(options.add_generation_prompt)},
      {"tools", options.tools.is_null() ? jinja::Value::none() : from_json(options.tools)},
      {"documents", jinja::Value::none()},
  };
  if (options.variables.is_object()) {
    for (const auto& [name, value] : options.variables.items()) {
      if (chat_template_reserved_variable(name)) return make_error("chat template variable '{}' is set by the server", name);
      globals.emplace_back(name, from_json(value));
    }
  }
  auto text = jinja::render_template(*body_, globals, limits);
  if (!text.ok()) return text.error().with_context("chat template");
  return text;
}

Result<ChatTemplateOptions> chat_template_options_for_model(const gguf::File& file) {
  ChatTemplateOptions options;
  options.bos_token = token_text(file, "tokenizer.ggml.bos_token_id");
  options.eos_token = token_text(file, "tokenizer.ggml.eos_token_id");
  return options;
}

Result<std::string> parse_and_render_for_fuzzing(std::string_view source) {
  MNEMO_ASSIGN_OR_RETURN(const ChatTemplate chat_template, ChatTemplate::parse(source));
  const std::vector<ChatMessage> conversation = {
      {"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "How are you?"}};
  jinja::Limits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = size_t{1} << 20;
  limits.max_value_bytes = size_t{1} << 20;
  limits.max_duration = std::chrono::milliseconds(2'000);
  return chat_template.render(conversation, ChatTemplateOptions{"<bos>", "<eos>", true, nullptr, nullptr}, limits);
}

}  // namespace mnemo
