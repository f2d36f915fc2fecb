// Regular expressions for constrained decoding: a string property's `pattern` and `format`
// (date, time, date-time, email, uuid, ipv4, uri), and the `grammar` extension's regex. Compiled
// to a Thompson NFA over bytes (at most kMaxStates states, each state's epsilon closure
// precomputed) and run as a state set, so a matcher is a fixed bitset: trivially copyable, as a
// token mask needs.
//
// Syntax (ECMAScript's, as JSON Schema uses it, minus what an automaton cannot do): literals,
// escapes (\d \w \s \D \W \S, \. and other escaped punctuation, \n \t \r), classes [a-z0-9_] and
// [^...], '.', groups (...) and (?:...), alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy
// forms accepted, meaning the same for a whole match). No backreferences, lookaround or flags:
// those are refused by name. '.' and negated classes match neither '\n' nor a control byte;
// bytes at or above 0x80 match them, so UTF-8 text passes byte by byte.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::grammar {

class Regex {
 public:
  static constexpr int kMaxStates = 512;
  using StateSet = std::array<uint64_t, kMaxStates / 64>;

  // `anchored`: the whole text must match (a grammar); else, as JSON Schema's `pattern`, the
  // pattern may match anywhere unless it starts with ^ or ends with $.
  static Result<Regex> compile(std::string_view pattern, bool anchored);
  // A JSON Schema `format` as an anchored regex; an Error names a format not supported.
  static Result<Regex> format(std::string_view name);

  StateSet start() const { return start_; }
  // The states after `byte` from `states`; an empty set when the byte cannot continue a match.
  StateSet step(const StateSet& states, uint8_t byte) const;
  bool accepts(const StateSet& states) const;
  static bool empty(const StateSet& states);
  // Whether `text` matches as a whole.
  bool matches(std::string_view text) const;
  int states() const { return static_cast<int>(next_.size()); }

 private:
  std::vector<uint16_t> class_of_;          // per state: its byte class, or kEpsilon
  std::vector<uint16_t> next_;              // per state: where a byte of its class leads
  std::vector<std::array<uint64_t, 4>> classes_;  // byte classes (256-bit sets)
  std::vector<StateSet> closure_;           // per state: the states its epsilon moves reach
  StateSet start_{};
  int accept_ = 0;
  friend class RegexBuilder;
};

}  // namespace mnemo::grammar
