#include "engine/kv_manager.h"

#include <algorithm>
#include <cstring>

namespace mnemo {

KvManager::KvManager(const KvLayout& layout, int32_t device_blocks, int32_t host_blocks)
    : device_(layout, device_blocks),
      device_alloc_(device_blocks),
      host_(layout, host_blocks),
      host_alloc_(host_blocks),
      index_(layout.block_size) {}

bool KvManager::make_room(int32_t n) {
  const auto index_only = [&](BlockId id) { return device_alloc_.ref_count(id) == 1; };
  while (device_alloc_.n_free() < n) {
    const auto victim = index_.least_recently_used(Tier::kDevice, /*leaves_only=*/false, index_only);
    if (!victim) return false;
    if (demote(*victim)) continue;
    // No host room: drop a device leaf instead (its KV is gone; its tokens recompute later).
    const auto leaf = index_.least_recently_used(Tier::kDevice, /*leaves_only=*/true, index_only);
    if (!leaf) return false;
    index_.remove_leaf(leaf->node);
    device_alloc_.release(leaf->block);
    ++counters_.dropped_blocks;
  }
  return true;
}

bool KvManager::demote(const PrefixIndex::Chunk& chunk) {
  if (host_alloc_.n_free() == 0 && !drop_host_leaf()) return false;
  auto host = host_alloc_.allocate(1);
  if (!host) return false;
  std::memcpy(host_.block((*host)[0]), device_.block(chunk.block), layout().block_bytes());
  index_.relocate(chunk.node, Tier::kHost, (*host)[0]);
  device_alloc_.release(chunk.block);
  ++counters_.demoted_blocks;
  return true;
}

bool KvManager::drop_host_leaf() {
  const auto leaf = index_.least_recently_used(Tier::kHost, /*leaves_only=*/true,
                                               [&](BlockId id) { return host_alloc_.ref_count(id) == 1; });
  if (!leaf) return false;
  index_.remove_leaf(leaf->node);
  host_alloc_.release(leaf->block);
  ++counters_.dropped_blocks;
  return true;
}

int32_t KvManager::n_available() const {
  int32_t index_only = 0;
  for (BlockId id = 0; id < device_alloc_.n_blocks(); ++id) {
    if (device_alloc_.ref_count(id) == 1 && index_.holds(id, Tier::kDevice)) ++index_only;
  }
  return device_alloc_.n_free() + index_only;
}

std::vector<BlockId> KvManager::match_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_blocks) {
  const std::vector<PrefixIndex::Chunk> chain = index_.match(ns, tokens, max_blocks, ++clock_);
  // Pin the whole chain first, so making room for one chunk never evicts another of it.
  for (const auto& c : chain) (c.tier == Tier::kDevice ? device_alloc_ : host_alloc_).add_ref(c.block);
  std::vector<BlockId> table;
  for (size_t i = 0; i < chain.size(); ++i) {
    const PrefixIndex::Chunk& c = chain[i];
    if (c.tier == Tier::kDevice) {
      table.push_back(c.block);  // the pin becomes the caller's reference
      ++counters_.device_hit_blocks;
      continue;
    }
    // On the host: copy it back to a device block, which the index then keeps.
    auto device = make_room(1) ? device_alloc_.allocate(1) : std::nullopt;
    if (!device) {
      for (size_t j = i; j < chain.size(); ++j) {
        (chain[j].tier == Tier::kDevice ? device_alloc_ : host_alloc_).release(chain[j].block);
      }
      break;
    }
    const BlockId block = (*device)[0];
    std::memcpy(device_.block(block), host_.block(c.block), layout().block_bytes());
    index_.relocate(c.node, Tier::kDevice, block);
    host_alloc_.release(c.block);  // the pin
    host_alloc_.release(c.block);  // the index's host copy
    device_alloc_.add_ref(block);  // the caller's reference (the allocation is the index's)
    table.push_back(block);
    ++counters_.host_hit_blocks;
  }
  return table;
}

void KvManager::cache_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t n_computed,
                             const std::vector<BlockId>& table) {
  const size_t whole = std::min(table.size(), static_cast<size_t>(n_computed / block_size()));
  const auto kept = index_.insert(ns, tokens.first(whole * static_cast<size_t>(block_size())),
                                  std::span<const BlockId>(table).first(whole), ++clock_);
  for (BlockId id : kept) device_alloc_.add_ref(id);
}

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
  if (!make_room(needed)) return false;
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
  if (!make_room(static_cast<int32_t>(host_table.size()))) return false;
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
