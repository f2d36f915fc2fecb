// The engine's KV blocks: the device pool the forward pass reads, a host pool (swapped-out
// sequences, SPEC V6, and cached chunks, SPEC P2), and the prefix index (SPEC V4) that keeps
// finished sequences' blocks for reuse by any later request with the same prefix. Block tables
// live in the sequences; this class grows, shares, copies-on-write, swaps and frees them.
//
// When the device pool runs short, cached chunks no sequence uses move to the host pool (least
// recently used first); when the host pool is full, its least recently used leaf chunks are
// dropped. A match that finds chunks on the host copies them back. Check, then commit: every
// operation that can run out of blocks reports it as a value and leaves everything unchanged.
#pragma once

#include <vector>

#include <span>

#include "kv/block_allocator.h"
#include "kv/kv_storage.h"
#include "kv/prefix_index.h"

namespace mnemo {

class KvManager {
 public:
  KvManager(const KvLayout& layout, int32_t device_blocks, int32_t host_blocks);

  const KvLayout& layout() const { return device_.layout(); }
  KvStorage& device() { return device_; }
  int32_t block_size() const { return device_.layout().block_size; }
  int32_t n_free() const { return device_alloc_.n_free(); }
  int32_t n_blocks() const { return device_alloc_.n_blocks(); }
  int32_t n_host_free() const { return host_alloc_.n_free(); }

  // Blocks that writing positions [begin, end) would need: new ones past the table's end plus
  // copies of shared ones (copy-on-write).
  int32_t blocks_needed(const std::vector<BlockId>& table, int32_t begin, int32_t end) const;
  // Makes positions [begin, end) writable by this table alone. False (and no change) if the pool
  // lacks the blocks.
  bool prepare_write(std::vector<BlockId>& table, int32_t begin, int32_t end);

  // Another reference to every block of `table` (a forked sequence shares them).
  std::vector<BlockId> share(const std::vector<BlockId>& table);
  void release(std::vector<BlockId>& table);
  void release_host(std::vector<BlockId>& host_table);

  // Moves a table to host blocks and back. False (and no change) without room.
  bool swap_out(std::vector<BlockId>& device_table, std::vector<BlockId>& host_table);
  bool swap_in(std::vector<BlockId>& host_table, std::vector<BlockId>& device_table);

  int64_t swapped_out_blocks() const { return swapped_out_blocks_; }

  // Blocks holding the longest cached prefix of `tokens` (whole blocks, at most max_blocks),
  // each with a new reference for the caller's table.
  std::vector<BlockId> match_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_blocks);
  // Offers the whole blocks of a sequence's computed tokens to the index.
  void cache_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t n_computed, const std::vector<BlockId>& table);
  // Free blocks plus blocks only the index holds (what an allocation could get).
  int32_t n_available() const;
  size_t n_cached_blocks(Tier tier) const { return index_.size(tier); }

  struct CacheCounters {
    int64_t device_hit_blocks = 0;  // matched chunks found on the device
    int64_t host_hit_blocks = 0;    // matched chunks brought back from the host
    int64_t demoted_blocks = 0;     // cached chunks moved device -> host
    int64_t dropped_blocks = 0;     // cached chunks whose KV was discarded
  };
  const CacheCounters& counters() const { return counters_; }

 private:
  // Frees device blocks by moving (or, without host room, dropping) cached chunks no sequence
  // uses, until `n` are free. False if it cannot.
  bool make_room(int32_t n);
  bool demote(const PrefixIndex::Chunk& chunk);
  bool drop_host_leaf();

  KvStorage device_;
  BlockAllocator device_alloc_;
  KvStorage host_;
  BlockAllocator host_alloc_;
  PrefixIndex index_;
  uint64_t clock_ = 0;  // logical time of index use
  CacheCounters counters_;
  int64_t swapped_out_blocks_ = 0;
};

}  // namespace mnemo
