// Token counts the workload is planned with: how long each dataset reply is, and how long a
// chat prompt becomes, in the served model's own tokens. The benchmark forces every reply to
// its dataset length, so the counts must be the model's (a word count would not do).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "util/result.h"

namespace mnemo::loadgen {

class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  // Tokens of plain text (no special tokens added).
  virtual int32_t count_text(std::string_view text) const = 0;
  // The longest prefix of `text` that is at most `max_tokens` tokens.
  virtual std::string truncate_text(std::string_view text, int32_t max_tokens) const = 0;
  // Tokens of the prompt the server builds from these messages (chat template with the
  // generation prompt, special tokens included).
  virtual Result<int32_t> count_prompt(std::span<const ChatMessage> messages) const = 0;
};

// Counts with the tokenizer and chat template of a GGUF model (only its metadata is read).
Result<std::unique_ptr<TokenCounter>> token_counter_from_gguf(const std::string& model_path);

}  // namespace mnemo::loadgen
