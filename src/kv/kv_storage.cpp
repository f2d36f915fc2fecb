#include "kv/kv_storage.h"

namespace mnemo {

KvStorage::KvStorage(const KvLayout& layout, int32_t n_blocks) : KvStorage(layout, n_blocks, layout.block_bytes()) {}

KvStorage::KvStorage(const KvLayout& layout, int32_t n_blocks, size_t block_bytes)
    : layout_(layout), n_blocks_(n_blocks), block_bytes_(block_bytes), data_(static_cast<size_t>(n_blocks) * block_bytes) {}

}  // namespace mnemo
