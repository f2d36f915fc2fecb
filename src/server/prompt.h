// A request's prompt as the model sees it (chat template, then tokenizer) and its tenant: the
// two things that name its cached KV (PrefixIndex keys). Shared by the server, which runs the
// prompt, and by a router that tokenizes to follow the instances' caches exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "chat/chat_template.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace mnemo::server {

// Messages through the chat template, then the tokenizer; with tools, the messages and tools as
// the template's tool format has them (chat/tool_calls.h).
// `variables`: more template variables (chat_template_kwargs), an object or null.
Result<std::vector<TokenId>> render_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                         const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const ToolUse& tool_use = {}, const nlohmann::ordered_json& variables = nullptr);
// Whether a chat reply's reasoning is split off (chat/reasoning.h): when `split` (the server's
// --reasoning-format) and the template shows reasoning tags, request.reasoning is set, and
// request.reasoning_open when the prompt's end opened them.
void prepare_reasoning(const Tokenizer& tokenizer, const ChatTemplate& chat_template, bool split,
                       const std::vector<TokenId>& prompt, ParsedRequest& request);
// A chat request's tool calling as the model's template has it: request.tool_format, and, when
// the reply must be the JSON envelope, its schema as the request's output constraint. A 400 when
// the tools cannot be enforced or response_format asks for another constraint.
std::optional<ApiError> prepare_tool_calls(const ChatTemplate& chat_template, ParsedRequest& request);
// A chat or completion request's prompt tokens, or a 400 naming the field.
std::variant<std::vector<TokenId>, ApiError> prompt_tokens(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                                           const ParsedRequest& request, bool chat);
// What names this model's prompts: a hash of the tokens that fixed probe requests (chat with
// every role and non-ASCII text, and a completion) render to. Equal on instances and routers that
// tokenize alike; a router whose fingerprint differs from an instance's cannot name its chunks.
uint64_t prompt_fingerprint(const Tokenizer& tokenizer, const ChatTemplate& chat_template);
// The KV namespace of a tenant (auth/api_keys.h: "" in a single-tenant server) and its
// cache_salt. Equal prompts of different tenants never share KV.
uint64_t cache_namespace(std::string_view tenant, std::string_view cache_salt);

}  // namespace mnemo::server
