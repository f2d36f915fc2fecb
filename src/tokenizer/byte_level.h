// GPT-2's byte-level alphabet: every byte is written as a printable character (printable Latin-1
// bytes as themselves, the others as U+0100.. in byte order), so that BPE vocabularies and merges
// are text. Tables are built on first use.
#pragma once

#include <cstdint>
#include <string_view>

namespace mnemo::tokenizer {

// UTF-8 of the character that stands for `byte`.
std::string_view byte_level_char(uint8_t byte);

// The byte `codepoint` stands for, or -1 if it stands for none.
int byte_level_byte(char32_t codepoint);

}  // namespace mnemo::tokenizer
