// Device-free bookkeeping of a pool of blocks: a free list and reference counts. Blocks shared
// by several sequences (prefix sharing, parallel sampling) have ref_count > 1; a block returns to
// the free list when its last reference is released. Check, then commit: allocate() reports "no
// room" as a value and changes nothing in that case.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/kv_layout.h"

namespace mnemo {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }

  // n fresh blocks with ref_count 1, or nullopt (and no change) if fewer than n are free.
  std::optional<std::vector<BlockId>> allocate(int32_t n);
  void add_ref(BlockId id);
  void release(BlockId id);  // drops one reference; frees the block at zero
  int32_t ref_count(BlockId id) const { return ref_counts_[static_cast<size_t>(id)]; }

 private:
  std::vector<int32_t> ref_counts_;
  std::vector<BlockId> free_;  // a stack: the most recently freed block is reused first
};

}  // namespace mnemo
