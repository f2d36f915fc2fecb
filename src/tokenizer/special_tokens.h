// Splits text on the texts of special tokens before the model's tokenizer sees it, as llama.cpp
// does: control and unknown tokens only with parse_special; user-defined tokens (Gemma's runs of
// spaces, newlines, tabs and HTML tags) always.
//
// llama.cpp's rule is not a leftmost-longest scan: it takes the special tokens from longest to
// shortest text and, for each, splits every piece of text not yet claimed at each non-overlapping
// occurrence, left to right. That is: occurrences are claimed in (token priority, position) order
// unless they overlap what is already claimed. SpecialTokenSplitter does exactly that without
// listing every occurrence (long whitespace runs match dozens of Gemma's tokens at each byte):
// a queue holds, per position, its best remaining match from a trie, and steps down to the next
// shorter match only when one is refused.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace mnemo::tokenizer {

struct Fragment {
  TokenId token = -1;  // -1: raw text [begin, end) still to be tokenised
  size_t begin = 0;
  size_t end = 0;

  bool is_text() const { return token < 0; }
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Candidate {
    TokenId token;
    uint32_t length;
    bool always;  // user-defined and not control: split even without parse_special
    bool lstrip;
    bool rstrip;
  };
  struct TrieNode {
    uint32_t first_edge = 0;
    uint32_t edge_count = 0;
    int32_t candidate = -1;        // index into candidates_ of the token ending here
    int32_t shorter_match = -1;    // nearest proper ancestor where a candidate ends
  };
  struct TrieEdge {
    uint8_t byte;
    uint32_t child;
  };

  void build_trie(const Vocab& vocab, const std::vector<uint32_t>& sorted);
  int32_t child_of(const TrieNode& node, uint8_t byte) const;
  // The node of the longest candidate at the start of `text` that may be split out; -1 if none.
  int32_t longest_match(std::string_view text, bool parse_special) const;
  // The next shorter candidate node than `node` on the same path that may be split out.
  int32_t next_shorter_match(int32_t node, bool parse_special) const;
  bool eligible(int32_t node, bool parse_special) const;

  std::vector<Candidate> candidates_;  // in llama.cpp's priority: longer text first, then lower id
  std::vector<TrieNode> nodes_;        // nodes_[0] is the root
  std::vector<TrieEdge> edges_;
};

}  // namespace mnemo::tokenizer
