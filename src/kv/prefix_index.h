// An index of cached KV by token prefix (SPEC V4, P2, M1 index API): a trie whose edges are whole
// chunks of `chunk_tokens` tokens (one chunk = one KV block), keyed by a namespace (the tenant's
// cache salt) so that one tenant's prefix never matches another's. Each node records where the KV
// of its chunk (given the whole path above it) is: a device block or a host block.
//
// Device-free metadata: the index only maps token chunks to block ids and keeps the order of use.
// Who holds references to blocks is the allocator's business; the engine adds a reference for
// every block the index keeps (insert() returns them) and drops it when the index evicts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_layout.h"

namespace mnemo {

using TokenId = int32_t;

enum class Tier : uint8_t { kDevice, kHost };

class PrefixIndex {
 public:
  struct Chunk {
    int32_t node;
    Tier tier;
    BlockId block;
  };

  explicit PrefixIndex(int32_t chunk_tokens);

  int32_t chunk_tokens() const { return chunk_tokens_; }
  size_t size() const { return live_nodes_; }

  // The chunks of the longest cached prefix of `tokens` (whole chunks, at most `max_chunks`), in
  // order, wherever they are; marks them used at `now`.
  std::vector<Chunk> match(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks, uint64_t now);

  // Records the whole chunks of `tokens` whose KV is in the device `blocks` (blocks[i] holds
  // chunk i). Chunks already indexed keep their block. Returns the blocks the index newly keeps.
  std::vector<BlockId> insert(uint64_t ns, std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                              uint64_t now);

  // The least recently used chunk in `tier` that `evictable` accepts (its block is not used by a
  // sequence) and, when `leaves_only`, has no children (a dropped chunk's descendants would be
  // unreachable). nullopt if none.
  std::optional<Chunk> least_recently_used(Tier tier, bool leaves_only,
                                           const std::function<bool(BlockId)>& evictable) const;
  // The chunk's KV moved (device <-> host).
  void relocate(int32_t node, Tier tier, BlockId block);
  // Forgets a leaf chunk (its KV is dropped).
  void remove_leaf(int32_t node);

  // Compatibility shorthand: drops up to `n` least recently used device leaves `evictable`
  // accepts and returns their blocks.
  std::vector<BlockId> evict(int32_t n, const std::function<bool(BlockId)>& evictable);

  // Whether the index keeps this block of this tier.
  bool holds(BlockId block, Tier tier = Tier::kDevice) const;
  size_t size(Tier tier) const;

 private:
  static constexpr int32_t kRoot = -1;
  struct Node {
    int32_t parent = kRoot;
    uint64_t ns = 0;
    uint64_t key = 0;              // hash of (parent key, chunk tokens)
    std::vector<TokenId> tokens;   // the chunk, to rule out hash collisions
    BlockId block = kNoBlock;
    Tier tier = Tier::kDevice;
    int32_t children = 0;
    uint64_t last_use = 0;
    bool live = false;
  };

  uint64_t chunk_key(uint64_t parent_key, uint64_t ns, std::span<const TokenId> chunk) const;
  int32_t find_child(int32_t parent, uint64_t key, std::span<const TokenId> chunk) const;
  static int64_t location_key(Tier tier, BlockId block) {
    return (static_cast<int64_t>(tier) << 32) | static_cast<uint32_t>(block);
  }

  int32_t chunk_tokens_;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_nodes_;
  std::unordered_multimap<uint64_t, int32_t> by_key_;
  std::unordered_map<int64_t, int32_t> by_location_;
  size_t live_nodes_ = 0;
};

}  // namespace mnemo
