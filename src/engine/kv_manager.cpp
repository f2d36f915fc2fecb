#include "engine/kv_manager.h"

#include <cstring>

namespace mnemo {

KvManager::KvManager(const KvLayout& layout, int32_t device_blocks, int32_t host_blocks)
    : device_(layout, device_blocks),
      device_alloc_(device_blocks),
      host_(layout, host_blocks),
      host_alloc_(host_blocks) {}

int32_t KvManager::blocks_needed(const std::vector<BlockId>& table, int32_t begin, int32_t end) const {
  if (end <= begin) return 0;
  const int32_t bs = block_size();
  const int32_t first = begin / bs;
  const int32_t last = (end - 1) / bs;
  int32_t needed = 0;
  for (int32_t b = first; b <= last; ++b) {
    if (b >= static_cast<int32_t>(table.size()) || device_alloc_.ref_count(table[static_cast<size_t>(b)]) > 1) ++needed;
  }
  return needed;
}

bool KvManager::prepare_write(std::vector<BlockId>& table, int32_t begin, int32_t end) {
  const int32_t needed = blocks_needed(table, begin, end);
  auto fresh = device_alloc_.allocate(needed);
  if (!fresh) return false;
  if (end <= begin) return true;
  const int32_t bs = block_size();
  size_t next = 0;
  for (int32_t b = begin / bs; b <= (end - 1) / bs; ++b) {
    if (b >= static_cast<int32_t>(table.size())) {
      table.push_back((*fresh)[next++]);
    } else if (device_alloc_.ref_count(table[static_cast<size_t>(b)]) > 1) {
      // Copy-on-write: this sequence gets its own copy of the shared block.
      const BlockId copy = (*fresh)[next++];
      std::memcpy(device_.block(copy), device_.block(table[static_cast<size_t>(b)]), layout().block_bytes());
      device_alloc_.release(table[static_cast<size_t>(b)]);
      table[static_cast<size_t>(b)] = copy;
    }
  }
  return true;
}

std::vector<BlockId> KvManager::share(const std::vector<BlockId>& table) {
  for (BlockId id : table) device_alloc_.add_ref(id);
  return table;
}

void KvManager::release(std::vector<BlockId>& table) {
  for (BlockId id : table) device_alloc_.release(id);
  table.clear();
}

void KvManager::release_host(std::vector<BlockId>& host_table) {
  for (BlockId id : host_table) host_alloc_.release(id);
  host_table.clear();
}

bool KvManager::swap_out(std::vector<BlockId>& device_table, std::vector<BlockId>& host_table) {
  auto host = host_alloc_.allocate(static_cast<int32_t>(device_table.size()));
  if (!host) return false;
  for (size_t i = 0; i < device_table.size(); ++i) {
    std::memcpy(host_.block((*host)[i]), device_.block(device_table[i]), layout().block_bytes());
  }
  swapped_out_blocks_ += static_cast<int64_t>(device_table.size());
  release(device_table);
  host_table = std::move(*host);
  return true;
}

bool KvManager::swap_in(std::vector<BlockId>& host_table, std::vector<BlockId>& device_table) {
  auto device = device_alloc_.allocate(static_cast<int32_t>(host_table.size()));
  if (!device) return false;
  for (size_t i = 0; i < host_table.size(); ++i) {
    std::memcpy(device_.block((*device)[i]), host_.block(host_table[i]), layout().block_bytes());
  }
  release_host(host_table);
  device_table = std::move(*device);
  return true;
}

}  // namespace mnemo
