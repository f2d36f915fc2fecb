#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <queue>

namespace mnemo::tokenizer {
namespace {

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (TokenId id = 0; id < vocab.size(); ++id) {
    if (!vocab.has_any(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) continue;
    candidates_.push_back(Candidate{
        .token = id,
        .length = static_cast<uint32_t>(vocab.text(id).size()),
        .always = !vocab.has_any(id, kAttrControl | kAttrUnknown),
        .lstrip = vocab.has_any(id, kAttrLstrip),
        .rstrip = vocab.has_any(id, kAttrRstrip),
    });
  }
  // llama.cpp sorts by length only (std::sort, so ties fall in an unspecified order); ties broken
  // by id here, which only matters for equally long special texts that overlap in the input.
  std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    return a.length != b.length ? a.length > b.length : a.token < b.token;
  });

  std::vector<uint32_t> by_text(candidates_.size());
  for (uint32_t i = 0; i < by_text.size(); ++i) by_text[i] = i;
  std::sort(by_text.begin(), by_text.end(), [&](uint32_t a, uint32_t b) {
    return vocab.text(candidates_[a].token) < vocab.text(candidates_[b].token);
  });
  build_trie(vocab, by_text);
}

// Builds the trie over candidates sorted by text; each node's edges are contiguous and sorted by
// byte. Iterative: a special token's text can be arbitrarily long.
void SpecialTokenSplitter::build_trie(const Vocab& vocab, const std::vector<uint32_t>& sorted) {
  struct Pending {
    uint32_t node;
    size_t begin;
    size_t end;
    size_t depth;
  };
  nodes_.assign(1, TrieNode{});
  edges_.clear();
  std::vector<Pending> pending;
  std::vector<std::pair<size_t, size_t>> groups;
  if (!sorted.empty()) pending.push_back({0, 0, sorted.size(), 0});
  auto text_of = [&](size_t position) { return vocab.text(candidates_[sorted[position]].token); };
  while (!pending.empty()) {
    const Pending current = pending.back();
    pending.pop_back();
    size_t begin = current.begin;
    // Texts are distinct, so at most one ends exactly here, and it sorts first.
    if (text_of(begin).size() == current.depth) {
      nodes_[current.node].candidate = static_cast<int32_t>(sorted[begin]);
      ++begin;
    }
    groups.clear();
    for (size_t i = begin; i < current.end;) {
      const char byte = text_of(i)[current.depth];
      size_t j = i + 1;
      while (j < current.end && text_of(j)[current.depth] == byte) ++j;
      groups.emplace_back(i, j);
      i = j;
    }
    nodes_[current.node].first_edge = static_cast<uint32_t>(edges_.size());
    nodes_[current.node].edge_count = static_cast<uint32_t>(groups.size());
    const TrieNode& parent = nodes_[current.node];
    const int32_t shorter_for_children = parent.candidate >= 0 ? static_cast<int32_t>(current.node) : parent.shorter_match;
    for (const auto& [group_begin, group_end] : groups) {
      const auto child = static_cast<uint32_t>(nodes_.size());
      TrieNode child_node;
      child_node.shorter_match = shorter_for_children;
      nodes_.push_back(child_node);
      edges_.push_back(TrieEdge{static_cast<uint8_t>(text_of(group_begin)[current.depth]), child});
      pending.push_back({child, group_begin, group_end, current.depth + 1});
    }
  }
}

int32_t SpecialTokenSplitter::child_of(const TrieNode& node, uint8_t byte) const {
  const TrieEdge* first = edges_.data() + node.first_edge;
  const TrieEdge* last = first + node.edge_count;
  const TrieEdge* edge =
      std::lower_bound(first, last, byte, [](const TrieEdge& e, uint8_t value) { return e.byte < value; });
  return edge != last && edge->byte == byte ? static_cast<int32_t>(edge->child) : -1;
}

bool SpecialTokenSplitter::eligible(int32_t node, bool parse_special) const {
  const int32_t candidate = nodes_[static_cast<size_t>(node)].candidate;
  return candidate >= 0 && (parse_special || candidates_[static_cast<size_t>(candidate)].always);
}

