#include "tokenizer/vocab_tokenizer.h"

#include <optional>
#include <utility>

namespace mnemo::tokenizer {
namespace {

std::optional<int> hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return std::nullopt;
}

// Byte tokens are written "<0xAB>".
std::optional<char> byte_of(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  const std::optional<int> high = hex_digit(text[3]);
  const std::optional<int> low = hex_digit(text[4]);
  if (!high || !low) return std::nullopt;
  return static_cast<char>(*high * 16 + *low);
}

}  // namespace

VocabTokenizer::VocabTokenizer(std::string model_name, Vocab vocab)
    : model_name_(std::move(model_name)), vocab_(std::move(vocab)), special_tokens_(vocab_) {}

std::vector<TokenId> VocabTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<TokenId> tokens;
  tokens.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos()) tokens.push_back(vocab_.bos());
  bool after_special = true;
  for (const Fragment& fragment : special_tokens_.split(text, parse_special)) {
    if (fragment.is_text()) {
      encode_text(text.substr(fragment.begin, fragment.end - fragment.begin), after_special, tokens);
      after_special = false;
    } else {
      tokens.push_back(fragment.token);
      after_special = true;
    }
  }
  if (add_special && vocab_.add_eos()) tokens.push_back(vocab_.eos());
  return tokens;
}

std::string VocabTokenizer::token_to_piece(TokenId token, bool special) const {
  if (!vocab_.contains(token)) return {};
  const uint16_t hidden_unless_special = kAttrUnknown | kAttrControl;
  if (!special && vocab_.has_any(token, hidden_unless_special)) return {};
  if (vocab_.has_any(token, hidden_unless_special | kAttrUserDefined)) return std::string(vocab_.text(token));
  std::string piece;
  if (vocab_.has_any(token, kAttrNormal)) {
    append_normal_piece(token, piece);
  } else if (vocab_.has_any(token, kAttrByte)) {
    if (const std::optional<char> byte = byte_of(vocab_.text(token))) piece.push_back(*byte);
  }
  // Unused and undefined tokens render as nothing, as in llama.cpp.
  return piece;
}

TokenType VocabTokenizer::token_type(TokenId token) const {
  return vocab_.contains(token) ? vocab_.type(token) : TokenType::kUndefined;
}

std::string_view VocabTokenizer::token_text(TokenId token) const {
  return vocab_.contains(token) ? vocab_.text(token) : std::string_view();
}

}  // namespace mnemo::tokenizer
