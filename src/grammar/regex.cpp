#include "grammar/regex.h"

#include <bit>
#include <cctype>
#include <limits>

#include <fmt/format.h>

namespace mnemo::grammar {
namespace {

using ByteSet = std::array<uint64_t, 4>;

constexpr uint16_t kEpsilon = std::numeric_limits<uint16_t>::max();
constexpr int kMaxRepeat = 100;
constexpr int kMaxNesting = 32;
constexpr size_t kMaxPatternBytes = 4096;

void add(ByteSet& set, int byte) { set[static_cast<size_t>(byte) >> 6] |= uint64_t{1} << (byte & 63); }
void add_range(ByteSet& set, int lo, int hi) {
  for (int b = lo; b <= hi; ++b) add(set, b);
}
bool has(const ByteSet& set, uint8_t byte) { return (set[byte >> 6] >> (byte & 63) & 1) != 0; }

// What '.' and negated classes may match: no control byte, no newline.
ByteSet printable() {
  ByteSet set{};
  add_range(set, 0x20, 0xFF);
  return set;
}

ByteSet complement(const ByteSet& set) {
  const ByteSet all = printable();
  ByteSet out{};
  for (size_t i = 0; i < 4; ++i) out[i] = all[i] & ~set[i];
  return out;
}

ByteSet digits() {
  ByteSet set{};
  add_range(set, '0', '9');
  return set;
}
ByteSet word() {
  ByteSet set = digits();
  add_range(set, 'a', 'z');
  add_range(set, 'A', 'Z');
  add(set, '_');
  return set;
}
ByteSet space() {
  ByteSet set{};
  for (const int b : {' ', '\t', '\n', '\r', '\f', '\v'}) add(set, b);
  return set;
}

struct Node {
  enum class Kind : uint8_t { kBytes, kConcat, kAlternation, kRepeat };
  explicit Node(Kind k = Kind::kConcat) : kind(k) {}
  static Node of_bytes(const ByteSet& set) {
    Node node(Kind::kBytes);
    node.bytes = set;
    return node;
  }

  Kind kind;
  ByteSet bytes{};
  std::vector<Node> children;
  int min = 1;
  int max = 1;  // -1: unbounded
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  Result<Node> parse() {
    MNEMO_ASSIGN_OR_RETURN(Node node, alternation(0));
    if (at_ < p_.size()) return error("unmatched ')'");
    return node;
  }

 private:
  Error error(std::string_view what) const { return make_error("regex: {} at offset {}", what, at_); }
  bool more() const { return at_ < p_.size(); }
  char peek() const { return p_[at_]; }

