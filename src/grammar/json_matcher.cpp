#include "grammar/json_matcher.h"

#include <cstring>

namespace mnemo::grammar {
namespace {

bool is_hex(uint8_t b) { return is_ascii_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

}  // namespace

bool JsonMatcher::start_value(uint8_t byte) {
  switch (byte) {
    case '{':
    case '[':
      if (depth_ >= kMaxDepth) return false;
      stack_[depth_++] = byte;
      state_ = byte == '{' ? State::kKeyOrClose : State::kValueOrClose;
      return true;
    case '"':
      string_is_key_ = false;
      state_ = State::kString;
      return true;
    case '-':
      state_ = State::kMinus;
      digits_ = 0;
      return true;
    case '0':
      state_ = State::kZero;
      digits_ = 1;
      return true;
    case 't':
    case 'f':
    case 'n':
      literal_ = byte == 't' ? "true" : byte == 'f' ? "false" : "null";
      literal_at_ = 1;
      state_ = State::kLiteral;
      return true;
    default:
      if (byte >= '1' && byte <= '9') {
        state_ = State::kInteger;
        digits_ = 1;
        return true;
      }
      return false;
  }
}

bool JsonMatcher::after_value(uint8_t byte) {
  if (depth_ == 0) return false;  // the document is complete (kDone)
  const uint8_t open = stack_[depth_ - 1];
  if (byte == ',') {
    state_ = open == '{' ? State::kKey : State::kValue;
    return true;
  }
  if ((open == '{' && byte == '}') || (open == '[' && byte == ']')) {
    --depth_;
    return end_value();
  }
  return false;
}

// A number's next byte; a byte that cannot extend it ends it (if it may end there) and is then
// read as what follows the value.
bool JsonMatcher::number(uint8_t byte) {
  // Into the next state, with the digits its part has so far.
  const auto go = [this](State next, uint8_t digits) {
    state_ = next;
    digits_ = digits;
    return true;
  };
  switch (state_) {
    case State::kMinus:
      return byte == '0' ? go(State::kZero, 1) : (byte >= '1' && byte <= '9') ? go(State::kInteger, 1) : false;
    case State::kZero:
    case State::kInteger:
      if (is_ascii_digit(byte) && state_ == State::kInteger) return digit();
      if (byte == '.') return go(State::kDot, 0);
      if (byte == 'e' || byte == 'E') return go(State::kExponentMark, 0);
      break;
    case State::kDot:
      return is_ascii_digit(byte) ? go(State::kFraction, 1) : false;
    case State::kFraction:
      if (is_ascii_digit(byte)) return digit();
      if (byte == 'e' || byte == 'E') return go(State::kExponentMark, 0);
      break;
    case State::kExponentMark:
      if (byte == '+' || byte == '-') return go(State::kExponentSign, 0);
      return is_ascii_digit(byte) ? go(State::kExponent, 1) : false;
    case State::kExponentSign:
      return is_ascii_digit(byte) ? go(State::kExponent, 1) : false;
    case State::kExponent:
      if (is_ascii_digit(byte)) return digit();
      break;
    default:
      return false;
  }
  // The number ends here; the byte belongs to what follows it.
  const JsonMatcher before = *this;
  end_value();
  if (state_ == State::kDone) {
    *this = before;  // a number at the root would end only with the text: not allowed here
    return false;
  }
  whitespace_run_.end();
  if (whitespace(byte) || after_value(byte)) return true;
  *this = before;
  return false;
}

bool JsonMatcher::feed(uint8_t byte) {
  const JsonMatcher before = *this;
  bool ok = false;
  switch (state_) {
    case State::kRoot:
      ok = whitespace(byte) || ((!object_root_ || byte == '{') && start_value(byte));
      break;
    case State::kValue:
      ok = whitespace(byte) || start_value(byte);
      break;
    case State::kKeyOrClose:
    case State::kKey:
      if (byte == '"') {
        string_is_key_ = true;
        state_ = State::kString;
        ok = true;
      } else if (byte == '}' && state_ == State::kKeyOrClose) {
        --depth_;
        ok = end_value();
      } else {
        ok = whitespace(byte);
      }
      break;
    case State::kColon:
      ok = byte == ':' ? (state_ = State::kValue, true) : whitespace(byte);
      break;
    case State::kValueOrClose:
      if (byte == ']') {
        --depth_;
        ok = end_value();
      } else {
        ok = whitespace(byte) || start_value(byte);
      }
      break;
    case State::kAfterValue:
      ok = whitespace(byte) || after_value(byte);
      break;
    case State::kString:
      ok = string_byte(byte);
      break;
    case State::kEscape:
      if (byte == 'u') {
        unicode_left_ = 4;
        state_ = State::kUnicode;
        ok = true;
      } else {
        ok = std::strchr("\"\\/bfnrt", byte) != nullptr && byte != 0;
        if (ok) state_ = State::kString;
      }
      break;
    case State::kUnicode:
      ok = is_hex(byte);
      if (ok && --unicode_left_ == 0) state_ = State::kString;
      break;
    case State::kLiteral:
      ok = literal_[literal_at_] == static_cast<char>(byte);
      if (ok && literal_[++literal_at_] == '\0') end_value();
      break;
    case State::kDone:
      ok = false;  // the model must end here
      break;
    default:
      return number(byte);
  }
  if (!ok) {
    *this = before;
    return false;
  }
  if (!is_json_whitespace(byte)) whitespace_run_.end();
  return true;
}

bool JsonMatcher::string_byte(uint8_t byte) {
  if (utf8_left_ > 0) {
    if (byte < utf8_lo_ || byte > utf8_hi_) return false;
    --utf8_left_;
    utf8_lo_ = 0x80;
    utf8_hi_ = 0xBF;
    return true;
  }
  if (byte == '"') return string_is_key_ ? (state_ = State::kColon, true) : end_value();
  if (byte == '\\') {
    state_ = State::kEscape;
    return true;
  }
  if (byte < 0x80) return byte >= 0x20;
  // A lead byte: how many continuation bytes follow, and the first one's range.
  if (byte >= 0xC2 && byte <= 0xDF) {
    utf8_left_ = 1;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    utf8_left_ = 2;
    if (byte == 0xE0) utf8_lo_ = 0xA0;  // not overlong
    if (byte == 0xED) utf8_hi_ = 0x9F;  // not a surrogate
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    utf8_left_ = 3;
    if (byte == 0xF0) utf8_lo_ = 0x90;
    if (byte == 0xF4) utf8_hi_ = 0x8F;  // not above U+10FFFF
  } else {
    return false;
  }
  return true;
}

}  // namespace mnemo::grammar
