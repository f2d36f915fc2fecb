#include "chat/jinja_text.h"

#include <algorithm>

namespace mnemo::jinja {

namespace {

// Length of the UTF-8 sequence starting at text[i]; 1 for a byte that does not start a valid one.
size_t sequence_length(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  size_t length = 1;
  if (lead >= 0xF0 && lead <= 0xF4) length = 4;
  else if (lead >= 0xE0) length = 3;
  else if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  if (lead >= 0xF5 || length == 1 || i + length > text.size()) return 1;
  for (size_t k = 1; k < length; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 1;
  }
  return length;
}

// Python's str.isspace() characters, as UTF-8: ASCII whitespace, the information separators
// 0x1c-0x1f, and the Unicode spaces (NEL, NBSP, U+1680, U+2000-U+200A, U+2028/9, U+202F,
// U+205F, U+3000). Returns the byte length of the whitespace character at text[i], or 0.
size_t whitespace_length(std::string_view text, size_t i) {
  const auto byte = static_cast<unsigned char>(text[i]);
  if (byte == ' ' || (byte >= 0x09 && byte <= 0x0D) || (byte >= 0x1C && byte <= 0x1F)) return 1;
  const size_t length = sequence_length(text, i);
  if (length == 1) return 0;
  const std::string_view c = text.substr(i, length);
  if (c == "\xC2\x85" || c == "\xC2\xA0" || c == "\xE1\x9A\x80" || c == "\xE2\x80\xA8" || c == "\xE2\x80\xA9" ||
      c == "\xE2\x80\xAF" || c == "\xE2\x81\x9F" || c == "\xE3\x80\x80") {
    return length;
  }
  if (length == 3 && c[0] == '\xE2' && c[1] == '\x80' && static_cast<unsigned char>(c[2]) >= 0x80 &&
      static_cast<unsigned char>(c[2]) <= 0x8A) {
    return length;  // U+2000..U+200A
  }
  return 0;
}

// Length of the character at text[i] if it is whitespace (chars unset) or one of `chars`, else 0.
size_t strippable_length(std::string_view text, size_t i, const std::optional<std::string_view>& chars) {
  if (!chars) return whitespace_length(text, i);
  const size_t length = sequence_length(text, i);
  const std::string_view c = text.substr(i, length);
  for (size_t k = 0; k < chars->size(); k += sequence_length(*chars, k)) {
    if (chars->substr(k, sequence_length(*chars, k)) == c) return length;
  }
  return 0;
}

char upper_ascii(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_alpha_ascii(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

std::vector<size_t> char_offsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size(); i += sequence_length(text, i)) offsets.push_back(i);
  offsets.push_back(text.size());
  return offsets;
}

size_t char_count(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size(); i += sequence_length(text, i)) ++count;
  return count;
}

std::string_view strip(std::string_view text, const std::optional<std::string_view>& chars, bool left, bool right) {
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end) {
      const size_t length = strippable_length(text, begin, chars);
      if (length == 0) break;
      begin += length;
    }
  }
  if (right) {
    // Walk forward to find the last character that is not strippable.
    size_t keep_end = begin;
    for (size_t i = begin; i < end; i += sequence_length(text, i)) {
      if (strippable_length(text, i, chars) == 0) keep_end = i + sequence_length(text, i);
    }
    end = keep_end;
  }
  return text.substr(begin, end - begin);
}

std::vector<std::string> split(std::string_view text, const std::optional<std::string_view>& separator, int64_t max_splits) {
  std::vector<std::string> parts;
  if (separator) {
    size_t start = 0;
    while (max_splits < 0 || static_cast<int64_t>(parts.size()) < max_splits) {
      const size_t found = text.find(*separator, start);
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, found - start));
      start = found + separator->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && whitespace_length(text, i) > 0) i += whitespace_length(text, i);
    if (i >= text.size()) break;
    if (max_splits >= 0 && static_cast<int64_t>(parts.size()) == max_splits) {
      parts.emplace_back(strip(text.substr(i), std::nullopt, false, true));
      break;
    }
    const size_t start = i;
    while (i < text.size() && whitespace_length(text, i) == 0) i += sequence_length(text, i);
    parts.emplace_back(text.substr(start, i - start));
  }
  return parts;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n' || text[i] == '\r') {
      lines.emplace_back(text.substr(start, i - start));
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < text.size()) lines.emplace_back(text.substr(start));
  return lines;
}

size_t count_replacements(std::string_view text, std::string_view old_text, int64_t count) {
  size_t found_count = 0;
  if (old_text.empty()) {
    found_count = char_count(text) + 1;
  } else {
    for (size_t at = text.find(old_text); at != std::string_view::npos; at = text.find(old_text, at + old_text.size())) {
      ++found_count;
    }
  }
  return count < 0 ? found_count : std::min(found_count, static_cast<size_t>(count));
}

std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string result;
  int64_t replaced = 0;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    const std::vector<size_t> offsets = char_offsets(text);
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || replaced < count) {
        result.append(new_text);
        ++replaced;
      }
      result.append(text.substr(offsets[k], offsets[k + 1] - offsets[k]));
    }
    if (count < 0 || replaced < count) result.append(new_text);
    return result;
  }
  size_t start = 0;
  while (count < 0 || replaced < count) {
    const size_t found = text.find(old_text, start);
    if (found == std::string_view::npos) break;
    result.append(text.substr(start, found - start));
    result.append(new_text);
    start = found + old_text.size();
    ++replaced;
  }
  result.append(text.substr(start));
  return result;
}

std::string to_upper(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(), upper_ascii);
  return result;
}

std::string to_lower(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(), lower_ascii);
  return result;
}

std::string capitalize(std::string_view text) {
  std::string result = to_lower(text);
  if (!result.empty()) result[0] = upper_ascii(result[0]);
  return result;
}

std::string title_case(std::string_view text) {
  std::string result(text);
  bool word_start = true;
  for (char& c : result) {
    c = word_start ? upper_ascii(c) : lower_ascii(c);
    word_start = !is_alpha_ascii(c);
  }
  return result;
}

}  // namespace mnemo::jinja
