// UTF-8 helpers shared by the tokenizers and the detokenizer.
//
// Two different notions of "a character" coexist on purpose: the tokenizers split text the way
// llama.cpp does (a lead byte alone decides the sequence length, and malformed input is still
// tokenised byte by byte), while text handed to users is checked strictly (ICU's U8_NEXT:
// overlongs, surrogates and truncated sequences are ill-formed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::tokenizer {

// Bytes in the sequence that `lead` starts, from its high nibble alone (1 for continuation and
// invalid bytes), as llama.cpp splits text into symbols.
inline size_t utf8_sequence_length(char lead) {
  const auto high_nibble = static_cast<uint8_t>(static_cast<uint8_t>(lead) >> 4);
  if (high_nibble < 0xC) return 1;
  if (high_nibble < 0xE) return 2;
  return high_nibble == 0xE ? 3 : 4;
}

// Bytes in the well-formed sequence `lead` may start (2 to 4; 1 for ASCII), 0 for a byte that
// starts none: a continuation byte, C0, C1 (only overlong forms), F5..FF (past U+10FFFF). The
// strict counterpart of utf8_sequence_length, for byte-by-byte matchers of user text.
inline int utf8_strict_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return lead < 0xF5 ? 4 : 0;
}

// Codepoints of `text` decoded leniently as llama.cpp's pre-tokenizer does: the lead byte's bit
// pattern decides the length, continuation bytes must be 10xxxxxx, overlong forms and surrogates
// are accepted; a byte that starts no well-formed sequence becomes U+FFFD and decoding resumes at
// the next byte. Values above U+10FFFF also become U+FFFD (llama.cpp would abort on them).
std::vector<char32_t> decode_codepoints_lenient(std::string_view text);

void append_utf8(std::string& out, char32_t codepoint);

// Length of the longest prefix of `bytes` that does not end inside an incomplete (truncated but so
// far well-formed) UTF-8 sequence: the rest may still become a character when more bytes arrive.
size_t utf8_complete_prefix_length(std::string_view bytes);

// `bytes` with every ill-formed subsequence replaced by U+FFFD (maximal-subpart substitution).
std::string sanitize_utf8(std::string_view bytes);

}  // namespace mnemo::tokenizer
