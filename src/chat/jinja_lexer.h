// Splits a Jinja template into text and tag tokens, and the inside of tags into expression
// tokens. Whitespace control is applied here, as HF's environment configures it:
//   trim_blocks=True    the first newline after a `%}` or `#}` is dropped (`+%}` keeps it);
//   lstrip_blocks=True  spaces and tabs before a `{%` or `{#` at the start of a line are dropped
//                       (`{%+` keeps them); `{{` is never lstripped;
//   `{%-` `{{-` `{#-`   drop all whitespace before the tag; `-%}` `-}}` `-#}` all after it;
//   keep_trailing_newline=False: one newline at the very end of the template is dropped.
// Newlines are normalised to "\n" first, as Jinja does. Comments produce no tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::jinja {

struct SourcePos {
  uint32_t line = 1;
  uint32_t column = 1;  // in bytes, from 1
};

// "line L, column C: message": every template error carries the position it is about.
Error error_at(SourcePos pos, std::string_view message);

enum class TokenKind : uint8_t {
  kText,            // literal template text (already whitespace-controlled)
  kOutputOpen,      // {{
  kOutputClose,     // }}
  kStatementOpen,   // {%
  kStatementClose,  // %}
  kName,            // identifiers and keywords (if, for, in, not, true, ...)
  kString,          // a string literal, escapes resolved
  kInteger,
  kFloat,
  kPunct,           // operators and brackets: + - * / // % ** ~ | . , : ( ) [ ] { } = == != < <= > >=
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // text, name, string value or punctuation
  int64_t integer = 0;
  double number = 0.0;
  SourcePos pos;
};

// Always ends with a kEnd token. Errors: unclosed tags, comments and strings, bad characters,
// integer literals out of range.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace mnemo::jinja
