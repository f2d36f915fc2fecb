#include "tokenizer/byte_level.h"

#include <array>
#include <string>

#include "tokenizer/utf8.h"

namespace mnemo::tokenizer {
namespace {

// Codepoints used by the mapping: bytes stand for themselves or for U+0100..U+0143.
constexpr char32_t kMappedCodepointLimit = 0x144;

struct ByteLevelTables {
  std::array<std::string, 256> char_of_byte;
  std::array<int, kMappedCodepointLimit> byte_of_char{};

  ByteLevelTables() {
    byte_of_char.fill(-1);
    auto stands_for_itself = [](int byte) {
      return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
    };
    char32_t next_substitute = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      const char32_t codepoint = stands_for_itself(byte) ? static_cast<char32_t>(byte) : next_substitute++;
      append_utf8(char_of_byte[static_cast<size_t>(byte)], codepoint);
      byte_of_char[codepoint] = byte;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables instance;
  return instance;
}

}  // namespace

std::string_view byte_level_char(uint8_t byte) { return tables().char_of_byte[byte]; }

int byte_level_byte(char32_t codepoint) {
  return codepoint < kMappedCodepointLimit ? tables().byte_of_char[codepoint] : -1;
}

}  // namespace mnemo::tokenizer
