// A character-level acceptor of JSON text (RFC 8259), one byte at a time, for constrained
// decoding: feed() says whether a byte can continue a valid document, and complete() whether the
// bytes so far are one. Trivially copyable (a fixed stack), so a token mask can try every token
// from a copy. Strings must be valid UTF-8, as JSON text is. Bounded: nesting at most kMaxDepth, at most kMaxWhitespace whitespace bytes in a
// row (a model that loops on newlines must still end), a root that may be required to be an object.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mnemo::grammar {

inline bool is_json_whitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
inline bool is_ascii_digit(uint8_t b) { return b >= '0' && b <= '9'; }

// A bounded run of whitespace: counts `byte` into `run` if it is whitespace and the run has room.
inline bool bounded_whitespace(uint8_t byte, uint8_t& run, int max_run) {
  if (!is_json_whitespace(byte) || run >= max_run) return false;
  ++run;
  return true;
}

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
  static constexpr int kMaxWhitespace = 16;

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
  bool whitespace(uint8_t byte) { return bounded_whitespace(byte, whitespace_run_, kMaxWhitespace); }

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
  uint8_t whitespace_run_ = 0;
  uint8_t literal_at_ = 0;
  const char* literal_ = nullptr;
};

}  // namespace mnemo::grammar
