// The bytes of a pool of KV blocks (the device tier on the CPU backend: one region of RAM; the
// host tier: another). Bookkeeping (which block is free, shared, cached) lives apart, in
// BlockAllocator and above.
#pragma once

#include <cstdint>

#include "kv/kv_layout.h"
#include "util/anonymous_memory.h"

namespace mnemo {

class KvStorage {
 public:
  KvStorage(const KvLayout& layout, int32_t n_blocks);
  // Blocks of `block_bytes` each: copies of the layout's blocks in another element type
  // (kv/kv_codec.h), whose keys() and values() are not the layout's and are not to be used.
  KvStorage(const KvLayout& layout, int32_t n_blocks, size_t block_bytes);

  const KvLayout& layout() const { return layout_; }
  int32_t n_blocks() const { return n_blocks_; }

  size_t block_bytes() const { return block_bytes_; }
  uint8_t* block(BlockId id) { return data_.data() + static_cast<size_t>(id) * block_bytes_; }
  const uint8_t* block(BlockId id) const { return data_.data() + static_cast<size_t>(id) * block_bytes_; }

  // [slot][dim] planes of one head in one layer of one block, of the layout's element type.
  void* keys(BlockId id, int32_t layer, int32_t head) { return element(id, layout_.k_offset(layer, head)); }
  void* values(BlockId id, int32_t layer, int32_t head) { return element(id, layout_.v_offset(layer, head)); }
  const void* keys(BlockId id, int32_t layer, int32_t head) const {
    return const_cast<KvStorage*>(this)->keys(id, layer, head);
  }
  const void* values(BlockId id, int32_t layer, int32_t head) const {
    return const_cast<KvStorage*>(this)->values(id, layer, head);
  }

 private:
  void* element(BlockId id, size_t offset) { return block(id) + offset * layout_.element_bytes(); }

  KvLayout layout_;
  int32_t n_blocks_;
  size_t block_bytes_;
  // Pages are zero and only become resident when first written, so a large pool costs nothing
  // until it is used; huge pages where the kernel has them (attention streams the pool).
  AnonymousMemory data_;
};

}  // namespace mnemo
