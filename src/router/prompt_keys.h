// A request's prompt as the router's prompt trees name it: by its text always (PromptTree), and,
// when the router has the served model's tokenizer (`mnemo route --model`), by the chunk keys the
// instances' own indexes use (PrefixIndex::chunk_key over the prompt's tokens in the tenant's
// namespace), so the router can follow the instances' caches by their events (CacheFollower).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "router/conversation_text.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace mnemo::router {

// The model's tokenizer and chat template, rendering prompts as the instances do (server/prompt).
class PromptTokenizer {
 public:
  static Result<std::unique_ptr<PromptTokenizer>> load(const std::string& model_path);
  // server::prompt_fingerprint, as instances publish it.
  const std::string& fingerprint() const { return fingerprint_; }
  // The prompt's tokens as an instance renders them (empty if the request does not parse: the
  // instance will refuse it anyway).
  std::vector<TokenId> tokens(Api api, const std::string& body) const;
  // The request's KV namespace, as an instance computes it (server::cache_namespace).
  static uint64_t cache_namespace(std::string_view tenant, const nlohmann::json& body);

 private:
  PromptTokenizer(std::unique_ptr<Tokenizer> tokenizer, ChatTemplate chat_template);
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_;
  std::string fingerprint_;
};

class PromptKeys {
 public:
  explicit PromptKeys(std::string_view text) : text_(text) {}
  PromptKeys(std::string_view text, std::vector<TokenId> tokens, uint64_t ns)
      : text_(text), tokens_(std::move(tokens)), ns_(ns) {}

  std::string_view text() const { return text_; }
  // The same keys over `text`: a copy of this one's text that outlives it.
  PromptKeys over(std::string_view text) const {
    PromptKeys copy = *this;
    copy.text_ = text;
    return copy;
  }
  bool tokenized() const { return !tokens_.empty(); }
  int64_t n_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  // The key of each whole chunk of `chunk_tokens` tokens, in order (computed once per size).
  std::span<const uint64_t> keys(int32_t chunk_tokens) const;
  // The leading chunks an instance can reuse: those before the last token, which it always
  // computes (for its logits).
  std::span<const uint64_t> reusable_keys(int32_t chunk_tokens) const;

 private:
  std::string_view text_;
  std::vector<TokenId> tokens_;  // empty: not tokenized
  uint64_t ns_ = 0;
  mutable std::map<int32_t, std::vector<uint64_t>> keys_;  // by chunk size
};

}  // namespace mnemo::router