  Result<Node> alternation(int depth) {
    if (depth > kMaxNesting) return error("groups nest too deep");
    Node alt(Node::Kind::kAlternation);
    for (;;) {
      MNEMO_ASSIGN_OR_RETURN(Node branch, concatenation(depth));
      alt.children.push_back(std::move(branch));
      if (!more() || peek() != '|') break;
      ++at_;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Result<Node> concatenation(int depth) {
    Node concat(Node::Kind::kConcat);
    while (more() && peek() != '|' && peek() != ')') {
      MNEMO_ASSIGN_OR_RETURN(Node atom, this->atom(depth));
      MNEMO_ASSIGN_OR_RETURN(Node repeated, quantified(std::move(atom)));
      concat.children.push_back(std::move(repeated));
    }
    return concat;
  }

  Result<Node> quantified(Node atom) {
    if (!more()) return atom;
    int min = 1;
    int max = 1;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++at_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '{' && at_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[at_ + 1]))) {
      ++at_;
      MNEMO_ASSIGN_OR_RETURN(min, number());
      max = min;
      if (more() && peek() == ',') {
        ++at_;
        max = -1;
        if (more() && peek() != '}') {
          MNEMO_ASSIGN_OR_RETURN(max, number());
        }
      }
      if (!more() || peek() != '}') return error("'{' without its '}'");
      ++at_;
      if (max != -1 && max < min) return error("a repeat {m,n} with n below m");
    } else {
      return atom;
    }
    if (more() && peek() == '?') ++at_;  // lazy: the same set of whole matches
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      if (peek() != '{' || (at_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[at_ + 1])))) {
        return error("a quantifier after a quantifier");
      }
    }
    Node repeat(Node::Kind::kRepeat);
    repeat.min = min;
    repeat.max = max;
    repeat.children.push_back(std::move(atom));
    return repeat;
  }

  Result<int> number() {
    int value = 0;
    const size_t start = at_;
    while (more() && std::isdigit(static_cast<unsigned char>(peek()))) {
      value = value * 10 + (peek() - '0');
      ++at_;
      if (value > kMaxRepeat) return error(fmt::format("a repeat count above {}", kMaxRepeat));
    }
    if (at_ == start) return error("a repeat count expected");
    return value;
  }

  static Node bytes(const ByteSet& set) { return Node::of_bytes(set); }

  Result<Node> atom(int depth) {
    const char c = peek();
    ++at_;
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          if (at_ + 1 < p_.size() && p_[at_ + 1] == ':') {
            at_ += 2;
          } else if (at_ + 2 < p_.size() && p_[at_ + 1] == '<' && p_[at_ + 2] != '=' && p_[at_ + 2] != '!') {
            const size_t close = p_.find('>', at_);
            if (close == std::string_view::npos) return error("a named group without its '>'");
            at_ = close + 1;
          } else {
            return error("lookaround and inline flags are not supported");
          }
        }
        MNEMO_ASSIGN_OR_RETURN(Node inner, alternation(depth + 1));
        if (!more() || peek() != ')') return error("'(' without its ')'");
        ++at_;
        return inner;
      }
      case ')': return error("unmatched ')'");
      case '[': return klass();
      case '.': return bytes(printable());
      case '\\': return escape(/*in_class=*/false);
      case '^':
      case '$': return error("'^' and '$' only at the pattern's start and end");
      case '*':
      case '+':
      case '?': return error("a quantifier with nothing to repeat");
      default: {
        ByteSet set{};
        add(set, static_cast<uint8_t>(c));
        return bytes(set);
      }
    }
  }

  // After a backslash: a class escape or an escaped byte.
  Result<Node> escape(bool in_class) {
    if (!more()) return error("a pattern that ends in '\\'");
    const char c = peek();
    ++at_;
    switch (c) {
      case 'd': return bytes(digits());
      case 'D': return bytes(complement(digits()));
      case 'w': return bytes(word());
      case 'W': return bytes(complement(word()));
      case 's': return bytes(space());
      case 'S': return bytes(complement(space()));
      case 'n':
      case 't':
      case 'r':
      case 'f':
      case 'v': {
        ByteSet set{};
        add(set, c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == 'f' ? '\f' : '\v');
        return bytes(set);
      }
      default: break;
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
      return error(fmt::format("the escape \\{} is not supported{}", c, in_class ? " in a class" : ""));
    }
    ByteSet set{};
    add(set, static_cast<uint8_t>(c));
    return bytes(set);
  }

  Result<Node> klass() {
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++at_;
    }
    ByteSet set{};
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      int lo = 0;
      if (peek() == '\\') {
        ++at_;
        MNEMO_ASSIGN_OR_RETURN(Node escaped, escape(/*in_class=*/true));
        if (std::popcount(escaped.bytes[0]) + std::popcount(escaped.bytes[1]) + std::popcount(escaped.bytes[2]) +
                std::popcount(escaped.bytes[3]) != 1) {
          for (size_t i = 0; i < 4; ++i) set[i] |= escaped.bytes[i];
          continue;
        }
        for (int b = 0; b < 256; ++b) {
          if (has(escaped.bytes, static_cast<uint8_t>(b))) lo = b;
        }
      } else {
        lo = static_cast<uint8_t>(peek());
        ++at_;
      }
      if (at_ + 1 < p_.size() && peek() == '-' && p_[at_ + 1] != ']') {
        ++at_;
        int hi = static_cast<uint8_t>(peek());
        if (peek() == '\\') {
          ++at_;
          if (!more()) return error("a class that ends in '\\'");
          hi = static_cast<uint8_t>(peek());
        }
        ++at_;
        if (hi < lo) return error("a class range out of order");
        add_range(set, lo, hi);
      } else {
        add(set, lo);
      }
    }
    if (!more()) return error("'[' without its ']'");
    ++at_;
    return bytes(negated ? complement(set) : set);
  }

  std::string_view p_;
  size_t at_ = 0;
};

}  // namespace

