#include "kv/block_allocator.h"

#include "util/check.h"

namespace mnemo {

BlockAllocator::BlockAllocator(int32_t n_blocks) : ref_counts_(static_cast<size_t>(n_blocks), 0) {
  free_.reserve(static_cast<size_t>(n_blocks));
  for (BlockId id = n_blocks - 1; id >= 0; --id) free_.push_back(id);  // hands out 0, 1, 2, ...
}

std::optional<std::vector<BlockId>> BlockAllocator::allocate(int32_t n) {
  if (n < 0 || n > n_free()) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = free_.back();
    free_.pop_back();
    ref_counts_[static_cast<size_t>(id)] = 1;
    out.push_back(id);
  }
  return out;
}

void BlockAllocator::add_ref(BlockId id) {
  // A reference to a free block is a bookkeeping bug upstream: fail loudly, never corrupt.
  MNEMO_CHECK(id >= 0 && id < n_blocks() && ref_counts_[static_cast<size_t>(id)] > 0, "block {} is not allocated", id);
  ++ref_counts_[static_cast<size_t>(id)];
}

void BlockAllocator::release(BlockId id) {
  MNEMO_CHECK(id >= 0 && id < n_blocks() && ref_counts_[static_cast<size_t>(id)] > 0, "block {} is not allocated", id);
  if (--ref_counts_[static_cast<size_t>(id)] == 0) free_.push_back(id);
}

}  // namespace mnemo
