// String helpers with Python's semantics over UTF-8: Python strings are sequences of code
// points, so len(), indexing and slicing count code points, not bytes. Invalid UTF-8 (which the
// server should not pass, but a fuzzer will) is treated one byte per character.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::jinja {

// Byte offsets where each character starts, followed by text.size().
std::vector<size_t> char_offsets(std::string_view text);
size_t char_count(std::string_view text);

// str.strip()/lstrip()/rstrip(): without `chars`, Python's whitespace (ASCII and the Unicode
// spaces); with `chars`, any of those characters.
std::string_view strip(std::string_view text, const std::optional<std::string_view>& chars, bool left, bool right);

// str.split(): without a separator, runs of whitespace separate and empty parts are dropped.
// max_splits < 0 means no limit.
std::vector<std::string> split(std::string_view text, const std::optional<std::string_view>& separator, int64_t max_splits);
std::vector<std::string> split_lines(std::string_view text);

// How many replacements str.replace(old, new, count) makes (before building the result).
size_t count_replacements(std::string_view text, std::string_view old_text, int64_t count);
// str.replace(old, new, count): count < 0 replaces all; an empty `old` inserts between characters.
std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count);

// Case mappings are ASCII-only (non-ASCII characters pass unchanged).
std::string to_upper(std::string_view text);
std::string to_lower(std::string_view text);
std::string capitalize(std::string_view text);  // first character upper, the rest lower
std::string title_case(std::string_view text);  // each word capitalised

}  // namespace mnemo::jinja
