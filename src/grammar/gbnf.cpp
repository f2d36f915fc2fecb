#include "grammar/gbnf.h"

#include <string>
#include <unordered_map>

#include <fmt/format.h>
#include <unicode/utf8.h>

namespace mnemo::grammar {

// Parses GBNF text into rules of alternatives of items, then lays them out as elements.
class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Result<Gbnf> run() {
    skip_space(/*newlines=*/true);
    while (ok() && pos_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    if (!ok()) return make_error("grammar: {}", error_);
    for (const auto& [name, id] : ids_) {
      if (!defined_[id]) return make_error("grammar: rule '{}' is used but not defined", name);
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) return make_error("grammar: no 'root' rule (the whole output)");
    MNEMO_RETURN_IF_ERROR(refuse_left_recursion());
    return layout(root->second);
  }

 private:
  struct Item {
    bool is_rule = false;
    uint32_t rule = 0;
    bool negated = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
  };
  using Sequence = std::vector<Item>;
  using Alternatives = std::vector<Sequence>;

  bool ok() const { return error_.empty(); }
  void fail(std::string what) {
    if (error_.empty()) error_ = fmt::format("{} (at byte {})", what, pos_);
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  uint32_t rule_id(const std::string& name) {
    const auto [it, added] = ids_.emplace(name, static_cast<uint32_t>(rules_.size()));
    if (added) new_rule(name);
    return it->second;
  }
  uint32_t new_rule(const std::string& origin) {
    rules_.emplace_back();
    defined_.push_back(false);
    origins_.push_back(origin);
    return static_cast<uint32_t>(rules_.size() - 1);
  }
  // A rule made for a group or a repetition inside `current_`'s definition.
  uint32_t generated(Alternatives alternatives) {
    const uint32_t id = new_rule(origins_[current_]);
    defined_[id] = true;
    for (const Sequence& s : alternatives) count(s.size() + 1);
    rules_[id] = std::move(alternatives);
    return id;
  }
  void count(size_t n) {
    items_ += n;
    if (items_ > Gbnf::kMaxElements) fail(fmt::format("more than {} elements", Gbnf::kMaxElements));
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  void parse_rule() {
    const std::string name = parse_name();
    if (name.empty()) return fail("a rule name was expected");
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") return fail(fmt::format("'::=' was expected after '{}'", name));
    pos_ += 3;
    skip_space(true);
    current_ = rule_id(name);
    if (defined_[current_]) return fail(fmt::format("rule '{}' is defined twice", name));
    defined_[current_] = true;
    Alternatives alternatives = parse_alternatives(0);
    for (const Sequence& s : alternatives) count(s.size() + 1);
    rules_[current_] = std::move(alternatives);
    skip_space(false);
    if (ok() && !at_end() && peek() != '\n' && peek() != '\r') fail(fmt::format("unexpected '{}'", peek()));
  }

  Alternatives parse_alternatives(int depth) {
    Alternatives alternatives{parse_sequence(depth)};
    while (ok() && peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(depth));
    }
    return alternatives;
  }

  Sequence parse_sequence(int depth) {
    Sequence items;
    while (ok() && !at_end()) {
      const char c = peek();
      if (c == '"') {
        ++pos_;
        parse_literal(items);
      } else if (c == '[') {
        ++pos_;
        items.push_back(parse_class());
      } else if (c == '.') {
        ++pos_;
        items.push_back(Item{false, 0, true, {}});  // nothing excluded: any character
      } else if (c == '(') {
        if (depth >= Gbnf::kMaxNesting) {
          fail(fmt::format("groups nested more than {} deep", Gbnf::kMaxNesting));
          break;
        }
        ++pos_;
        skip_space(true);
        Alternatives inner = parse_alternatives(depth + 1);
        if (ok() && peek() != ')') fail("')' was expected");
        ++pos_;
        items.push_back(Item{true, generated(std::move(inner)), false, {}});
      } else if (is_name_char(c)) {
        items.push_back(Item{true, rule_id(parse_name()), false, {}});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) {
          fail(fmt::format("'{}' follows nothing", c));
          break;
        }
        repeat(items);
      } else {
        break;  // '|', ')', a newline at the top level, or an error the caller reports
      }
      skip_space(/*newlines=*/depth > 0);
    }
    return items;
  }

