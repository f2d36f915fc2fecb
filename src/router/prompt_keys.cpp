#include "router/prompt_keys.h"

#include <algorithm>

#include <fmt/format.h>

#include "gguf/gguf_file.h"
#include "kv/prefix_index.h"
#include "server/prompt.h"

namespace mnemo::router {

Result<std::unique_ptr<PromptTokenizer>> PromptTokenizer::load(const std::string& model_path) {
  MNEMO_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(model_path));
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::from_gguf(file));
  MNEMO_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::for_model(file));
  return std::unique_ptr<PromptTokenizer>(new PromptTokenizer(std::move(tokenizer), std::move(chat_template)));
}

PromptTokenizer::PromptTokenizer(std::unique_ptr<Tokenizer> tokenizer, ChatTemplate chat_template)
    : tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      fingerprint_(fmt::format("{:016x}", server::prompt_fingerprint(*tokenizer_, chat_template_))) {}

std::vector<TokenId> PromptTokenizer::tokens(Api api, const std::string& body) const {
  auto parsed = server::parse_request(body, api == Api::kChat);
  if (const auto* request = std::get_if<server::ParsedRequest>(&parsed)) {
    auto tokens = server::prompt_tokens(*tokenizer_, chat_template_, *request, api == Api::kChat);
    if (auto* ok = std::get_if<std::vector<TokenId>>(&tokens)) return std::move(*ok);
  }
  return {};
}

uint64_t PromptTokenizer::cache_namespace(std::string_view tenant, const nlohmann::json& body) {
  const auto salt = body.find("cache_salt");
  return server::cache_namespace(tenant, salt != body.end() && salt->is_string() ? salt->get<std::string>() : "");
}

std::span<const uint64_t> PromptKeys::keys(int32_t chunk_tokens) const {
  if (chunk_tokens <= 0) return {};
  auto [it, fresh] = keys_.try_emplace(chunk_tokens);
  if (fresh) {
    uint64_t key = 0;
    const auto c = static_cast<size_t>(chunk_tokens);
    for (size_t at = 0; at + c <= tokens_.size(); at += c) {
      key = PrefixIndex::chunk_key(key, ns_, std::span(tokens_).subspan(at, c));
      it->second.push_back(key);
    }
  }
  return it->second;
}

std::span<const uint64_t> PromptKeys::reusable_keys(int32_t chunk_tokens) const {
  const std::span<const uint64_t> all = keys(chunk_tokens);
  if (tokens_.empty()) return all;
  return all.first(std::min(all.size(), (tokens_.size() - 1) / static_cast<size_t>(chunk_tokens)));
}

}  // namespace mnemo::router
