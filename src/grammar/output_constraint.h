// Constrained decoding: which tokens may come next so that the output stays a prefix of what the
// request asks for: a JSON object (response_format json_object), one a compiled schema allows
// (json_schema, tool-call envelopes), or a text a regex matches whole or a GBNF grammar derives
// (the `grammar` extension).
// A JSON document once whole allows only the end of generation; a regex's match allows the end
// and whatever may still extend it. One per sequence; the vocabulary's bytes are shared
// (TokenBytes).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <unordered_map>
#include <variant>

#include "grammar/gbnf_matcher.h"
#include "grammar/json_matcher.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/schema_matcher.h"
#include "grammar/schema_matcher_set.h"
#include "tokenizer/tokenizer.h"
#include "util/token_mask.h"

namespace mnemo::grammar {

// Tokens by their bytes as a trie: a walk tries each shared prefix once, and leaves a subtree
// at its first impossible byte.
struct TokenTrie {
  struct Node {
    uint32_t first_child = 0;  // children are contiguous
    uint32_t n_children = 0;
    uint32_t first_token = 0;  // the tokens whose bytes end here (TokenTrie::tokens)
    uint32_t n_tokens = 0;
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;  // nodes[0]: the root (no bytes)
  std::vector<TokenId> tokens;
};

// Every token's bytes as it adds them to the text, and which tokens are plain string content
// (whole UTF-8 with no quote, backslash or control byte): inside a string those pass without a try.
class TokenBytes {
 public:
  explicit TokenBytes(const Tokenizer& tokenizer);
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(TokenId t) const { return bytes_[static_cast<size_t>(t)]; }
  bool plain(TokenId t) const { return plain_mask_.test(t); }
  bool ends_generation(TokenId t) const { return end_[static_cast<size_t>(t)] != 0; }
  const std::vector<TokenId>& end_tokens() const { return end_tokens_; }
  // Every token with bytes (not the end of generation), and those that are not plain.
  const TokenTrie& all() const { return all_; }
  const TokenTrie& not_plain() const { return not_plain_; }
  // The plain tokens: the mask inside a free string, before the others are tried.
  const TokenMask& plain_mask() const { return plain_mask_; }
  // Per token: the characters a plain token adds (at most 254), 255 for the others.
  const std::vector<uint8_t>& plain_chars() const { return plain_chars_; }

 private:
  TokenTrie build_trie(bool plain_too) const;

  TokenTrie all_;
  TokenTrie not_plain_;
  std::vector<std::string> bytes_;
  TokenMask plain_mask_;
  std::vector<uint8_t> plain_chars_;
  std::vector<uint8_t> end_;
  std::vector<TokenId> end_tokens_;
};

// The whole output as a regex's text.
class RegexMatcher {
 public:
  explicit RegexMatcher(const Regex* regex) : regex_(regex), states_(regex->start()) {}
  bool feed(uint8_t byte) {
    const Regex::StateSet next = regex_->step(states_, byte);
    if (Regex::empty(next)) return false;
    states_ = next;
    return true;
  }
  bool advance(uint8_t byte) { return feed(byte); }
  bool feed(std::string_view bytes) { return feed_each(*this, bytes); }
  bool complete() const { return regex_->accepts(states_); }
  bool in_string() const { return false; }
  int32_t string_room() const { return 0; }
  const Regex::StateSet& states() const { return states_; }

 private:
  const Regex* regex_;
  Regex::StateSet states_;
};

class OutputConstraint {
 public:
  // Any JSON object; or, with a schema, the objects it allows.
  explicit OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const CompiledSchema> schema = nullptr);
  // Texts `regex` matches whole.
  OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const Regex> regex);
  // Texts a GBNF grammar's root derives.
  OutputConstraint(std::shared_ptr<const TokenBytes> vocabulary, std::shared_ptr<const Gbnf> gbnf);

  // The tokens that may come next (over the whole vocabulary).
  void allowed(TokenMask& allowed) const;
  // The token sampled: false if it was not allowed (the state is then unchanged).
  bool accept(TokenId token);
  bool complete() const {
    return std::visit([](const auto& m) { return m.complete(); }, matcher_);
  }

 private:
  template <class Matcher>
  void allowed_by(const Matcher& matcher, TokenMask& allowed) const;
  // Marks the tokens below `node` of `trie` that `matcher` (the state after the node's bytes) accepts.
  template <class Matcher>
  void walk(const TokenTrie& trie, uint32_t node, const Matcher& matcher, TokenMask& allowed) const;

  std::shared_ptr<const TokenBytes> vocabulary_;
  std::shared_ptr<const CompiledSchema> schema_;  // kept alive for the SchemaMatcher
  std::shared_ptr<const Regex> regex_;            // and the RegexMatcher
  std::shared_ptr<const Gbnf> gbnf_;              // and the GbnfMatcher, with its stacks
  std::unique_ptr<GbnfStacks> gbnf_stacks_;
  // A grammar's masks (regex or GBNF) by its matcher's state: the same state recurs (the inside
  // of a string or a class loop, the same structure at the same depth), and its mask is then a
  // copy. At most kMaxCachedMasks.
  static constexpr size_t kMaxCachedMasks = 32;
  mutable std::unordered_map<std::string, TokenMask> masks_by_state_;
  // The set only for a schema with anyOf.
  std::variant<JsonMatcher, SchemaMatcher, SchemaMatcherSet, RegexMatcher, GbnfMatcher> matcher_;
};

}  // namespace mnemo::grammar