  // The code point at pos_ of the grammar's UTF-8, or an escape.
  uint32_t parse_char() {
    const auto byte = static_cast<uint8_t>(peek());
    if (byte == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '/': case '^': return static_cast<uint8_t>(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: fail(fmt::format("unknown escape '\\{}'", e)); return 0;
      }
    }
    // ICU's strict decoding: overlong forms, surrogates and truncated sequences are refused.
    if (at_end()) {
      fail("a character was expected");
      return 0;
    }
    UChar32 cp = 0;
    int32_t at = static_cast<int32_t>(pos_);
    U8_NEXT(reinterpret_cast<const uint8_t*>(text_.data()), at, static_cast<int32_t>(text_.size()), cp);
    pos_ = static_cast<size_t>(at);
    if (cp < 0) {
      fail("the grammar is not valid UTF-8");
      return 0;
    }
    return static_cast<uint32_t>(cp);
  }
  uint32_t parse_hex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) {
        fail("a hexadecimal escape needs " + std::to_string(digits) + " digits");
        return 0;
      }
      value = value << 4 | static_cast<uint32_t>(d);
    }
    if (value > 0x10FFFF) fail("an escape beyond U+10FFFF");
    return value;
  }

  void parse_literal(Sequence& items) {
    while (ok() && peek() != '"') {
      if (at_end()) return fail("an unterminated string");
      const uint32_t cp = parse_char();
      items.push_back(Item{false, 0, false, {{cp, cp}}});
    }
    ++pos_;
  }

  Item parse_class() {
    Item item;
    if (peek() == '^') {
      item.negated = true;
      ++pos_;
    }
    while (ok() && peek() != ']') {
      if (at_end()) {
        fail("an unterminated character class");
        break;
      }
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail("a character range that runs backwards");
      }
      item.ranges.emplace_back(lo, hi);
    }
    ++pos_;
    return item;
  }

  int parse_count() {
    int n = 0;
    const size_t start = pos_;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (peek() - '0');
      ++pos_;
      if (n > Gbnf::kMaxRepeat) {
        fail(fmt::format("a repetition count above {}", Gbnf::kMaxRepeat));
        return 0;
      }
    }
    return pos_ == start ? -1 : n;
  }

  // The last item repeated as its operator says, through generated rules as llama.cpp does.
  void repeat(Sequence& items) {
    const Item x = items.back();
    items.pop_back();
    int min = 0, max = -1;  // max -1: unbounded
    const char op = peek();
    ++pos_;
    if (op == '+') min = 1;
    if (op == '?') max = 1;
    if (op == '{') {
      skip_space(true);
      min = parse_count();
      if (min < 0) return fail("a count was expected after '{'");
      skip_space(true);
      max = min;
      if (peek() == ',') {
        ++pos_;
        skip_space(true);
        max = parse_count();
        skip_space(true);
      }
      if (peek() != '}') return fail("'}' was expected");
      ++pos_;
      if (max >= 0 && max < min) return fail("a repetition {m,n} with n below m");
    }
    count(static_cast<size_t>(min));
    if (!ok()) return;
    for (int i = 0; i < min; ++i) items.push_back(x);
    if (max < 0) {  // x*: R ::= x R | ""
      const uint32_t star = new_rule(origins_[current_]);
      defined_[star] = true;
      rules_[star] = {{x, Item{true, star, false, {}}}, {}};
      count(4);
      items.push_back(Item{true, star, false, {}});
      return;
    }
    // max - min optional copies, nested: R1 ::= x | "", Rk ::= x R(k-1) | "".
    uint32_t optional = 0;
    for (int k = 0; k < max - min && ok(); ++k) {
      Sequence body{x};
      if (k > 0) body.push_back(Item{true, optional, false, {}});
      optional = generated({body, {}});
    }
    if (max > min) items.push_back(Item{true, optional, false, {}});
  }

  bool nullable(const Sequence& s, const std::vector<bool>& nullable_rules) const {
    for (const Item& item : s) {
      if (!item.is_rule || !nullable_rules[item.rule]) return false;
    }
    return true;
  }

  Status refuse_left_recursion() const {
    std::vector<bool> nullable_rules(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (nullable_rules[r]) continue;
        for (const Sequence& s : rules_[r]) {
          if (nullable(s, nullable_rules)) nullable_rules[r] = changed = true;
        }
      }
    }
    // Edges to the rules each rule may start with; a cycle among them is left recursion.
    std::vector<std::vector<uint32_t>> starts(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& s : rules_[r]) {
        for (const Item& item : s) {
          if (!item.is_rule) break;
          starts[r].push_back(item.rule);
          if (!nullable_rules[item.rule]) break;
        }
      }
    }
    std::vector<uint8_t> state(rules_.size(), 0);  // 0 unseen, 1 on the path, 2 done
    for (uint32_t from = 0; from < rules_.size(); ++from) {
      if (state[from] != 0) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{from, 0}};  // iterative: rules may be many
      state[from] = 1;
      while (!path.empty()) {
        auto& [rule, next] = path.back();
        if (next == starts[rule].size()) {
          state[rule] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t to = starts[rule][next++];
        if (state[to] == 1) return make_error("grammar: rule '{}' is left-recursive (it can reach itself before any character)",
                                              origins_[to]);
        if (state[to] == 0) {
          state[to] = 1;
          path.emplace_back(to, 0);
        }
      }
    }
    return ok_status();
  }

  Gbnf layout(uint32_t root) const {
    Gbnf g;
    g.root_ = root;
    g.rules_.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& s : rules_[r]) {
        g.rules_[r].push_back(static_cast<uint32_t>(g.elements_.size()));
        for (const Item& item : s) {
          GbnfElement e;
          if (item.is_rule) {
            e.kind = GbnfElement::kRule;
            e.rule = item.rule;
          } else {
            e.kind = GbnfElement::kChars;
            e.negated = item.negated;
            e.first_range = static_cast<uint32_t>(g.ranges_.size());
            e.n_ranges = static_cast<uint32_t>(item.ranges.size());
            g.ranges_.insert(g.ranges_.end(), item.ranges.begin(), item.ranges.end());
          }
          g.elements_.push_back(e);
        }
        g.elements_.push_back(GbnfElement{});  // kEnd
      }
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<Alternatives> rules_;
  std::vector<bool> defined_;
  std::vector<std::string> origins_;  // the named rule each rule is or was made for
  uint32_t current_ = 0;
  size_t items_ = 0;
};

Result<Gbnf> Gbnf::compile(std::string_view text) { return GbnfParser(text).run(); }

bool Gbnf::matches(uint32_t chars_element, uint32_t code_point) const {
  const GbnfElement& e = elements_[chars_element];
  bool in = false;
  for (uint32_t i = e.first_range; i < e.first_range + e.n_ranges && !in; ++i) {
    in = code_point >= ranges_[i].first && code_point <= ranges_[i].second;
  }
  return in != e.negated;
}

bool Gbnf::may_match(uint32_t chars_element, uint32_t lo, uint32_t hi) const {
  const GbnfElement& e = elements_[chars_element];
  for (uint32_t i = e.first_range; i < e.first_range + e.n_ranges; ++i) {
    const auto [first, last] = ranges_[i];
    if (e.negated && first <= lo && hi <= last) return false;  // excluded whole
    if (!e.negated && first <= hi && lo <= last) return true;
  }
  return e.negated;
}

}  // namespace mnemo::grammar
