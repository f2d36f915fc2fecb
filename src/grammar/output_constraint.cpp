#include "grammar/output_constraint.h"

#include <algorithm>
#include <cstdint>

namespace mnemo::grammar {

namespace {

// Whole UTF-8 characters only (a token may carry part of one: a byte-fallback token).
bool whole_utf8(const std::string& bytes) {
  JsonMatcher m(/*object_root=*/false);
  return m.feed('"') && m.feed(bytes) && m.in_string();
}

}  // namespace

TokenBytes::TokenBytes(const Tokenizer& tokenizer)
    : bytes_(static_cast<size_t>(tokenizer.vocab_size())),
      plain_chars_(static_cast<size_t>(tokenizer.vocab_size()), 255),
      end_(static_cast<size_t>(tokenizer.vocab_size()), 0) {
  plain_mask_.clear(tokenizer.vocab_size());
  for (TokenId t = 0; t < tokenizer.vocab_size(); ++t) {
    const auto i = static_cast<size_t>(t);
    end_[i] = tokenizer.is_end_of_generation(t) ? 1 : 0;
    if (end_[i] != 0) end_tokens_.push_back(t);
    // Control tokens add no text (special = false): never allowed but to end.
    bytes_[i] = tokenizer.token_to_piece(t, /*special=*/false);
    bool plain = !bytes_[i].empty() && end_[i] == 0;
    for (const char c : bytes_[i]) {
      const auto b = static_cast<uint8_t>(c);
      if (b == '"' || b == '\\' || b < 0x20) plain = false;
    }
    size_t chars = 0;
    for (const char c : bytes_[i]) chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80 ? 1 : 0;
    if (plain && whole_utf8(bytes_[i]) && chars < 255) {
      plain_mask_.set(t);
      plain_chars_[i] = static_cast<uint8_t>(chars);
    }
  }
  all_ = build_trie(/*plain_too=*/true);
  not_plain_ = build_trie(/*plain_too=*/false);
}

TokenTrie TokenBytes::build_trie(bool plain_too) const {
  std::vector<TokenId> sorted;
  for (TokenId t = 0; t < size(); ++t) {
    if (!bytes(t).empty() && !ends_generation(t) && (plain_too || !plain(t))) sorted.push_back(t);
  }
  std::sort(sorted.begin(), sorted.end(), [this](TokenId a, TokenId b) { return bytes(a) < bytes(b); });
  TokenTrie trie;
  // Breadth first, so that each node's children are appended together: a node covers the
  // tokens sorted[lo, hi) that share its `depth` bytes.
  struct Pending {
    uint32_t node;
    size_t lo, hi, depth;
  };
  trie.nodes.emplace_back();
  std::vector<Pending> queue{{0, 0, sorted.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Pending p = queue[q];
    size_t at = p.lo;
    trie.nodes[p.node].first_token = static_cast<uint32_t>(trie.tokens.size());
    while (at < p.hi && bytes(sorted[at]).size() == p.depth) trie.tokens.push_back(sorted[at++]);  // end here
    trie.nodes[p.node].n_tokens = static_cast<uint32_t>(trie.tokens.size()) - trie.nodes[p.node].first_token;
    trie.nodes[p.node].first_child = static_cast<uint32_t>(trie.nodes.size());
    while (at < p.hi) {
      const char byte = bytes(sorted[at])[p.depth];
      size_t end = at;
      while (end < p.hi && bytes(sorted[end])[p.depth] == byte) ++end;
      TokenTrie::Node child;
      child.byte = static_cast<uint8_t>(byte);
      queue.push_back({static_cast<uint32_t>(trie.nodes.size()), at, end, p.depth + 1});
      trie.nodes.push_back(child);
      ++trie.nodes[p.node].n_children;
      at = end;
    }
  }
  return trie;
}

OutputConstraint::OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const CompiledSchema> schema)
    : vocabulary_(std::move(vocabulary)),
      schema_(std::move(schema)),
      matcher_(JsonMatcher(/*object_root=*/true)) {
  if (schema_ && schema_->has_any_of) {
    matcher_.emplace<SchemaMatcherSet>(schema_.get());
  } else if (schema_) {
    matcher_.emplace<SchemaMatcher>(schema_.get());
  }
}

OutputConstraint::OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const Regex> regex)
    : vocabulary_(std::move(vocabulary)), regex_(std::move(regex)), matcher_(RegexMatcher(regex_.get())) {}

