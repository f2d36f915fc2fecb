#include "grammar/schema_matcher.h"

namespace mnemo::grammar {
namespace {

constexpr int kMaxCandidates = 64;

}  // namespace

bool SchemaMatcher::feed(uint8_t byte) {
  const SchemaMatcher before = *this;
  if (advance(byte)) return true;
  *this = before;
  return false;
}

bool SchemaMatcher::step(uint8_t byte) {
  if (leaf_ != Leaf::kNone) return step_leaf(byte);
  if (done_) return false;
  if (depth_ == 0) return whitespace(byte) || begin_value(root_node_, byte);
  return step_frame(byte);
}

bool SchemaMatcher::begin_value(int32_t index, uint8_t byte) {
  const SchemaNode& n = node(index);
  using Kind = SchemaNode::Kind;
  switch (n.kind) {
    case Kind::kObject:
    case Kind::kArray: {
      if (byte != (n.kind == Kind::kObject ? '{' : '[') || depth_ >= kMaxDepth) return false;
      frames_[static_cast<size_t>(depth_++)] =
          Frame{index, n.kind == Kind::kObject ? Phase::kKeyOrClose : Phase::kItemOrClose, 0, 0, n.kind == Kind::kArray ? n.items : 0};
      return true;
    }
    case Kind::kAnyOf:
      return false;  // a SchemaMatcherSet chooses an alternative first
    case Kind::kAnyObject:
      if (byte != '{') return false;
      leaf_matcher_ = JsonMatcher(/*object_root=*/true);
      leaf_matcher_.feed(byte);
      leaf_ = Leaf::kJson;
      leaf_node_ = index;
      return true;
    case Kind::kEnum: {
      candidates_ = 0;
      for (size_t i = 0; i < n.literals.size() && i < kMaxCandidates; ++i) {
        if (static_cast<uint8_t>(n.literals[i][0]) == byte) candidates_ |= uint64_t{1} << i;
      }
      if (candidates_ == 0) return false;
      matched_ = 1;
      leaf_ = Leaf::kEnum;
      leaf_node_ = index;
      return true;
    }
    case Kind::kString:
    case Kind::kBoolean:
    case Kind::kNull: {
      const uint8_t opening = n.kind == Kind::kString ? '"' : n.kind == Kind::kNull ? 'n' : byte;
      if (byte != opening || (n.kind == Kind::kBoolean && byte != 't' && byte != 'f')) return false;
      break;
    }
    case Kind::kInteger:
    case Kind::kNumber:
      if (byte != '-' && !is_ascii_digit(byte)) return false;
      break;
  }
  leaf_matcher_ = JsonMatcher(/*object_root=*/false);
  if (!leaf_matcher_.feed(byte)) return false;
  chars_ = 0;
  if (n.regex >= 0) {
    const Regex& regex = schema_->regexes[static_cast<size_t>(n.regex)];
    pattern_ = regex.start();
    // An integer's bounds follow its text from its first byte (a string's pattern, its content).
    if (n.kind == Kind::kInteger) {
      pattern_ = regex.step(pattern_, byte);
      if (Regex::empty(pattern_)) return false;
    }
  }
  leaf_ = n.kind == Kind::kInteger ? Leaf::kInteger : n.kind == Kind::kNumber ? Leaf::kNumber : Leaf::kJson;
  leaf_node_ = index;
  if (leaf_ == Leaf::kJson && leaf_matcher_.complete()) return value_done();
  return true;
}

bool SchemaMatcher::step_leaf(uint8_t byte) {
  if (leaf_ == Leaf::kEnum) {
    const SchemaNode& n = node(leaf_node_);
    uint64_t still = 0;
    bool whole = false;
    for (size_t i = 0; i < n.literals.size() && i < kMaxCandidates; ++i) {
      if ((candidates_ >> i & 1) == 0 || static_cast<size_t>(matched_) >= n.literals[i].size()) continue;
      if (static_cast<uint8_t>(n.literals[i][static_cast<size_t>(matched_)]) != byte) continue;
      still |= uint64_t{1} << i;
      whole = whole || n.literals[i].size() == static_cast<size_t>(matched_) + 1;
    }
    if (still == 0) return false;
    candidates_ = still;
    ++matched_;
    if (!whole) return true;
    leaf_ = Leaf::kNone;  // no value is a prefix of another: the one matched is the value
    return value_done();
  }
  if (leaf_ == Leaf::kJson && leaf_matcher_.in_string_content() && !string_content(byte)) return false;
  if (leaf_ == Leaf::kInteger && node(leaf_node_).regex >= 0) return bounded_integer(byte);
  const bool number = leaf_ == Leaf::kNumber || leaf_ == Leaf::kInteger;
  if (leaf_ == Leaf::kInteger && (byte == '.' || byte == 'e' || byte == 'E')) {
    if (!leaf_matcher_.number_may_end()) return false;
  } else if (leaf_matcher_.feed(byte)) {
    if (!leaf_matcher_.complete()) return true;
    leaf_ = Leaf::kNone;
    return value_done();
  }
  // A number ends at the first byte that cannot extend it; that byte belongs to what follows.
  if (!number || !leaf_matcher_.number_may_end()) return false;
  leaf_ = Leaf::kNone;
  return value_done() && step(byte);
}

bool SchemaMatcher::bounded_integer(uint8_t byte) {
  const Regex& bounds = schema_->regexes[static_cast<size_t>(node(leaf_node_).regex)];
  const Regex::StateSet next = bounds.step(pattern_, byte);
  if (!Regex::empty(next) && leaf_matcher_.feed(byte)) {
    pattern_ = next;
    if (!leaf_matcher_.complete()) return true;
    if (!bounds.accepts(pattern_)) return false;
    leaf_ = Leaf::kNone;
    return value_done();
  }
  // The byte does not extend the integer: it ends here if it is within its bounds, and the byte
  // belongs to what follows.
  if (!leaf_matcher_.number_may_end() || !bounds.accepts(pattern_)) return false;
  leaf_ = Leaf::kNone;
  return value_done() && step(byte);
}

bool SchemaMatcher::string_content(uint8_t byte) {
  const SchemaNode& n = node(leaf_node_);
  if (n.kind != SchemaNode::Kind::kString) return true;
  const Regex* pattern = n.regex >= 0 ? &schema_->regexes[static_cast<size_t>(n.regex)] : nullptr;
  if (byte == '"') return chars_ >= n.min_length && (pattern == nullptr || pattern->accepts(pattern_));
  if (byte == '\\' && pattern != nullptr) return false;  // a patterned string is written without escapes
  if ((byte & 0xC0) != 0x80 && ++chars_ > n.max_length) return false;  // a new character (an escape counts once)
  if (pattern == nullptr) return true;
  const Regex::StateSet next = pattern->step(pattern_, byte);
  if (Regex::empty(next)) return false;
  pattern_ = next;
  return true;
}

bool SchemaMatcher::string_has_pattern() const {
  const SchemaNode& n = node(leaf_node_);
  return n.kind == SchemaNode::Kind::kString && n.regex >= 0;
}

int32_t SchemaMatcher::string_room() const {
  const SchemaNode& n = node(leaf_node_);
  if (n.kind != SchemaNode::Kind::kString || n.max_length == INT32_MAX) return INT32_MAX;
  return n.max_length - chars_;
}

bool SchemaMatcher::value_done() {
  if (depth_ == 0) {
    done_ = true;
    return true;
  }
  Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  if (node(f.node).kind == SchemaNode::Kind::kObject) {
    f.phase = Phase::kAfterProperty;
  } else {
    ++f.next;
    f.phase = Phase::kAfterItem;
    f.value_node = node(f.node).items;  // an anyOf chosen for this item is chosen again for the next
  }
  return true;
}

int32_t SchemaMatcher::next_value_node() const {
  if (done_ || leaf_ != Leaf::kNone) return -1;
  if (depth_ == 0) return root_node_;
  const Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  const bool value_next = f.phase == Phase::kValue || f.phase == Phase::kItemOrClose || f.phase == Phase::kItem;
  return value_next ? f.value_node : -1;
}

void SchemaMatcher::choose(int32_t alternative) {
  if (depth_ == 0) {
    root_node_ = alternative;
  } else {
    frames_[static_cast<size_t>(depth_ - 1)].value_node = alternative;
  }
}

bool SchemaMatcher::may_close_object(const Frame& f) const {
  const auto& properties = node(f.node).properties;
  for (size_t i = 0; i < properties.size(); ++i) {
    if (properties[i].required && (f.seen >> i & 1) == 0) return false;
  }
  return true;
}

bool SchemaMatcher::unseen_left(const Frame& f) const {
  const size_t n = node(f.node).properties.size();
  const uint64_t all = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  return (f.seen & all) != all;
}

// After a key's opening quote: any property not written yet.
bool SchemaMatcher::begin_key() {
  const Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  const size_t n = node(f.node).properties.size();
  const uint64_t all = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  candidates_ = all & ~f.seen;
  matched_ = 1;  // the quote
  return candidates_ != 0;
}

bool SchemaMatcher::key_byte(uint8_t byte) {
  Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  const auto& properties = node(f.node).properties;
  uint64_t still = 0;
  for (size_t i = 0; i < properties.size() && i < kMaxCandidates; ++i) {
    if ((candidates_ >> i & 1) == 0) continue;
    const std::string& key = properties[i].key;
    if (static_cast<size_t>(matched_) >= key.size() || static_cast<uint8_t>(key[static_cast<size_t>(matched_)]) != byte) continue;
    still |= uint64_t{1} << i;
    if (key.size() == static_cast<size_t>(matched_) + 1) {  // the closing quote: this key (keys are prefix-free)
      f.seen |= uint64_t{1} << i;
      f.value_node = properties[i].node;
      f.phase = Phase::kColon;
      return true;
    }
  }
  if (still == 0) return false;
  candidates_ = still;
  ++matched_;
  return true;
}

bool SchemaMatcher::step_frame(uint8_t byte) {
  Frame& f = frames_[static_cast<size_t>(depth_ - 1)];
  const SchemaNode& n = node(f.node);
  const auto close = [this] {
    --depth_;
    return value_done();
  };
  switch (f.phase) {
    case Phase::kKeyOrClose:
    case Phase::kKey:
      if (byte == '"') {
        f.phase = Phase::kInKey;
        return begin_key();
      }
      if (byte == '}' && f.phase == Phase::kKeyOrClose && may_close_object(f)) return close();
      return whitespace(byte);
    case Phase::kInKey:
      return key_byte(byte);
    case Phase::kColon:
      if (byte == ':') {
        f.phase = Phase::kValue;
        return true;
      }
      return whitespace(byte);
    case Phase::kValue:
      return whitespace(byte) || begin_value(f.value_node, byte);
    case Phase::kAfterProperty:
      if (byte == ',' && unseen_left(f)) {
        f.phase = Phase::kKey;
        return true;
      }
      if (byte == '}' && may_close_object(f)) return close();
      return whitespace(byte);
    case Phase::kItemOrClose:
      if (byte == ']' && n.min_items == 0) return close();
      return whitespace(byte) || (n.max_items > 0 && begin_value(f.value_node, byte));
    case Phase::kItem:
      return whitespace(byte) || begin_value(f.value_node, byte);
    case Phase::kAfterItem:
      if (byte == ',' && f.next < n.max_items) {
        f.phase = Phase::kItem;
        return true;
      }
      if (byte == ']' && f.next >= n.min_items) return close();
      return whitespace(byte);
  }
  return false;
}

}  // namespace mnemo::grammar
