// The engine's KV blocks: the device pool the forward pass reads, and a host pool to swap
// preempted sequences into (SPEC V6). Block tables live in the sequences; this class grows,
// shares, copies-on-write, swaps and frees them. Check, then commit: every operation that can run
// out of blocks reports it as a value and leaves everything unchanged.
#pragma once

#include <vector>

#include "kv/block_allocator.h"
#include "kv/kv_storage.h"

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

 private:
  KvStorage device_;
  BlockAllocator device_alloc_;
  KvStorage host_;
  BlockAllocator host_alloc_;
  int64_t swapped_out_blocks_ = 0;
};

}  // namespace mnemo
