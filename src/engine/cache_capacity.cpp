#include "engine/cache_capacity.h"

namespace mnemo {

int64_t cache_capacity_tokens(const EngineConfig& config) {
  int64_t chunks = int64_t{config.kv_blocks} + config.host_swap_blocks + config.host_exact_blocks + config.host_compact_blocks;
  if (config.disk) {
    chunks += config.disk->capacity_bytes() / static_cast<int64_t>(config.disk->extent_bytes(static_cast<size_t>(config.block_size)));
  }
  return chunks * config.block_size;
}

}  // namespace mnemo
