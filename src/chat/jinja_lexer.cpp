#include "chat/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

namespace mnemo::jinja {

Error error_at(SourcePos pos, std::string_view message) {
  return make_error("line {}, column {}: {}", pos.line, pos.column, message);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
char closing_bracket(char open) { return open == '(' ? ')' : (open == '[' ? ']' : '}'); }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(uint32_t code_point, std::string* out) {
  if (code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) code_point = 0xFFFD;
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

// "\r\n" and "\r" become "\n"; one final newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text.push_back(source[i]);
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      const size_t open = find_tag_open(pos_);
      if (open == std::string::npos) {
        emit_text(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, open - pos_);
      const char tag = src_[open + 1];
      const char sign = (open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+')) ? src_[open + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && tag != '{') {
        lstrip_block_indent(&text);
      }
      emit_text(std::move(text), pos_);
      pos_ = open + 2 + (sign != '\0' ? 1 : 0);
      if (tag == '#') {
        MNEMO_RETURN_IF_ERROR(lex_comment(open));
      } else {
        MNEMO_RETURN_IF_ERROR(lex_tag(open, tag));
      }
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.pos = pos_of(src_.size());
    tokens_.push_back(std::move(end));
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    const auto next_line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(next_line - line_starts_.begin());
    return SourcePos{static_cast<uint32_t>(line), static_cast<uint32_t>(offset - line_starts_[line - 1] + 1)};
  }

  size_t find_tag_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // lstrip_blocks: indentation between the start of a line and a block or comment tag goes.
  void lstrip_block_indent(std::string* text) const {
    const size_t line_start = text->rfind('\n') == std::string::npos ? 0 : text->rfind('\n') + 1;
    if (line_start == 0 && !line_starting_) return;
    if (line_start == text->size()) return;
    for (size_t i = line_start; i < text->size(); ++i) {
      if (!is_space((*text)[i])) return;
    }
    text->resize(line_start);
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    Token token;
    token.kind = TokenKind::kText;
    token.text = std::move(text);
    token.pos = pos_of(offset);
    tokens_.push_back(std::move(token));
  }

  void push(TokenKind kind, std::string text, size_t offset) {
    Token token;
    token.kind = kind;
    token.text = std::move(text);
    token.pos = pos_of(offset);
    tokens_.push_back(std::move(token));
  }

  // After a closing tag: '-' eats all following whitespace; a plain block or comment end eats
  // one newline (trim_blocks); '+' keeps everything.
  void after_close(char sign, bool is_block) {
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    } else if (sign == '\0' && is_block && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  Status lex_comment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) return error_at(pos_of(open), "unclosed comment '{#'");
    char sign = '\0';
    if (close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    pos_ = close + 2;
    after_close(sign, /*is_block=*/true);
    return ok_status();
  }

  Status lex_tag(size_t open, char tag) {
    const bool is_block = tag == '%';
    const char* closer = is_block ? "%}" : "}}";
    push(is_block ? TokenKind::kStatementOpen : TokenKind::kOutputOpen, is_block ? "{%" : "{{", open);
    std::vector<size_t> open_brackets;  // offsets of unclosed ( [ {
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) {
        return error_at(pos_of(open), fmt::format("unclosed tag '{}': missing '{}'", is_block ? "{%" : "{{", closer));
      }
      if (open_brackets.empty()) {
        char sign = '\0';
        size_t closer_at = std::string::npos;
        if (src_.compare(pos_, 2, closer) == 0) {
          closer_at = pos_;
        } else if ((src_[pos_] == '-' || (src_[pos_] == '+' && is_block)) && src_.compare(pos_ + 1, 2, closer) == 0) {
          sign = src_[pos_];
          closer_at = pos_ + 1;
        }
        if (closer_at != std::string::npos) {
          push(is_block ? TokenKind::kStatementClose : TokenKind::kOutputClose, closer, closer_at);
          pos_ = closer_at + 2;
          after_close(sign, is_block);
          return ok_status();
        }
      }
      const char c = src_[pos_];
      if (is_name_start(c)) {
        const size_t start = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        push(TokenKind::kName, src_.substr(start, pos_ - start), start);
      } else if (is_digit(c)) {
        MNEMO_RETURN_IF_ERROR(lex_number());
      } else if (c == '\'' || c == '"') {
        MNEMO_RETURN_IF_ERROR(lex_string());
      } else {
        MNEMO_RETURN_IF_ERROR(lex_punct(&open_brackets));
      }
    }
  }

  Status lex_number() {
    const size_t start = pos_;
    while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t exponent = pos_ + 1;
      if (exponent < src_.size() && (src_[exponent] == '+' || src_[exponent] == '-')) ++exponent;
      if (exponent < src_.size() && is_digit(src_[exponent])) {
        is_float = true;
        pos_ = exponent;
        while (pos_ < src_.size() && is_digit(src_[pos_])) ++pos_;
      }
    }
    Token token;
    token.pos = pos_of(start);
    token.text = src_.substr(start, pos_ - start);
    const char* first = src_.data() + start;
    const char* last = src_.data() + pos_;
    if (is_float) {
      token.kind = TokenKind::kFloat;
      auto [end, error] = std::from_chars(first, last, token.number);
      if (error != std::errc() || end != last) return error_at(token.pos, fmt::format("bad number '{}'", token.text));
    } else {
      token.kind = TokenKind::kInteger;
      auto [end, error] = std::from_chars(first, last, token.integer);
      if (error != std::errc() || end != last) {
        return error_at(token.pos, fmt::format("integer '{}' out of range", token.text));
      }
    }
    tokens_.push_back(std::move(token));
    return ok_status();
  }