// Emits the NFA of a parsed pattern: Thompson's construction, a node repeated {m,n} emitted m
// times then n - m times optionally.
class RegexBuilder {
 public:
  explicit RegexBuilder(Regex& out) : out_(out) {}

  Result<int> state(uint16_t klass) {
    if (out_.next_.size() >= static_cast<size_t>(Regex::kMaxStates)) {
      return make_error("regex: the pattern needs more than {} states (shorten its repeats)", Regex::kMaxStates);
    }
    out_.class_of_.push_back(klass);
    out_.next_.push_back(0);
    epsilon_.emplace_back();
    return static_cast<int>(out_.next_.size() - 1);
  }

  Result<int> emit(const Node& node, int entry) {
    switch (node.kind) {
      case Node::Kind::kBytes: {
        out_.classes_.push_back(node.bytes);
        MNEMO_ASSIGN_OR_RETURN(const int s, state(static_cast<uint16_t>(out_.classes_.size() - 1)));
        MNEMO_ASSIGN_OR_RETURN(const int t, state(kEpsilon));
        epsilon_[static_cast<size_t>(entry)].push_back(s);
        out_.next_[static_cast<size_t>(s)] = static_cast<uint16_t>(t);
        return t;
      }
      case Node::Kind::kConcat: {
        int at = entry;
        for (const Node& child : node.children) {
          MNEMO_ASSIGN_OR_RETURN(at, emit(child, at));
        }
        return at;
      }
      case Node::Kind::kAlternation: {
        MNEMO_ASSIGN_OR_RETURN(const int exit, state(kEpsilon));
        for (const Node& child : node.children) {
          MNEMO_ASSIGN_OR_RETURN(const int branch, state(kEpsilon));
          epsilon_[static_cast<size_t>(entry)].push_back(branch);
          MNEMO_ASSIGN_OR_RETURN(const int end, emit(child, branch));
          epsilon_[static_cast<size_t>(end)].push_back(exit);
        }
        return exit;
      }
      case Node::Kind::kRepeat: return repeat(node, entry);
    }
    return entry;
  }

  void finish(int start, int accept) {
    const size_t n = out_.next_.size();
    out_.closure_.assign(n, Regex::StateSet{});
    for (size_t s = 0; s < n; ++s) {
      std::vector<int> stack{static_cast<int>(s)};
      Regex::StateSet& seen = out_.closure_[s];
      while (!stack.empty()) {
        const int at = stack.back();
        stack.pop_back();
        uint64_t& word = seen[static_cast<size_t>(at) >> 6];
        const uint64_t bit = uint64_t{1} << (at & 63);
        if ((word & bit) != 0) continue;
        word |= bit;
        for (const int to : epsilon_[static_cast<size_t>(at)]) stack.push_back(to);
      }
    }
    out_.start_ = out_.closure_[static_cast<size_t>(start)];
    out_.accept_ = accept;
  }

 private:
  Result<int> repeat(const Node& node, int entry) {
    const Node& child = node.children[0];
    int at = entry;
    for (int i = 0; i < node.min; ++i) {
      MNEMO_ASSIGN_OR_RETURN(at, emit(child, at));
    }
    if (node.max == -1) {
      MNEMO_ASSIGN_OR_RETURN(const int loop, state(kEpsilon));
      epsilon_[static_cast<size_t>(at)].push_back(loop);
      MNEMO_ASSIGN_OR_RETURN(const int end, emit(child, loop));
      epsilon_[static_cast<size_t>(end)].push_back(loop);
      return loop;
    }
    MNEMO_ASSIGN_OR_RETURN(const int exit, state(kEpsilon));
    for (int i = node.min; i < node.max; ++i) {
      epsilon_[static_cast<size_t>(at)].push_back(exit);
      MNEMO_ASSIGN_OR_RETURN(at, emit(child, at));
    }
    epsilon_[static_cast<size_t>(at)].push_back(exit);
    return exit;
  }

