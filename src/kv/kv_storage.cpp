#include "kv/kv_storage.h"

namespace mnemo {

KvStorage::KvStorage(const KvLayout& layout, int32_t n_blocks)
    : layout_(layout), n_blocks_(n_blocks), data_(static_cast<size_t>(n_blocks) * layout.block_bytes()) {}

}  // namespace mnemo
