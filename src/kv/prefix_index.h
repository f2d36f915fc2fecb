// An index of cached KV by token prefix (SPEC V4, M1 index API): a trie whose edges are whole
// chunks of `chunk_tokens` tokens (one chunk = one KV block), keyed by a namespace (the tenant's
// cache salt) so that one tenant's prefix never matches another's. Each node holds the block with
// the KV of its chunk, given the whole path above it.
//
// Device-free metadata: the index only maps token chunks to block ids and keeps the order of use.
// Who holds references to blocks is the allocator's business; the engine adds a reference for
// every block the index keeps (insert() returns them) and drops it when the index evicts.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_layout.h"

namespace mnemo {

using TokenId = int32_t;

class PrefixIndex {
 public:
  explicit PrefixIndex(int32_t chunk_tokens);

  int32_t chunk_tokens() const { return chunk_tokens_; }
  size_t size() const { return live_nodes_; }

  // Blocks of the longest cached prefix of `tokens` (whole chunks, at most `max_chunks`), and
  // marks them used at `now`.
  std::vector<BlockId> match(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks, uint64_t now);

  // Records the whole chunks of `tokens` whose KV is in `blocks` (blocks[i] holds chunk i).
  // Chunks already indexed keep their block. Returns the blocks the index newly keeps.
  std::vector<BlockId> insert(uint64_t ns, std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                              uint64_t now);

  // Removes up to `n` chunks, least recently used leaves first (a chunk's KV is useless without
  // the chunks before it, so only leaves go), skipping those whose block `evictable` rejects
  // (still used by a sequence). Returns the removed chunks' blocks.
  std::vector<BlockId> evict(int32_t n, const std::function<bool(BlockId)>& evictable);

  // Whether the index keeps `block` (tests and accounting).
  bool holds(BlockId block) const;

 private:
  static constexpr int32_t kRoot = -1;
  struct Node {
    int32_t parent = kRoot;
    uint64_t ns = 0;
    uint64_t key = 0;              // hash of (parent key, chunk tokens)
    std::vector<TokenId> tokens;   // the chunk, to rule out hash collisions
    BlockId block = kNoBlock;
    int32_t children = 0;
    uint64_t last_use = 0;
    bool live = false;
  };

  uint64_t chunk_key(uint64_t parent_key, uint64_t ns, std::span<const TokenId> chunk) const;
  int32_t find_child(int32_t parent, uint64_t key, std::span<const TokenId> chunk) const;
  void remove(int32_t node);

  int32_t chunk_tokens_;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  std::unordered_multimap<uint64_t, int32_t> by_key_;
  std::unordered_map<BlockId, int32_t> by_block_;
  size_t live_nodes_ = 0;
};

}  // namespace mnemo
