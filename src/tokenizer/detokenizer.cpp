// decode() and StreamingDetokenizer: turning tokens back into text.
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace mnemo {
namespace {

// llama.cpp's clean-up of tokenisation artefacts (after Hugging Face's
// clean_up_tokenization_spaces), in its three passes over the text.
std::string clean_up_spaces(const std::string& text) {
  if (text.empty()) return text;

  // " ?", " !", " .", " ," lose the space.
  std::string pass1(1, text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    const char c = text[i];
    if (text[i - 1] == ' ' && (c == '?' || c == '!' || c == '.' || c == ',')) pass1.pop_back();
    pass1.push_back(c);
  }

  // " ' " becomes "'". The space consumed after the apostrophe cannot start another match.
  std::string pass2(1, pass1[0]);
  size_t consumed = std::string::npos;
  for (size_t i = 1; i < pass1.size(); ++i) {
    const char c = pass1[i];
    const bool space_before = i - 1 != consumed && pass1[i - 1] == ' ';
    if (c == '\'' && i + 1 < pass1.size() && space_before && pass1[i + 1] == ' ') {
      pass2.pop_back();
      pass2.push_back(c);
      consumed = ++i;
      continue;
    }
    pass2.push_back(c);
  }

  // " 's", " 'm", " 're", " 've" lose the space; " 't", " 'd", " 'll" keep it.
  std::string pass3(1, pass2[0]);
  for (size_t i = 1; i < pass2.size(); ++i) {
    const char c = pass2[i];
    if (pass2[i - 1] == ' ' && c == '\'' && i + 1 < pass2.size()) {
      const char next = pass2[i + 1];
      const char after = i + 2 < pass2.size() ? pass2[i + 2] : '\0';
      const bool joins = next == 's' || next == 'm' ||
                         (next != 't' && next != 'd' && i + 2 < pass2.size() &&
                          ((next == 'r' && after == 'e') || (next == 'v' && after == 'e')));
      if (joins) pass3.pop_back();
    }
    pass3.push_back(c);
  }
  return pass3;
}

}  // namespace

std::string Tokenizer::decode(std::span<const TokenId> tokens, bool special) const {
  const DetokenizeRules rules = detokenize_rules();
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string piece = token_to_piece(tokens[i], special);
    // Undoes the space prefix of SentencePiece; only ever the first piece, even an empty one.
    if (i == 0 && rules.strip_leading_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    text += piece;
  }
  return rules.clean_up_spaces ? clean_up_spaces(text) : text;
}

std::string StreamingDetokenizer::push(TokenId token) {
  pending_ += tokenizer_.token_to_piece(token, special_);
  const size_t complete = tokenizer::utf8_complete_prefix_length(pending_);
  std::string text = tokenizer::sanitize_utf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return text;
}

std::string StreamingDetokenizer::flush() {
  std::string text = tokenizer::sanitize_utf8(pending_);
  pending_.clear();
  return text;
}

}  // namespace mnemo
