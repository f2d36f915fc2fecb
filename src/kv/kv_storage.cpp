#include "kv/kv_storage.h"

namespace mnemo {

KvStorage::KvStorage(const KvLayout& layout, int32_t n_blocks)
    : layout_(layout),
      n_blocks_(n_blocks),
      // Zeroed so that a slot never written reads as 0, not garbage (and sanitizers stay quiet).
      data_(new uint8_t[static_cast<size_t>(n_blocks) * layout.block_bytes()]()) {}

}  // namespace mnemo
