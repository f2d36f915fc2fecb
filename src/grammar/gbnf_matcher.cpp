#include "grammar/gbnf_matcher.h"

#include <algorithm>
#include <cstring>

#include "grammar/json_matcher.h"
#include "tokenizer/utf8.h"

namespace mnemo::grammar {

namespace {

// Deeper chains of rule openings and alternative ends than this in one step are refused rather
// than recursed into (left recursion is refused at compile time; this bounds the native stack).
constexpr int kMaxExpandDepth = 2048;

}  // namespace

void GbnfStacks::Expansion::add(uint32_t node) {
  if (node == kDead) {
    overflow = true;
    return;
  }
  const auto at = std::lower_bound(nodes.begin(), nodes.end(), node);
  if (at != nodes.end() && *at == node) return;
  if (nodes.size() == static_cast<size_t>(kMaxStacks)) {
    overflow = true;
    return;
  }
  nodes.insert(at, node);
}

GbnfStacks::GbnfStacks(const Gbnf* grammar) : grammar_(grammar), nodes_{{0, 0}} {
  Expansion first;
  for (const uint32_t at : grammar_->alternatives(grammar_->root())) expand(at, kEmpty, first, 0);
  start_ = first.overflow ? kDead : intern_set(first);
}

uint32_t GbnfStacks::intern_node(uint32_t element, uint32_t parent) {
  const uint64_t key = uint64_t{element} << 32 | parent;
  if (const auto it = node_index_.find(key); it != node_index_.end()) return it->second;
  if (nodes_.size() >= kMaxNodes) return kDead;
  const auto id = static_cast<uint32_t>(nodes_.size());
  nodes_.emplace_back(element, parent);
  node_index_.emplace(key, id);
  return id;
}

uint32_t GbnfStacks::intern_set(const Expansion& e) {
  std::string key(e.nodes.size() * sizeof(uint32_t), '\0');
  std::memcpy(key.data(), e.nodes.data(), key.size());
  if (const auto it = set_index_.find(key); it != set_index_.end()) return it->second;
  if (sets_.size() >= kMaxSets) return kDead;
  const auto id = static_cast<uint32_t>(sets_.size());
  sets_.push_back(e.nodes);
  set_index_.emplace(std::move(key), id);
  return id;
}

void GbnfStacks::expand(uint32_t at, uint32_t parent, Expansion& out, int depth) {
  if (depth > kMaxExpandDepth) {
    out.overflow = true;
    return;
  }
  const GbnfElement& e = grammar_->element(at);
  if (e.kind == GbnfElement::kChars) {
    out.add(intern_node(at, parent));
  } else if (e.kind == GbnfElement::kRule) {
    // A reference that ends its alternative returns straight to the parent (a tail call): a
    // repetition, which recurses on the right, keeps its stack flat, and parses that differ only
    // in how many times they went round merge.
    const bool tail = grammar_->element(at + 1).kind == GbnfElement::kEnd;
    const uint32_t continuation = tail ? parent : intern_node(at + 1, parent);
    if (continuation == kDead) {
      out.overflow = true;
      return;
    }
    for (const uint32_t first : grammar_->alternatives(e.rule)) expand(first, continuation, out, depth + 1);
  } else if (parent == kEmpty) {
    out.add(kEmpty);  // the root's alternative ended: the output may end here
  } else {
    expand(element(parent), this->parent(parent), out, depth + 1);
  }
}

uint32_t GbnfStacks::next(uint32_t set, uint32_t code_point) {
  const uint64_t key = uint64_t{set} << 32 | code_point;
  if (const auto it = steps_.find(key); it != steps_.end()) return it->second;
  Expansion out;
  for (const uint32_t node : sets_[set]) {  // expand() grows nodes_ only
    if (node == kEmpty) continue;
    const uint32_t at = element(node);
    if (grammar_->matches(at, code_point)) expand(at + 1, parent(node), out, 0);
  }
  const uint32_t result = out.nodes.empty() || out.overflow ? kDead : intern_set(out);
  if (steps_.size() < kMaxSteps) steps_.emplace(key, result);  // past that, computed each time
  return result;
}

bool GbnfStacks::may_take(uint32_t set, uint32_t lo, uint32_t hi) const {
  for (const uint32_t node : sets_[set]) {
    if (node != kEmpty && grammar_->may_match(element(node), lo, hi)) return true;
  }
  return false;
}

bool GbnfMatcher::advance(uint8_t byte) {
  if (set_ == GbnfStacks::kDead) return false;
  if (pending_ == 0 && byte < 0x80) {
    const uint32_t next = stacks_->next(set_, byte);
    if (next == GbnfStacks::kDead) return false;
    set_ = next;
    return true;
  }
  uint32_t cp = 0;
  uint8_t length = length_;
  uint8_t pending = 0;
  if (pending_ == 0) {
    length = static_cast<uint8_t>(tokenizer::utf8_strict_length(byte));
    if (length == 0) return false;
    cp = byte & (0x7Fu >> length);
    pending = length - 1;
  } else {
    if ((byte & 0xC0) != 0x80) return false;
    cp = partial_ << 6 | (byte & 0x3Fu);
    pending = pending_ - 1;
  }
  // The code points this character may still become: none overlong, none past U+10FFFF.
  const unsigned rest = 6u * pending;
  const uint32_t lo = std::max(cp << rest, length == 2 ? 0x80u : length == 3 ? 0x800u : 0x10000u);
  const uint32_t hi = std::min((cp << rest) | ((1u << rest) - 1), 0x10FFFFu);
  if (lo > hi) return false;
  if (pending > 0) {
    // Only if some class may take it: the vocabulary walk then skips the many multi-byte tokens
    // where the grammar wants ASCII.
    if (!stacks_->may_take(set_, lo, hi)) return false;
    partial_ = cp;
    pending_ = pending;
    length_ = length;
    return true;
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // a surrogate is not text
  const uint32_t next = stacks_->next(set_, cp);
  if (next == GbnfStacks::kDead) return false;
  set_ = next;
  pending_ = 0;
  return true;
}

bool GbnfMatcher::feed(std::string_view bytes) { return feed_each(*this, bytes); }

}  // namespace mnemo::grammar
