#include "sim/estimated_token_counter.h"

#include <algorithm>

namespace mnemo::sim {

int32_t EstimatedTokenCounter::count_text(std::string_view text) const {
  return static_cast<int32_t>((text.size() + kBytesPerToken - 1) / kBytesPerToken);
}

std::string EstimatedTokenCounter::truncate_text(std::string_view text, int32_t max_tokens) const {
  const size_t keep = static_cast<size_t>(std::max(0, max_tokens)) * kBytesPerToken;
  return std::string(text.substr(0, std::min(keep, text.size())));
}

Result<int32_t> EstimatedTokenCounter::count_prompt(std::span<const ChatMessage> messages) const {
  int32_t n = kPerPrompt;
  for (const ChatMessage& m : messages) n += count_text(m.content) + kPerMessage;
  return n;
}

}  // namespace mnemo::sim
