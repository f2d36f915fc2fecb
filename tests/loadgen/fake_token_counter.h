// A token counter for tests where a token is a whitespace-separated word and the chat template
// adds 4 tokens per message and 2 per prompt, so expected plans can be worked out by hand.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "loadgen/token_counter.h"

namespace mnemo::loadgen {

class WordCounter final : public TokenCounter {
 public:
  static constexpr int32_t kPerMessage = 4;
  static constexpr int32_t kPerPrompt = 2;

  int32_t count_text(std::string_view text) const override { return static_cast<int32_t>(words(text).size()); }

  std::string truncate_text(std::string_view text, int32_t max_tokens) const override {
    const std::vector<std::string> all = words(text);
    std::string out;
    for (int32_t i = 0; i < max_tokens && i < static_cast<int32_t>(all.size()); ++i) {
      if (!out.empty()) out += ' ';
      out += all[static_cast<size_t>(i)];
    }
    return out;
  }

  Result<int32_t> count_prompt(std::span<const ChatMessage> messages) const override {
    int32_t n = kPerPrompt;
    for (const ChatMessage& m : messages) n += count_text(m.content) + kPerMessage;
    return n;
  }

  static std::vector<std::string> words(std::string_view text) {
    std::istringstream in{std::string(text)};
    std::vector<std::string> out;
    for (std::string word; in >> word;) out.push_back(word);
    return out;
  }
};

// "w0 w1 ... w(n-1)"
inline std::string n_words(int n, const std::string& stem = "w") {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out.push_back(' ');
    out.append(stem);
    out.append(std::to_string(i));
  }
  return out;
}

}  // namespace mnemo::loadgen