int32_t SpecialTokenSplitter::longest_match(std::string_view text, bool parse_special) const {
  int32_t best = -1;
  uint32_t node = 0;
  for (const char c : text) {
    const int32_t child = child_of(nodes_[node], static_cast<uint8_t>(c));
    if (child < 0) break;
    node = static_cast<uint32_t>(child);
    if (eligible(child, parse_special)) best = child;
  }
  return best;
}

int32_t SpecialTokenSplitter::next_shorter_match(int32_t node, bool parse_special) const {
  for (int32_t shorter = nodes_[static_cast<size_t>(node)].shorter_match; shorter >= 0;
       shorter = nodes_[static_cast<size_t>(shorter)].shorter_match) {
    if (eligible(shorter, parse_special)) return shorter;
  }
  return -1;
}

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;

  // Best remaining match per position, ordered as llama.cpp claims: candidate priority, then
  // position. (At one position all matches are prefixes of each other, so the longest is best.)
  struct Match {
    uint32_t candidate;
    int32_t node;
    size_t position;
  };
  struct ClaimedLater {
    bool operator()(const Match& a, const Match& b) const {
      return a.candidate != b.candidate ? a.candidate > b.candidate : a.position > b.position;
    }
  };
  std::vector<Match> initial;
  if (!candidates_.empty()) {
    for (size_t position = 0; position < text.size(); ++position) {
      const int32_t node = longest_match(text.substr(position), parse_special);
      if (node < 0) continue;
      initial.push_back({static_cast<uint32_t>(nodes_[static_cast<size_t>(node)].candidate), node, position});
    }
  }
  if (initial.empty()) {
    fragments.push_back({-1, 0, text.size()});
    return fragments;
  }
  std::priority_queue<Match, std::vector<Match>, ClaimedLater> queue(ClaimedLater{}, std::move(initial));

  std::vector<uint8_t> claimed(text.size(), 0);
  std::vector<Fragment> matches;
  while (!queue.empty()) {
    const Match match = queue.top();
    queue.pop();
    // Every match at a claimed position covers that byte: the position is done.
    if (claimed[match.position] != 0) continue;
    const Candidate& candidate = candidates_[match.candidate];
    const size_t begin = match.position;
    const size_t end = begin + candidate.length;
    bool free = true;
    for (size_t i = begin; i < end && free; ++i) free = claimed[i] == 0;
    if (!free) {
      if (const int32_t shorter = next_shorter_match(match.node, parse_special); shorter >= 0) {
        queue.push({static_cast<uint32_t>(nodes_[static_cast<size_t>(shorter)].candidate), shorter, begin});
      }
      continue;
    }
    std::fill(claimed.begin() + static_cast<std::ptrdiff_t>(begin), claimed.begin() + static_cast<std::ptrdiff_t>(end), 1);
    if (candidate.lstrip) {
      for (size_t i = begin; i > 0 && claimed[i - 1] == 0 && is_ascii_space(text[i - 1]); --i) claimed[i - 1] = 1;
    }
    if (candidate.rstrip) {
      for (size_t i = end; i < text.size() && claimed[i] == 0 && is_ascii_space(text[i]); ++i) claimed[i] = 1;
    }
    matches.push_back({candidate.token, begin, end});
  }
  std::sort(matches.begin(), matches.end(), [](const Fragment& a, const Fragment& b) { return a.begin < b.begin; });

  auto add_unclaimed_text = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end;) {
      if (claimed[i] != 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < end && claimed[j] == 0) ++j;
      fragments.push_back({-1, i, j});
      i = j;
    }
  };
  size_t cursor = 0;
  for (const Fragment& match : matches) {
    add_unclaimed_text(cursor, match.begin);
    fragments.push_back(match);
    cursor = match.end;
  }
  add_unclaimed_text(cursor, text.size());
  return fragments;
}

}  // namespace mnemo::tokenizer
