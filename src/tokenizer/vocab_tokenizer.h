// What the SentencePiece and BPE tokenizers share: the vocabulary, splitting out special tokens,
// BOS/EOS, token_to_piece for everything but normal tokens, end-of-generation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace mnemo::tokenizer {

class VocabTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const final;
  std::string token_to_piece(TokenId token, bool special) const final;

  int32_t vocab_size() const final { return vocab_.size(); }
  TokenId bos() const final { return vocab_.bos(); }
  TokenId eos() const final { return vocab_.eos(); }
  bool is_end_of_generation(TokenId token) const final { return vocab_.is_end_of_generation(token); }
  std::string_view model_name() const final { return model_name_; }
  TokenType token_type(TokenId token) const final;
  std::string_view token_text(TokenId token) const final;
  DetokenizeRules detokenize_rules() const final { return {vocab_.add_space_prefix(), vocab_.clean_spaces()}; }

  const Vocab& vocab() const { return vocab_; }

 protected:
  VocabTokenizer(std::string model_name, Vocab vocab);

  // Tokenises text that no special token claimed. `after_special`: the text starts the input or
  // follows a special token (where SentencePiece adds its space prefix).
  virtual void encode_text(std::string_view text, bool after_special, std::vector<TokenId>& out) const = 0;
  // The bytes a normal token stands for.
  virtual void append_normal_piece(TokenId token, std::string& out) const = 0;

 private:
  std::string model_name_;
  Vocab vocab_;
  SpecialTokenSplitter special_tokens_;  // built from vocab_, declared after it
};

}  // namespace mnemo::tokenizer
