// A GBNF grammar (grammar/gbnf.h) followed byte by byte, as llama.cpp follows one: the state is
// the set of parse stacks still alive, each stack's top a character class to match next (or the
// empty stack: the root is complete). A code point (UTF-8 assembled in the state) advances every
// stack whose class takes it (popping finished alternatives, expanding rule references into
// their alternatives); the others die.
//
// GbnfStacks, owned by the constraint, interns everything: stacks are nodes (element, parent),
// sets of live stacks have ids, and the step from a set by a code point is computed once and
// then looked up. A matcher is then a set id and a partial character: copied at every node of
// the vocabulary trie walk, and each byte of the walk is one lookup once the states recur (the
// inside of a string, the same structure at the same depth). The arena only grows while the
// request runs; past kMaxNodes or kMaxSets, or with more than kMaxStacks parses alive at once (a
// very ambiguous grammar), a byte is refused.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/gbnf.h"

namespace mnemo::grammar {

class GbnfStacks {
 public:
  static constexpr uint32_t kEmpty = 0;          // the empty stack: node 0
  static constexpr uint32_t kDead = UINT32_MAX;  // no set: nothing can follow
  static constexpr size_t kMaxNodes = 1 << 20;
  static constexpr size_t kMaxSets = 1 << 16;
  static constexpr size_t kMaxSteps = 1 << 20;  // steps kept for lookup (the arena's memory bound)
  static constexpr int kMaxStacks = 256;

  explicit GbnfStacks(const Gbnf* grammar);
  const Gbnf& grammar() const { return *grammar_; }

  // The set at the start of the root rule (kDead when the grammar opens more than kMaxStacks
  // parses).
  uint32_t start() const { return start_; }
  // The set after `code_point` from `set`; kDead when no stack takes it.
  uint32_t next(uint32_t set, uint32_t code_point);
  bool accepts(uint32_t set) const { return !sets_[set].empty() && sets_[set].front() == kEmpty; }
  size_t size(uint32_t set) const { return sets_[set].size(); }
  // Whether a stack of `set` may take a code point in [lo, hi] (true unless surely none does).
  bool may_take(uint32_t set, uint32_t lo, uint32_t hi) const;

 private:
  struct Expansion {
    std::vector<uint32_t> nodes;  // sorted, unique
    bool overflow = false;
    void add(uint32_t node);
  };
  uint32_t intern_node(uint32_t element, uint32_t parent);
  uint32_t intern_set(const Expansion& e);
  void expand(uint32_t at, uint32_t parent, Expansion& out, int depth);
  uint32_t element(uint32_t node) const { return nodes_[node].first; }
  uint32_t parent(uint32_t node) const { return nodes_[node].second; }

  const Gbnf* grammar_;
  std::vector<std::pair<uint32_t, uint32_t>> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_index_;
  std::vector<std::vector<uint32_t>> sets_;
  std::unordered_map<std::string, uint32_t> set_index_;  // by the set's bytes
  std::unordered_map<uint64_t, uint32_t> steps_;          // (set, code point) -> set
  uint32_t start_ = kDead;
};

class GbnfMatcher {
 public:
  explicit GbnfMatcher(GbnfStacks* stacks) : stacks_(stacks), set_(stacks->start()) {}

  bool advance(uint8_t byte);
  bool feed(uint8_t byte) { return advance(byte); }
  bool feed(std::string_view bytes);
  bool complete() const { return pending_ == 0 && set_ != GbnfStacks::kDead && stacks_->accepts(set_); }
  // Complete, and no parse goes on: only the end of the output may follow.
  bool only_end() const { return complete() && stacks_->size(set_) == 1; }
  bool in_string() const { return false; }
  int32_t string_room() const { return 0; }
  // The live set when no character is half read (a mask cache's key); kDead otherwise.
  uint32_t whole_set() const { return pending_ == 0 ? set_ : GbnfStacks::kDead; }

 private:
  GbnfStacks* stacks_;
  uint32_t set_;
  uint32_t partial_ = 0;  // the code point being assembled
  uint8_t pending_ = 0;   // its continuation bytes still to come
  uint8_t length_ = 0;    // its length in bytes
};

}  // namespace mnemo::grammar