OutputConstraint::OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const Gbnf> gbnf)
    : vocabulary_(std::move(vocabulary)),
      gbnf_(std::move(gbnf)),
      gbnf_stacks_(std::make_unique<GbnfStacks>(gbnf_.get())),
      matcher_(GbnfMatcher(gbnf_stacks_.get())) {}

namespace {

// Nothing may follow: a JSON document is whole once complete; a regex's match may go on.
template <class Matcher>
bool exhausted(const Matcher& matcher) {
  return matcher.complete();
}
template <>
bool exhausted(const RegexMatcher&) {
  return false;
}
template <>
bool exhausted(const GbnfMatcher& m) {
  return m.only_end();
}

}  // namespace

template <class Matcher>
void OutputConstraint::walk(const TokenTrie& trie, uint32_t node, const Matcher& matcher, TokenMask& allowed) const {
  const TokenTrie::Node& n = trie.nodes[node];
  for (uint32_t k = n.first_token; k < n.first_token + n.n_tokens; ++k) allowed.set(trie.tokens[k]);
  for (uint32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
    Matcher next = matcher;
    if (next.advance(trie.nodes[c].byte)) walk(trie, c, next, allowed);  // `next` is dropped if not
  }
}

template <class Matcher>
void OutputConstraint::allowed_by(const Matcher& matcher, TokenMask& allowed) const {
  const TokenBytes& v = *vocabulary_;
  const bool in_string = !exhausted(matcher) && matcher.in_string();
  if (in_string) {
    // Plain content continues a free string (as much of it as its maxLength leaves room for);
    // only the other tokens need a try.
    const int32_t room = matcher.string_room();
    if (room >= 254) {
      allowed = v.plain_mask();
    } else {
      allowed.clear(v.size());
      const uint8_t* chars = v.plain_chars().data();
      const auto limit = static_cast<uint8_t>(std::max(0, room));
      uint64_t* words = allowed.data();
      for (int32_t first = 0; first < v.size(); first += 64) {
        uint64_t bits = 0;
        const int32_t n = std::min(64, v.size() - first);
        for (int32_t i = 0; i < n; ++i) bits |= uint64_t{chars[first + i] <= limit} << i;
        words[first / 64] = bits;
      }
    }
  } else {
    allowed.clear(v.size());
  }
  if (matcher.complete()) {
    for (const TokenId t : v.end_tokens()) allowed.set(t);
  }
  if (exhausted(matcher)) return;  // only the end of generation
  walk(in_string ? v.not_plain() : v.all(), 0, matcher, allowed);
}

void OutputConstraint::allowed(TokenMask& allowed) const {
  // A grammar's state as a key: its whole state (the regex's), or its live set when no character
  // is half read (the GBNF's); none for JSON, whose masks are cheap and states rarely recur.
  std::string key;
  if (const auto* regex = std::get_if<RegexMatcher>(&matcher_)) {
    key.assign(reinterpret_cast<const char*>(regex->states().data()), sizeof(Regex::StateSet));
  } else if (const auto* gbnf = std::get_if<GbnfMatcher>(&matcher_); gbnf != nullptr && gbnf->whole_set() != GbnfStacks::kDead) {
    const uint32_t set = gbnf->whole_set();
    key.assign(reinterpret_cast<const char*>(&set), sizeof(set));
  }
  if (!key.empty()) {
    if (const auto it = masks_by_state_.find(key); it != masks_by_state_.end()) {
      allowed = it->second;
      return;
    }
  }
  std::visit([&](const auto& m) { allowed_by(m, allowed); }, matcher_);
  if (key.empty()) return;
  if (masks_by_state_.size() >= kMaxCachedMasks) masks_by_state_.clear();
  masks_by_state_.emplace(std::move(key), allowed);
}

bool OutputConstraint::accept(TokenId token) {
  const TokenBytes& v = *vocabulary_;
  if (token < 0 || token >= v.size()) return false;
  if (v.ends_generation(token)) return complete();
  if (v.bytes(token).empty()) return false;
  return std::visit(
      [&](auto& m) {
        auto next = m;
        if (!next.feed(v.bytes(token))) return false;
        m = next;
        return true;
      },
      matcher_);
}

}  // namespace mnemo::grammar
