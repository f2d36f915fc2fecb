#include "tokenizer/utf8.h"

#include <unicode/utf8.h>

namespace mnemo::tokenizer {
namespace {

constexpr char32_t kReplacementCharacter = 0xFFFD;

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

std::vector<char32_t> decode_codepoints_lenient(std::string_view text) {
  std::vector<char32_t> codepoints;
  codepoints.reserve(text.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const size_t size = text.size();
  size_t offset = 0;
  while (offset < size) {
    const uint8_t lead = bytes[offset];
    size_t length = 0;
    char32_t value = 0;
    if (lead < 0x80) {
      length = 1;
      value = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      value = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      value = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      value = lead & 0x07;
    }
    // A lone continuation byte or 11111xxx starts nothing (length stays 0).
    bool well_formed = length > 0 && offset + length <= size;
    for (size_t i = 1; well_formed && i < length; ++i) {
      if (!is_continuation(bytes[offset + i])) {
        well_formed = false;
      } else {
        value = (value << 6) | (bytes[offset + i] & 0x3F);
      }
    }
    if (!well_formed) {
      codepoints.push_back(kReplacementCharacter);
      offset += 1;
      continue;
    }
    codepoints.push_back(value > 0x10FFFF ? kReplacementCharacter : value);
    offset += length;
  }
  return codepoints;
}

void append_utf8(std::string& out, char32_t codepoint) {
  if (codepoint < 0x80) {
    out.push_back(static_cast<char>(codepoint));
  } else if (codepoint < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else if (codepoint < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (codepoint >> 12)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((codepoint >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
}

size_t utf8_complete_prefix_length(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto size = static_cast<int32_t>(bytes.size());
  // Only the last three bytes can belong to an unfinished character.
  for (int32_t start = size - 1; start >= 0 && start >= size - 3; --start) {
    if (is_continuation(data[start])) continue;
    int32_t end = start;
    UChar32 codepoint = 0;
    U8_NEXT(data, end, size, codepoint);
    // U8_NEXT consumes the maximal well-formed prefix of an ill-formed sequence: when that runs
    // to the end of the buffer from a valid lead byte, more bytes may complete it.
    const bool truncated = codepoint < 0 && end == size && data[start] >= 0xC2 && data[start] <= 0xF4;
    return truncated ? static_cast<size_t>(start) : bytes.size();
  }
  return bytes.size();
}

std::string sanitize_utf8(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto size = static_cast<int32_t>(bytes.size());
  std::string out;
  out.reserve(bytes.size());
  int32_t offset = 0;
  while (offset < size) {
    const int32_t start = offset;
    UChar32 codepoint = 0;
    U8_NEXT(data, offset, size, codepoint);
    if (codepoint < 0) {
      append_utf8(out, kReplacementCharacter);
    } else {
      out.append(bytes.substr(static_cast<size_t>(start), static_cast<size_t>(offset - start)));
    }
  }
  return out;
}

}  // namespace mnemo::tokenizer