  Regex& out_;
  std::vector<std::vector<int>> epsilon_;
};

Result<Regex> Regex::compile(std::string_view pattern, bool anchored) {
  if (pattern.size() > kMaxPatternBytes) return make_error("regex: a pattern longer than {} bytes", kMaxPatternBytes);
  bool from_start = anchored;
  bool to_end = anchored;
  if (!pattern.empty() && pattern.front() == '^') {
    pattern.remove_prefix(1);
    from_start = true;
  }
  if (!pattern.empty() && pattern.back() == '$' && (pattern.size() < 2 || pattern[pattern.size() - 2] != '\\')) {
    pattern.remove_suffix(1);
    to_end = true;
  }
  MNEMO_ASSIGN_OR_RETURN(Node body, Parser(pattern).parse());
  // JSON Schema's patterns search: what is not anchored may have anything around it.
  Node any(Node::Kind::kRepeat);
  any.min = 0;
  any.max = -1;
  any.children.push_back(Node::of_bytes(printable()));
  Node whole(Node::Kind::kConcat);
  if (!from_start) whole.children.push_back(any);
  whole.children.push_back(std::move(body));
  if (!to_end) whole.children.push_back(any);
  Regex regex;
  RegexBuilder builder(regex);
  MNEMO_ASSIGN_OR_RETURN(const int start, builder.state(kEpsilon));
  MNEMO_ASSIGN_OR_RETURN(const int accept, builder.emit(whole, start));
  builder.finish(start, accept);
  return regex;
}

Result<Regex> Regex::format(std::string_view name) {
  // Every date it allows exists (no year 0, no 31 April); 29 February is left out, as an
  // automaton this small does not know leap years.
  static constexpr std::string_view kDate =
      R"(([1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
  static constexpr std::string_view kTime = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static constexpr std::string_view kOctet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  std::string pattern;
  if (name == "date") pattern = kDate;
  else if (name == "time") pattern = kTime;
  else if (name == "date-time") pattern = fmt::format("{}T{}", kDate, kTime);
  else if (name == "email") pattern = R"([A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})";
  else if (name == "uuid") pattern = R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})";
  else if (name == "ipv4") pattern = fmt::format(R"(({}\.){{3}}{})", kOctet, kOctet);
  else if (name == "uri") pattern = R"([A-Za-z][A-Za-z0-9+.-]*:[!#$&-;=?-\[\]_a-z~]+)";
  else return make_error("the string format '{}' is not supported (date, time, date-time, email, uuid, ipv4, uri)", name);
  return compile(pattern, /*anchored=*/true);
}

Regex::StateSet Regex::step(const StateSet& states, uint8_t byte) const {
  StateSet out{};
  for (size_t w = 0; w < states.size(); ++w) {
    uint64_t bits = states[w];
    while (bits != 0) {
      const int s = static_cast<int>(w * 64) + std::countr_zero(bits);
      bits &= bits - 1;
      const uint16_t klass = class_of_[static_cast<size_t>(s)];
      if (klass == kEpsilon || !has(classes_[klass], byte)) continue;
      const StateSet& reach = closure_[next_[static_cast<size_t>(s)]];
      for (size_t i = 0; i < out.size(); ++i) out[i] |= reach[i];
    }
  }
  return out;
}

bool Regex::accepts(const StateSet& states) const {
  return (states[static_cast<size_t>(accept_) >> 6] >> (accept_ & 63) & 1) != 0;
}

bool Regex::empty(const StateSet& states) {
  for (const uint64_t w : states) {
    if (w != 0) return false;
  }
  return true;
}

bool Regex::matches(std::string_view text) const {
  StateSet states = start_;
  for (const char c : text) {
    states = step(states, static_cast<uint8_t>(c));
    if (empty(states)) return false;
  }
  return accepts(states);
}

}  // namespace mnemo::grammar
