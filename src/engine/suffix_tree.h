// A bounded-depth suffix tree over token streams, with counts (SuffixDecoding's structure):
// every substring of up to `depth` tokens of the streams it holds is a path from the root, and
// each node counts the occurrences of its substring. A draft matches the longest suffix of a
// context that the tree holds and follows, token by token, the most frequent continuation (the
// most recently seen on a tie) while the product of the continuation frequencies stays above a
// confidence floor; past the depth it re-anchors on the draft's own end.
//
// Streams leave exactly as they came (erase undoes insert count for count, and nodes whose count
// falls to zero are freed), so the tree holds what its owner's bounded streams hold and nothing
// more. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/batch.h"

namespace mnemo {

struct SuffixTreeOptions {
  int32_t depth = 12;      // the longest substring held; bounds nodes at depth x tokens
  int32_t min_match = 2;   // the shortest context suffix a draft may start from
  int32_t max_match = 8;   // the longest tried (the longest held wins)
  // A draft stops where the product of its tokens' frequencies (a child's count over its
  // parent's) would fall below this.
  double min_confidence = 0.25;
};

class SuffixTree {
 public:
  using Options = SuffixTreeOptions;
  explicit SuffixTree(Options options = {});

  // Adds every suffix's first `depth` tokens; `stamp` orders streams for the recency tie-break
  // (later streams larger).
  void insert(std::span<const TokenId> stream, uint32_t stamp);
  // Removes a stream inserted earlier (the same tokens).
  void erase(std::span<const TokenId> stream);
  // Up to max_tokens tokens likely to follow `context`, appended to `out`; how many.
  int32_t draft(std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) const;

  // Occurrences of `substring` in the streams held (0 when absent or longer than the depth).
  uint32_t count(std::span<const TokenId> substring) const;
  // Nodes in use, the root excepted.
  size_t nodes() const { return pool_.size() - 1 - free_.size(); }
  const Options& options() const { return options_; }

 private:
  static constexpr uint32_t kNone = 0;  // the root's index: never anyone's child or sibling
  struct Node {
    TokenId token = 0;
    uint32_t count = 0;
    uint32_t stamp = 0;
    uint32_t first_child = kNone;
    uint32_t next_sibling = kNone;
  };
  static uint64_t edge_key(uint32_t parent, TokenId token) {
    return (static_cast<uint64_t>(parent) << 32) | static_cast<uint32_t>(token);
  }
  uint32_t child(uint32_t parent, TokenId token) const;
  uint32_t add_child(uint32_t parent, TokenId token);
  void unlink_and_free(uint32_t parent, uint32_t node);
  // The deepest node for the longest suffix of `tail` (min_match..max_match tokens) that has a
  // continuation; kNone if there is none.
  uint32_t match(std::span<const TokenId> tail, int32_t& depth) const;
  uint32_t best_child(uint32_t node) const;

  Options options_;
  std::vector<Node> pool_;  // [0] is the root
  std::vector<uint32_t> free_;
  std::unordered_map<uint64_t, uint32_t> edges_;  // (parent, token) -> child
};

}  // namespace mnemo
