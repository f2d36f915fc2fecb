#include "server/prompt.h"

#include <string>

#include <fmt/format.h>
#include <xxhash.h>

#include "grammar/compile_cache.h"

namespace mnemo::server {
namespace {

std::string token_text_or_empty(const Tokenizer& tokenizer, TokenId id) {
  return id >= 0 ? std::string(tokenizer.token_text(id)) : std::string();
}

}  // namespace

Result<std::vector<TokenId>> render_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const ToolUse& tool_use, const nlohmann::ordered_json& variables) {
  ChatTemplateOptions options;
  options.bos_token = token_text_or_empty(tokenizer, tokenizer.bos());
  options.eos_token = token_text_or_empty(tokenizer, tokenizer.eos());
  options.add_generation_prompt = add_generation_prompt;
  const ToolFormat format = tool_format_of(chat_template.source());
  options.tools = tools_for_template(format, tool_use);
  options.variables = variables;
  auto text = chat_template.render(messages_for_template(format, messages, tool_use), options);
  if (!text.ok()) return text.error();
  // The template writes the BOS text itself.
  return tokenizer.encode(*text, /*add_special=*/false, /*parse_special=*/true);
}

std::variant<std::vector<TokenId>, ApiError> prompt_tokens(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                                           const ParsedRequest& request, bool chat) {
  if (chat) {
    auto tokens = render_chat(tokenizer, chat_template, request.messages, /*add_generation_prompt=*/true, request.tool_use,
                              request.template_variables);
    if (!tokens.ok()) return bad_request(tokens.error().message(), "messages");
    return std::move(*tokens);
  }
  if (!request.prompt_tokens.empty()) return request.prompt_tokens;
  return tokenizer.encode(request.prompt_text, /*add_special=*/true, /*parse_special=*/true);
}

std::optional<ApiError> prepare_tool_calls(const ChatTemplate& chat_template, ParsedRequest& request) {
  request.tool_format = tool_format_of(chat_template.source());
  request.tool_envelope = envelope_forced(request.tool_format, request.tool_use);
  if (!request.tool_envelope) return std::nullopt;
  GenerationRequest& g = request.generation;
  if (g.format != OutputFormat::kText) {
    const bool grammar = g.format == OutputFormat::kRegex || g.format == OutputFormat::kGbnf;
    const char* field = grammar ? "grammar" : "response_format";
    return bad_request(fmt::format("'{}' cannot be combined with tool calls here (tool calls are constrained output already)", field),
                       field);
  }
  // Agents send the same tools every turn: their envelope is compiled once.
  const ToolUse& use = request.tool_use;
  std::string key = fmt::format("tools:{}:{}:{}", static_cast<int>(use.choice), use.forced_name, use.parallel);
  for (const ToolSpec& tool : use.tools) key += fmt::format("\n{}\n{}\n{}", tool.name, tool.strict, tool.parameters.dump());
  auto schema = grammar::schema_cache().get(key, [&use] { return envelope_schema(use); });
  if (!schema.ok()) return bad_request(schema.error().message(), "tools");
  g.format = OutputFormat::kJsonSchema;
  g.schema = std::move(*schema);
  return std::nullopt;
}

void prepare_reasoning(const Tokenizer& tokenizer, const ChatTemplate& chat_template, bool split,
                       const std::vector<TokenId>& prompt, ParsedRequest& request) {
  request.reasoning = split ? reasoning_tags_of(chat_template.source()) : std::nullopt;
  if (!request.reasoning) return;
  // The generation prompt's last tokens, special ones as their text, tell whether it opened the
  // tags (a template that starts the thinking itself).
  constexpr size_t kTailTokens = 16;
  std::string tail;
  for (size_t i = prompt.size() > kTailTokens ? prompt.size() - kTailTokens : 0; i < prompt.size(); ++i) {
    tail += tokenizer.token_to_piece(prompt[i], true);
  }
  request.reasoning_open = prompt_opens_reasoning(tail, *request.reasoning);
}

uint64_t prompt_fingerprint(const Tokenizer& tokenizer, const ChatTemplate& chat_template) {
  ParsedRequest chat;
  chat.messages = {{"system", "You are terse."}, {"user", "Zähle bis drei, bitte: 一、二、三 🙂"},
                   {"assistant", "1 2 3"}, {"user", "Now\tbackwards\n  with  spaces."}};
  ParsedRequest completion;
  completion.prompt_text = "The quick brown fox\njumps over 13 lazy dogs.";
  uint64_t hash = 0;
  for (const auto& [request, is_chat] : {std::pair{&chat, true}, std::pair{&completion, false}}) {
    const auto tokens = prompt_tokens(tokenizer, chat_template, *request, is_chat);
    const auto* ok = std::get_if<std::vector<TokenId>>(&tokens);
    hash = ok == nullptr ? XXH3_64bits_withSeed("render failed", 13, hash)
                         : XXH3_64bits_withSeed(ok->data(), ok->size() * sizeof(TokenId), hash);
  }
  return hash;
}

uint64_t cache_namespace(std::string_view tenant, std::string_view cache_salt) {
  std::string name(tenant);
  name += '\0';
  name += cache_salt;
  return XXH3_64bits(name.data(), name.size());
}

}  // namespace mnemo::server