  // Python string escapes; an unknown escape keeps its backslash, as Python does.
  Status lex_string() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) return error_at(pos_of(start), "unclosed string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) return error_at(pos_of(start), "unclosed string literal");
      const char escaped = src_[pos_++];
      switch (escaped) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case 'a': value.push_back('\a'); break;
        case 'x':
        case 'u':
        case 'U': {
          const int digits = escaped == 'x' ? 2 : (escaped == 'u' ? 4 : 8);
          uint32_t code_point = 0;
          for (int i = 0; i < digits; ++i) {
            const int digit = pos_ < src_.size() ? hex_digit(src_[pos_]) : -1;
            if (digit < 0) return error_at(pos_of(pos_), fmt::format("bad '\\{}' escape in string", escaped));
            code_point = (code_point << 4) | static_cast<uint32_t>(digit);
            ++pos_;
          }
          append_utf8(code_point, &value);
          break;
        }
        default:
          if (escaped >= '0' && escaped <= '7') {
            uint32_t code_point = static_cast<uint32_t>(escaped - '0');
            for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i) {
              code_point = code_point * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            }
            append_utf8(code_point, &value);
          } else {
            value.push_back('\\');
            value.push_back(escaped);
          }
      }
    }
    push(TokenKind::kString, std::move(value), start);
    return ok_status();
  }

  // Brackets must balance inside a tag (as Jinja's lexer checks), so that "}}" inside a dict
  // literal does not end the tag, and "{{ (1 }}" names the unclosed bracket.
  Status lex_punct(std::vector<size_t>* open_brackets) {
    static constexpr const char* kTwoCharOperators[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwoCharOperators) {
      if (src_.compare(pos_, 2, op) == 0) {
        push(TokenKind::kPunct, op, pos_);
        pos_ += 2;
        return ok_status();
      }
    }
    const char c = src_[pos_];
    if (std::strchr("+-*/%~|.,:()[]{}=<>", c) == nullptr || c == '\0') {
      const auto byte = static_cast<unsigned char>(c);
      const std::string shown = byte >= 0x21 && byte < 0x7f ? fmt::format("'{}'", c) : fmt::format("byte 0x{:02x}", byte);
      return error_at(pos_of(pos_), fmt::format("unexpected character {} in tag", shown));
    }
    if (c == '(' || c == '[' || c == '{') open_brackets->push_back(pos_);
    if (c == ')' || c == ']' || c == '}') {
      const char expected = open_brackets->empty() ? '\0' : closing_bracket(src_[open_brackets->back()]);
      if (c != expected) {
        if (open_brackets->empty()) return error_at(pos_of(pos_), fmt::format("unexpected '{}'", c));
        const SourcePos opened = pos_of(open_brackets->back());
        return error_at(pos_of(pos_), fmt::format("unexpected '{}': '{}' at line {}, column {} is not closed", c,
                                                  src_[open_brackets->back()], opened.line, opened.column));
      }
      open_brackets->pop_back();
    }
    push(TokenKind::kPunct, std::string(1, c), pos_);
    ++pos_;
    return ok_status();
  }

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last tag ended a line (Jinja's lstrip rule needs it)
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace mnemo::jinja
