// GBNF grammars, llama.cpp's grammar format (the `grammar` string llama-server takes): rules
// `name ::= alternatives`, sequences of string literals "...", character classes [a-z] [^...],
// `.` (any character), rule references and groups (...), with * + ? {m} {m,} {m,n}, `|`, and
// `#` comments; `root` is the whole output. Characters are Unicode code points (the text is
// UTF-8), as in llama.cpp.
//
// Compiled as llama.cpp does: groups and repetitions become generated rules, every alternative a
// flat run of elements ending in kEnd. A grammar with left recursion (a rule that can reach
// itself before consuming a character) is refused by name, since a parse of it would never
// advance; so are undefined rules and a grammar without `root`. Sizes are bounded (kMaxElements,
// kMaxRepeat, kMaxNesting), so compiling is linear in the text and cannot stall a request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/result.h"

namespace mnemo::grammar {

struct GbnfElement {
  enum Kind : uint8_t { kChars, kRule, kEnd };
  Kind kind = kEnd;
  bool negated = false;     // kChars: every code point outside the ranges
  uint32_t rule = 0;        // kRule
  uint32_t first_range = 0;  // kChars: ranges [first_range, first_range + n_ranges) of Gbnf::ranges
  uint32_t n_ranges = 0;
};

class Gbnf {
 public:
  static constexpr size_t kMaxElements = 1 << 16;
  static constexpr int kMaxRepeat = 1000;  // m and n of {m,n}
  static constexpr int kMaxNesting = 64;   // groups inside groups

  static Result<Gbnf> compile(std::string_view text);

  const GbnfElement& element(uint32_t at) const { return elements_[at]; }
  // The first element of each alternative of `rule`.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule]; }
  uint32_t root() const { return root_; }
  bool matches(uint32_t chars_element, uint32_t code_point) const;
  // Whether the class may take some code point in [lo, hi] (true unless it surely takes none).
  bool may_match(uint32_t chars_element, uint32_t lo, uint32_t hi) const;
  size_t size() const { return elements_.size(); }

 private:
  std::vector<GbnfElement> elements_;
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // inclusive code point ranges
  std::vector<std::vector<uint32_t>> rules_;
  uint32_t root_ = 0;
  friend class GbnfParser;
};

}  // namespace mnemo::grammar
