// A token counter that needs no model: one token per 4 bytes of text (rounded up), plus a few
// tokens of chat-template markup per message. Good enough to size a cache workload when the real
// tokenizer is not at hand (`mnemo simulate --estimate-tokens`); the counts are additive, so a
// turn's prompt always extends the previous turn's prompt and reply.
#pragma once

#include "loadgen/token_counter.h"

namespace mnemo::sim {

class EstimatedTokenCounter final : public loadgen::TokenCounter {
 public:
  static constexpr int32_t kBytesPerToken = 4;
  static constexpr int32_t kPerMessage = 4;  // role markers around each message
  static constexpr int32_t kPerPrompt = 3;   // BOS and the generation prompt

  int32_t count_text(std::string_view text) const override;
  std::string truncate_text(std::string_view text, int32_t max_tokens) const override;
  Result<int32_t> count_prompt(std::span<const ChatMessage> messages) const override;
};

}  // namespace mnemo::sim
