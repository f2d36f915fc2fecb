#include "engine/suffix_tree.h"

#include <algorithm>
#include <cassert>

namespace mnemo {

SuffixTree::SuffixTree(Options options) : options_(options), pool_(1) {
  assert(options_.depth >= 2 && options_.min_match >= 1 && options_.max_match >= options_.min_match);
  options_.max_match = std::min(options_.max_match, options_.depth - 1);
}

uint32_t SuffixTree::child(uint32_t parent, TokenId token) const {
  const auto it = edges_.find(edge_key(parent, token));
  return it == edges_.end() ? kNone : it->second;
}

uint32_t SuffixTree::add_child(uint32_t parent, TokenId token) {
  uint32_t index = 0;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
    pool_[index] = Node{};
  } else {
    index = static_cast<uint32_t>(pool_.size());
    pool_.emplace_back();
  }
  Node& node = pool_[index];
  node.token = token;
  node.next_sibling = pool_[parent].first_child;
  pool_[parent].first_child = index;
  edges_.emplace(edge_key(parent, token), index);
  return index;
}

void SuffixTree::insert(std::span<const TokenId> stream, uint32_t stamp) {
  const auto depth = static_cast<size_t>(options_.depth);
  for (size_t start = 0; start < stream.size(); ++start) {
    uint32_t node = kNone;
    for (size_t i = start; i < std::min(stream.size(), start + depth); ++i) {
      uint32_t next = child(node, stream[i]);
      if (next == kNone) next = add_child(node, stream[i]);
      pool_[next].count += 1;
      pool_[next].stamp = std::max(pool_[next].stamp, stamp);
      node = next;
    }
  }
}

void SuffixTree::unlink_and_free(uint32_t parent, uint32_t node) {
  // Counts never grow down a path, so a node at zero has only zero-count descendants: all go.
  uint32_t* link = &pool_[parent].first_child;
  while (*link != node) link = &pool_[*link].next_sibling;
  *link = pool_[node].next_sibling;
  std::vector<std::pair<uint32_t, uint32_t>> doomed{{parent, node}};
  while (!doomed.empty()) {
    const auto [up, index] = doomed.back();
    doomed.pop_back();
    for (uint32_t c = pool_[index].first_child; c != kNone; c = pool_[c].next_sibling) doomed.emplace_back(index, c);
    edges_.erase(edge_key(up, pool_[index].token));
    free_.push_back(index);
  }
}

void SuffixTree::erase(std::span<const TokenId> stream) {
  const auto depth = static_cast<size_t>(options_.depth);
  for (size_t start = 0; start < stream.size(); ++start) {
    uint32_t node = kNone;
    for (size_t i = start; i < std::min(stream.size(), start + depth); ++i) {
      const uint32_t next = child(node, stream[i]);
      assert(next != kNone && pool_[next].count > 0);
      if (next == kNone) break;  // not a stream this tree holds
      if (--pool_[next].count == 0) {
        unlink_and_free(node, next);
        break;
      }
      node = next;
    }
  }
}

uint32_t SuffixTree::count(std::span<const TokenId> substring) const {
  if (substring.empty() || substring.size() > static_cast<size_t>(options_.depth)) return 0;
  uint32_t node = kNone;
  for (const TokenId t : substring) {
    node = child(node, t);
    if (node == kNone) return 0;
  }
  return pool_[node].count;
}

uint32_t SuffixTree::match(std::span<const TokenId> tail, int32_t& depth) const {
  const auto longest = std::min<int32_t>(options_.max_match, static_cast<int32_t>(tail.size()));
  for (int32_t n = longest; n >= options_.min_match; --n) {
    uint32_t node = kNone;
    for (const TokenId t : tail.last(static_cast<size_t>(n))) {
      node = child(node, t);
      if (node == kNone) break;
    }
    if (node != kNone && pool_[node].first_child != kNone) {
      depth = n;
      return node;
    }
  }
  return kNone;
}

uint32_t SuffixTree::best_child(uint32_t node) const {
  uint32_t best = kNone;
  for (uint32_t c = pool_[node].first_child; c != kNone; c = pool_[c].next_sibling) {
    if (best == kNone || pool_[c].count > pool_[best].count ||
        (pool_[c].count == pool_[best].count && pool_[c].stamp > pool_[best].stamp)) {
      best = c;
    }
  }
  return best;
}

int32_t SuffixTree::draft(std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) const {
  if (max_tokens <= 0) return 0;
  // The context's end and the draft so far: what a re-anchoring matches against.
  std::vector<TokenId> tail(context.end() - std::min<ptrdiff_t>(static_cast<ptrdiff_t>(context.size()), options_.max_match),
                            context.end());
  int32_t depth = 0;
  uint32_t node = match(tail, depth);
  double confidence = 1.0;
  int32_t produced = 0;
  while (node != kNone && produced < max_tokens) {
    const uint32_t next = best_child(node);
    if (next == kNone) {
      // Out of depth (a held substring goes no deeper): start again from the draft's end.
      if (depth < options_.depth) break;
      node = match(tail, depth);
      continue;
    }
    confidence *= static_cast<double>(pool_[next].count) / static_cast<double>(pool_[node].count);
    if (confidence < options_.min_confidence) break;
    out.push_back(pool_[next].token);
    tail.push_back(pool_[next].token);
    ++produced;
    node = next;
    ++depth;
  }
  return produced;
}

}  // namespace mnemo
