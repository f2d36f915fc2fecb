#include "loadgen/token_counter.h"

#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace mnemo::loadgen {
namespace {

class GgufTokenCounter final : public TokenCounter {
 public:
  GgufTokenCounter(gguf::File file, std::unique_ptr<Tokenizer> tokenizer, ChatTemplate chat_template,
                   ChatTemplateOptions options)
      : file_(std::move(file)),
        tokenizer_(std::move(tokenizer)),
        chat_template_(std::move(chat_template)),
        options_(std::move(options)) {}

  int32_t count_text(std::string_view text) const override {
    return static_cast<int32_t>(tokenizer_->encode(text, /*add_special=*/false, /*parse_special=*/false).size());
  }

  std::string truncate_text(std::string_view text, int32_t max_tokens) const override {
    std::vector<TokenId> tokens = tokenizer_->encode(text, /*add_special=*/false, /*parse_special=*/false);
    if (static_cast<int32_t>(tokens.size()) <= max_tokens) return std::string(text);
    tokens.resize(static_cast<size_t>(std::max(0, max_tokens)));
    return tokenizer_->decode(tokens);
  }

  Result<int32_t> count_prompt(std::span<const ChatMessage> messages) const override {
    const std::vector<ChatMessage> list(messages.begin(), messages.end());
    MNEMO_ASSIGN_OR_RETURN(const std::string prompt, chat_template_.render(list, options_));
    // The rendered prompt carries the BOS text itself, as the server tokenizes it.
    return static_cast<int32_t>(tokenizer_->encode(prompt, /*add_special=*/false, /*parse_special=*/true).size());
  }

 private:
  gguf::File file_;  // the tokenizer's vocabulary came from here; kept alive with it
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chat_template_;
  ChatTemplateOptions options_;
};

}  // namespace

Result<std::unique_ptr<TokenCounter>> token_counter_from_gguf(const std::string& model_path) {
  MNEMO_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(model_path));
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::from_gguf(file));
  MNEMO_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::for_model(file));
  MNEMO_ASSIGN_OR_RETURN(ChatTemplateOptions options, chat_template_options_for_model(file));
  options.add_generation_prompt = true;
  return std::unique_ptr<TokenCounter>(
      std::make_unique<GgufTokenCounter>(std::move(file), std::move(tokenizer), std::move(chat_template), std::move(options)));
}

}  // namespace mnemo::loadgen
