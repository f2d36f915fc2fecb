// A character-level acceptor of JSON text (RFC 8259), one byte at a time, for constrained
// decoding: feed() says whether a byte can continue a valid document, and complete() whether the
// bytes so far are one. Trivially copyable (a fixed stack), so a token mask can try every token
// from a copy. Strings must be valid UTF-8, as JSON text is. Bounded as llama.cpp's schema
// grammars bound JSON, so that a model that loops on blank lines, spaces or digits must still
// end: nesting at most kMaxDepth; whitespace between tokens at most two line breaks then at most
// twenty spaces or tabs (WhitespaceRun); each part of a number (integer, fraction, exponent) at
// most kMaxDigits digits; a root that may be required to be an object.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mnemo::grammar {

inline bool is_json_whitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
inline bool is_ascii_digit(uint8_t b) { return b >= '0' && b <= '9'; }

// A run of whitespace between two JSON tokens, in the shape of llama.cpp's `space` rule
// (json-schema-to-grammar: "" | " " | "\n"{1,2} [ \t]{0,20}): at most two line breaks, each
// "\n" or "\r\n", and after them at most kMaxIndent spaces or tabs; without a line break, one
// space. Pretty-printed and one-line JSON fit it; a model that writes blank line after blank line,
// or spaces and tabs on and on, does not.
struct WhitespaceRun {
  static constexpr uint8_t kMaxLineBreaks = 2;
  static constexpr uint8_t kMaxIndent = 20;

  // Counts `byte` into the run if it is whitespace the run has room for.
  bool take(uint8_t byte) {
    switch (byte) {
      case '\r':
        if (indent > 0 || after_return || line_breaks >= kMaxLineBreaks) return false;
        after_return = true;
        return true;
      case '\n':
        if (indent > 0 || (!after_return && line_breaks >= kMaxLineBreaks)) return false;
        after_return = false;
        ++line_breaks;
        return true;
      case ' ':
      case '\t':
        // Without a line break before it, a single space; after one, the indentation.
        if (after_return || indent >= (line_breaks > 0 ? kMaxIndent : (byte == ' ' ? 1 : 0))) return false;
        ++indent;
        return true;
      default:
        return false;
    }
  }
  // A token other than whitespace ends the run.
  void end() { *this = WhitespaceRun{}; }

  uint8_t line_breaks = 0;
  uint8_t indent = 0;
  bool after_return = false;
};

// Feeds `bytes` one at a time to any matcher (JsonMatcher, SchemaMatcher, SchemaMatcherSet,
// RegexMatcher): false at the first it refuses, the bytes before it taken.
template <class Matcher>
bool feed_each(Matcher& matcher, std::string_view bytes) {
  for (const char c : bytes) {
    if (!matcher.feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

class JsonMatcher {
 public:
  static constexpr int kMaxDepth = 32;
  // llama.cpp's bound (integral-part ::= [0] | [1-9] [0-9]{0,15}, decimal-part ::= [0-9]{1,16});
  // a schema's integer bounds are at most 10^15 in size, so they fit it too.
  static constexpr uint8_t kMaxDigits = 16;

  explicit JsonMatcher(bool object_root = true) : object_root_(object_root) {}

  // False (and no change) if `byte` cannot continue a valid document.
  bool feed(uint8_t byte);
  bool feed(std::string_view bytes) { return feed_each(*this, bytes); }
  // As feed, for a copy the caller drops when it fails (no state kept to undo with).
  bool advance(uint8_t byte) { return feed(byte); }
  // The bytes so far are one whole document (nothing more may follow).
  bool complete() const { return state_ == State::kDone; }
  // Inside a string's content, between characters: any whole UTF-8 text without '"', '\\' or
  // controls continues it.
  bool in_string() const { return state_ == State::kString && utf8_left_ == 0; }
  // A free string takes any number of characters.
  int32_t string_room() const { return INT32_MAX; }
  // Inside a string's content, escapes aside (possibly within a multi-byte character).
  bool in_string_content() const { return state_ == State::kString; }
  // A number is being read and may end here (the next byte then belongs to what follows).
  bool number_may_end() const {
    return state_ == State::kZero || state_ == State::kInteger || state_ == State::kFraction || state_ == State::kExponent;
  }
  // A number is being read (any part of it).
  bool in_number() const { return state_ >= State::kMinus && state_ <= State::kExponent; }

 private:
  enum class State : uint8_t {
    kRoot,            // before the document
    kValue,           // a value expected (after ':' or ',' in an array)
    kKeyOrClose,      // after '{'
    kKey,             // after ',' in an object
    kColon,           // after a key
    kValueOrClose,    // after '['
    kAfterValue,      // ',' or the container's close (or the end, at depth 0)
    kString,
    kEscape,
    kUnicode,         // \uXXXX: unicode_left_ hex digits to come
    kMinus,           // number states
    kZero,
    kInteger,
    kDot,
    kFraction,
    kExponentMark,
    kExponentSign,
    kExponent,
    kLiteral,         // true / false / null: literal_[literal_at_] next
    kDone,
  };

  bool start_value(uint8_t byte);
  bool after_value(uint8_t byte);
  bool number(uint8_t byte);
  bool end_value() {
    state_ = depth_ == 0 ? State::kDone : State::kAfterValue;
    return true;
  }
  bool whitespace(uint8_t byte) { return whitespace_run_.take(byte); }
  // One more digit of the number's current part, if the part has room.
  bool digit() {
    if (digits_ >= kMaxDigits) return false;
    ++digits_;
    return true;
  }

  std::array<uint8_t, kMaxDepth> stack_{};  // '{' or '['
  uint8_t depth_ = 0;
  State state_ = State::kRoot;
  bool string_is_key_ = false;
  bool object_root_ = true;
  uint8_t unicode_left_ = 0;
  // A multi-byte UTF-8 character under way: continuation bytes still to come, and the range the
  // next one must be in (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
  uint8_t utf8_left_ = 0;
  uint8_t utf8_lo_ = 0x80;
  uint8_t utf8_hi_ = 0xBF;
  bool string_byte(uint8_t byte);
  WhitespaceRun whitespace_run_;
  uint8_t digits_ = 0;  // of the number's current part
  uint8_t literal_at_ = 0;
  const char* literal_ = nullptr;
};

}  // namespace mnemo::grammar
