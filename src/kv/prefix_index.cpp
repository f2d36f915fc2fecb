#include "kv/prefix_index.h"

#include <algorithm>

#include "util/check.h"

namespace mnemo {
namespace {

// SplitMix64 finaliser: cheap, well mixed; equal keys are confirmed by comparing tokens.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixIndex::PrefixIndex(int32_t chunk_tokens) : chunk_tokens_(chunk_tokens) {
  MNEMO_CHECK(chunk_tokens > 0, "chunk size {}", chunk_tokens);
}

uint64_t PrefixIndex::chunk_key(uint64_t parent_key, uint64_t ns, std::span<const TokenId> chunk) const {
  uint64_t h = mix(parent_key ^ mix(ns));
  for (TokenId t : chunk) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

int32_t PrefixIndex::find_child(int32_t parent, uint64_t key, std::span<const TokenId> chunk) const {
  auto [begin, end] = by_key_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    const Node& n = nodes_[static_cast<size_t>(it->second)];
    if (n.parent == parent && std::equal(n.tokens.begin(), n.tokens.end(), chunk.begin(), chunk.end())) return it->second;
  }
  return kRoot;
}

std::vector<PrefixIndex::Chunk> PrefixIndex::match(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks,
                                                   uint64_t now) {
  std::vector<Chunk> out;
  int32_t parent = kRoot;
  uint64_t parent_key = 0;
  const int32_t n_chunks = std::min<int32_t>(max_chunks, static_cast<int32_t>(tokens.size()) / chunk_tokens_);
  for (int32_t c = 0; c < n_chunks; ++c) {
    const auto chunk = tokens.subspan(static_cast<size_t>(c) * static_cast<size_t>(chunk_tokens_), static_cast<size_t>(chunk_tokens_));
    const uint64_t key = chunk_key(parent_key, ns, chunk);
    const int32_t node = find_child(parent, key, chunk);
    if (node == kRoot) break;
    Node& n = nodes_[static_cast<size_t>(node)];
    if (n.ns != ns) break;
    n.last_use = now;
    out.push_back({node, n.tier, n.block});
    parent = node;
    parent_key = key;
  }
  return out;
}

std::vector<BlockId> PrefixIndex::insert(uint64_t ns, std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                                         uint64_t now) {
  std::vector<BlockId> kept;
  int32_t parent = kRoot;
  uint64_t parent_key = 0;
  const size_t n_chunks = std::min(blocks.size(), tokens.size() / static_cast<size_t>(chunk_tokens_));
  for (size_t c = 0; c < n_chunks; ++c) {
    const auto chunk = tokens.subspan(c * static_cast<size_t>(chunk_tokens_), static_cast<size_t>(chunk_tokens_));
    const uint64_t key = chunk_key(parent_key, ns, chunk);
    int32_t node = find_child(parent, key, chunk);
    if (node == kRoot) {
      if (by_location_.count(location_key(Tier::kDevice, blocks[c])) != 0) break;  // it holds another chunk
      if (free_nodes_.empty()) {
        node = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
      } else {
        node = free_nodes_.back();
        free_nodes_.pop_back();
      }
      Node& n = nodes_[static_cast<size_t>(node)];
      n = Node{parent, ns, key, std::vector<TokenId>(chunk.begin(), chunk.end()), blocks[c], Tier::kDevice, 0, now, true};
      if (parent != kRoot) ++nodes_[static_cast<size_t>(parent)].children;
      by_key_.emplace(key, node);
      by_location_.emplace(location_key(Tier::kDevice, blocks[c]), node);
      ++live_nodes_;
      kept.push_back(blocks[c]);
    } else {
      nodes_[static_cast<size_t>(node)].last_use = now;
    }
    parent = node;
    parent_key = key;
  }
  return kept;
}

void PrefixIndex::remove_leaf(int32_t node) {
  Node& n = nodes_[static_cast<size_t>(node)];
  MNEMO_CHECK(n.live && n.children == 0, "removing node {} with {} children", node, n.children);
  auto [begin, end] = by_key_.equal_range(n.key);
  for (auto it = begin; it != end; ++it) {
    if (it->second == node) {
      by_key_.erase(it);
      break;
    }
  }
  by_location_.erase(location_key(n.tier, n.block));
  if (n.parent != kRoot) --nodes_[static_cast<size_t>(n.parent)].children;
  n.live = false;
  n.tokens.clear();
  free_nodes_.push_back(node);
  --live_nodes_;
}

void PrefixIndex::relocate(int32_t node, Tier tier, BlockId block) {
  Node& n = nodes_[static_cast<size_t>(node)];
  MNEMO_CHECK(n.live, "relocating dead node {}", node);
  by_location_.erase(location_key(n.tier, n.block));
  n.tier = tier;
  n.block = block;
  by_location_.emplace(location_key(tier, block), node);
}

std::optional<PrefixIndex::Chunk> PrefixIndex::least_recently_used(Tier tier, bool leaves_only,
                                                                   const std::function<bool(BlockId)>& evictable) const {
  // A linear scan: simple and exact; the retention policy (issue: Pensieve's cost-aware eviction)
  // replaces it with an ordered structure.
  int32_t victim = kRoot;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (!node.live || node.tier != tier || (leaves_only && node.children != 0) || !evictable(node.block)) continue;
    if (victim == kRoot || node.last_use < nodes_[static_cast<size_t>(victim)].last_use) victim = static_cast<int32_t>(i);
  }
  if (victim == kRoot) return std::nullopt;
  const Node& v = nodes_[static_cast<size_t>(victim)];
  return Chunk{victim, v.tier, v.block};
}

std::vector<BlockId> PrefixIndex::evict(int32_t n, const std::function<bool(BlockId)>& evictable) {
  std::vector<BlockId> out;
  while (static_cast<int32_t>(out.size()) < n) {
    const auto victim = least_recently_used(Tier::kDevice, /*leaves_only=*/true, evictable);
    if (!victim) break;
    out.push_back(victim->block);
    remove_leaf(victim->node);
  }
  return out;
}

bool PrefixIndex::holds(BlockId block, Tier tier) const { return by_location_.count(location_key(tier, block)) != 0; }

size_t PrefixIndex::size(Tier tier) const {
  size_t n = 0;
  for (const Node& node : nodes_) n += node.live && node.tier == tier ? 1 : 0;
  return n;
}

}  // namespace mnemo
