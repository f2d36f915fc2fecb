// A byte-level acceptor of the JSON documents a compiled schema (grammar/json_schema.h) allows:
// an object's properties in any order, each at most once, the required ones all present, each
// value of its node's kind, enums one of
// their values, arrays within their item counts. Whitespace between tokens as JSON allows it,
// in runs bounded as JsonMatcher bounds them (WhitespaceRun), and numbers' digits as it bounds
// them. Like JsonMatcher, trivially copyable: a token mask tries tokens on copies.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "grammar/json_matcher.h"
#include "grammar/json_schema.h"

namespace mnemo::grammar {

class SchemaMatcher {
 public:
  static constexpr int kMaxDepth = 18;

  explicit SchemaMatcher(const CompiledSchema* schema) : schema_(schema) {}

  bool feed(uint8_t byte);
  bool feed(std::string_view bytes) { return feed_each(*this, bytes); }
  // As feed, for a copy the caller drops when it fails: no copy is kept to undo with.
  bool advance(uint8_t byte) {
    if (!step(byte)) return false;
    if (!is_json_whitespace(byte)) whitespace_run_.end();
    return true;
  }
  bool complete() const { return done_; }
  // Inside a free string value's content (not a key, not an enum value).
  // Inside a string that takes plain content (whole UTF-8 without quote, backslash or control)
  // up to string_room() characters: not a string with a pattern.
  bool in_string() const { return leaf_ == Leaf::kJson && leaf_matcher_.in_string() && !string_has_pattern(); }
  int32_t string_room() const;

  // anyOf (a SchemaMatcherSet drives these): the node of the value that begins next, or -1 when
  // no value begins next; choose() makes an alternative of that node the one to match.
  int32_t next_value_node() const;
  void choose(int32_t alternative);
  const CompiledSchema* schema() const { return schema_; }

 private:
  enum class Phase : uint8_t { kKeyOrClose, kKey, kInKey, kColon, kValue, kAfterProperty, kItemOrClose, kItem, kAfterItem };
  enum class Leaf : uint8_t { kNone, kJson, kNumber, kInteger, kEnum };
  struct Frame {
    int32_t node = 0;
    Phase phase = Phase::kKeyOrClose;
    int32_t next = 0;        // array: items so far
    uint64_t seen = 0;       // object: the properties written (bit i: properties[i])
    int32_t value_node = 0;  // the node of the value that comes (a property's, or an array's item)
  };

  const SchemaNode& node(int32_t index) const { return schema_->nodes[static_cast<size_t>(index)]; }
  bool step(uint8_t byte);
  bool step_frame(uint8_t byte);
  bool step_leaf(uint8_t byte);
  bool begin_value(int32_t node, uint8_t byte);
  bool value_done();
  bool whitespace(uint8_t byte) { return whitespace_run_.take(byte); }
  bool begin_key();
  bool key_byte(uint8_t byte);
  // A string value's length and pattern, checked on each byte of its content.
  bool string_content(uint8_t byte);
  // A byte of an integer with bounds: its digits follow the bounds' pattern, and it ends only
  // within them.
  bool bounded_integer(uint8_t byte);
  bool string_has_pattern() const;
  bool may_close_object(const Frame& f) const;
  bool unseen_left(const Frame& f) const;

  const CompiledSchema* schema_;
  std::array<Frame, kMaxDepth> frames_{};
  int32_t depth_ = 0;
  int32_t root_node_ = 0;
  bool done_ = false;
  WhitespaceRun whitespace_run_;
  Leaf leaf_ = Leaf::kNone;
  JsonMatcher leaf_matcher_{/*object_root=*/false};  // a string, boolean, null or number value
  int32_t leaf_node_ = 0;
  uint64_t candidates_ = 0;  // enum values or keys still possible (bit i: the i-th)
  int32_t matched_ = 0;      // bytes of the enum value or key matched so far
  int32_t chars_ = 0;        // characters of the string value so far
  Regex::StateSet pattern_{};  // the string value's pattern's states
};

}  // namespace mnemo::grammar
