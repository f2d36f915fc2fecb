// KvManager, cache side: prefix matching across tiers, caching finished chunks, retention by
// value, and the disk tier. See kv_manager.h for the policy.
#include <algorithm>
#include <cstring>

#include "engine/kv_manager.h"

namespace mnemo {

double KvManager::score(const PrefixIndex::Chunk& c, double t) const {
  if (config_.policy == RetentionPolicy::kLru) return c.last_use;
  const int64_t begin = static_cast<int64_t>(c.position) * block_size();
  return config_.cost.retention_value(begin, begin + block_size(), t - c.last_use);
}

std::optional<PrefixIndex::Chunk> KvManager::lowest_value(
    Tier tier, const std::function<bool(const PrefixIndex::Chunk&)>& eligible) const {
  // A linear scan: exact, and cheap next to a forward pass at the pool sizes a CPU serves.
  const double t = now();
  std::optional<PrefixIndex::Chunk> best;
  double best_score = 0;
  index_.for_each_in(tier, [&](const PrefixIndex::Chunk& c) {
    if (!eligible(c)) return;
    const double s = score(c, t);
    // Ties (one conversation's chunks used at once, under LRU): the leading chunk first.
    if (!best || s < best_score || (s == best_score && c.position < best->position)) {
      best = c;
      best_score = s;
    }
  });
  return best;
}

bool KvManager::index_only_device(const PrefixIndex::Chunk& c) const {
  return c.device != kNoBlock && device_alloc_.ref_count(c.device) == 1;
}

bool KvManager::make_room(int32_t n) {
  while (device_alloc_.n_free() < n) {
    // Chunks with a copy below leave for free; among the rest, the lowest value goes.
    auto victim = lowest_value(Tier::kDevice, [&](const PrefixIndex::Chunk& c) {
      return index_only_device(c) && (c.has(Tier::kHost) || c.has(Tier::kDisk));
    });
    if (!victim) victim = lowest_value(Tier::kDevice, [&](const PrefixIndex::Chunk& c) { return index_only_device(c); });
    if (!victim) return false;
    evict_device_copy(*victim);
  }
  return true;
}

void KvManager::evict_device_copy(const PrefixIndex::Chunk& c) {
  if (!c.has(Tier::kHost) && !c.has(Tier::kDisk) && c.disk != DiskCopy::kWriting) {
    if (make_host_room(1)) {
      const BlockId host = (*host_alloc_.allocate(1))[0];
      std::memcpy(host_.block(host), device_.block(c.device), chunk_bytes());
      index_.set_host(c.node, host);
      ++counters_.demoted_chunks;
      counters_.bytes_device_to_host += static_cast<int64_t>(chunk_bytes());
    } else if (config_.disk) {
      write_to_disk(c, device_.block(c.device));
    }
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.host == kNoBlock && now_c.disk == DiskCopy::kNone;
  index_.set_device(c.node, kNoBlock);  // may forget the node
  device_alloc_.release(c.device);
  ++counters_.evicted_chunks;
  counters_.dropped_chunks += last_copy ? 1 : 0;
}

bool KvManager::make_host_room(int32_t n) {
  if (n > host_alloc_.n_blocks()) return false;
  while (host_alloc_.n_free() < n) {
    const auto free_copy = [&](const PrefixIndex::Chunk& c) {
      return host_alloc_.ref_count(c.host) == 1 && (c.device != kNoBlock || c.has(Tier::kDisk));
    };
    auto victim = lowest_value(Tier::kHost, free_copy);
    if (!victim) {
      victim = lowest_value(Tier::kHost, [&](const PrefixIndex::Chunk& c) { return host_alloc_.ref_count(c.host) == 1; });
    }
    if (!victim) return false;
    evict_host_copy(*victim);
  }
  return true;
}

void KvManager::evict_host_copy(const PrefixIndex::Chunk& c) {
  if (c.device == kNoBlock && c.disk == DiskCopy::kNone && config_.disk) write_to_disk(c, host_.block(c.host));
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.device == kNoBlock && now_c.disk == DiskCopy::kNone;
  index_.set_host(c.node, kNoBlock);
  host_alloc_.release(c.host);
  ++counters_.evicted_chunks;
  counters_.dropped_chunks += last_copy ? 1 : 0;
}

bool KvManager::make_disk_room(size_t bytes) {
  DiskTier& disk = *config_.disk;
  if (static_cast<int64_t>(bytes) > disk.capacity_bytes()) return false;
  while (disk.used_bytes() + static_cast<int64_t>(bytes) > disk.capacity_bytes()) {
    const auto victim = lowest_value(Tier::kDisk, [](const PrefixIndex::Chunk&) { return true; });
    if (!victim) return false;  // the rest is still being written
    const bool last_copy = victim->device == kNoBlock && victim->host == kNoBlock;
    disk.remove(victim->key);
    index_.set_disk(victim->node, DiskCopy::kNone);
    ++counters_.evicted_chunks;
    counters_.dropped_chunks += last_copy ? 1 : 0;
  }
  return true;
}

void KvManager::write_to_disk(const PrefixIndex::Chunk& c, const uint8_t* bytes) {
  DiskTier& disk = *config_.disk;
  if (c.disk != DiskCopy::kNone) return;
  const size_t extent = disk.extent_bytes(static_cast<size_t>(block_size()));
  if (!make_disk_room(extent)) return;
  const auto node = index_.chunk(c.node);  // the room made may not touch it: it has no extent
  ExtentHeader header;
  header.key = node.key;
  header.parent_key = node.parent_key;
  header.position = node.position;
  header.ns = index_.chunk_namespace(c.node);
  const auto tokens = index_.chunk_tokens_of(c.node);
  header.tokens.assign(tokens.begin(), tokens.end());
  if (disk.write(header, {bytes, chunk_bytes()})) {
    index_.set_disk(c.node, DiskCopy::kWriting);
    counters_.bytes_to_disk += static_cast<int64_t>(chunk_bytes());
  }
}

void KvManager::take_disk_completions() {
  if (!config_.disk) return;
  for (const auto& [key, ok] : config_.disk->take_completed()) {
    const auto node = index_.find_by_key(key);
    if (!node || index_.chunk(*node).disk != DiskCopy::kWriting) continue;
    index_.set_disk(*node, ok ? DiskCopy::kPresent : DiskCopy::kNone);
    counters_.disk_written_chunks += ok ? 1 : 0;
  }
}

size_t KvManager::restore_from_disk() {
  if (!config_.disk) return 0;
  size_t restored = 0;
  const double t = now();
  for (const ExtentHeader& h : config_.disk->scan()) {
    if (index_.restore(h.ns, h.parent_key, h.key, h.tokens, t)) {
      ++restored;
    } else {
      config_.disk->remove(h.key);  // its parent is gone: nothing can reach it
    }
  }
  return restored;
}

bool KvManager::load_chunk(const PrefixIndex::Chunk& c, BlockId block) {
  if (c.host != kNoBlock) {
    std::memcpy(device_.block(block), host_.block(c.host), chunk_bytes());
    counters_.bytes_host_to_device += static_cast<int64_t>(chunk_bytes());
    ++counters_.host_hit_chunks;
    return true;
  }
  if (c.disk == DiskCopy::kPresent) {
    const Status read = config_.disk->read(c.key, {device_.block(block), chunk_bytes()});
    if (read.ok()) {
      counters_.bytes_disk_to_device += static_cast<int64_t>(chunk_bytes());
      ++counters_.disk_hit_chunks;
      return true;
    }
    // Damaged: never served. The chunk is recomputed like a dropped one.
    ++counters_.disk_corrupt_chunks;
    config_.disk->remove(c.key);
    index_.set_disk(c.node, DiskCopy::kNone);
  }
  return false;
}

PrefixMatch KvManager::match_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks) {
  take_disk_completions();
  PrefixMatch result;
  const std::vector<PrefixIndex::Chunk> chain = index_.match(ns, tokens, max_chunks, now());
  // Pin the chain's device blocks first, so making room for one chunk never evicts another.
  for (const auto& c : chain) {
    if (c.device != kNoBlock) device_alloc_.add_ref(c.device);
  }
  size_t i = 0;
  for (; i < chain.size(); ++i) {
    const PrefixIndex::Chunk& c = chain[i];
    if (c.device != kNoBlock) {
      result.table.push_back(c.device);  // the pin becomes the caller's reference
      ++counters_.device_hit_chunks;
      ++result.device_chunks;
      continue;
    }
    auto fresh = make_room(1) ? device_alloc_.allocate(1) : std::nullopt;
    if (!fresh) break;
    const BlockId block = (*fresh)[0];
    // Making room may have moved this chunk's lower copies: look again.
    const bool known = index_.live(c.node);
    const bool from_host = known && index_.chunk(c.node).host != kNoBlock;
    if (known && load_chunk(index_.chunk(c.node), block)) {
      // The index keeps the device copy too (its lower copies stay: leaving the device is then free).
      index_.set_device(c.node, block);
      device_alloc_.add_ref(block);
      ++(from_host ? result.host_chunks : result.disk_chunks);
    } else {
      result.recompute.push_back(static_cast<int32_t>(i));
      ++counters_.recomputed_chunks;
    }
    result.table.push_back(block);
  }
  for (size_t j = i; j < chain.size(); ++j) {
    if (chain[j].device != kNoBlock) device_alloc_.release(chain[j].device);
  }
  // Chunks to recompute at the end of the match save nothing: the caller computes them anyway.
  while (!result.recompute.empty() && result.recompute.back() + 1 == static_cast<int32_t>(result.table.size())) {
    device_alloc_.release(result.table.back());
    result.table.pop_back();
    result.recompute.pop_back();
    --counters_.recomputed_chunks;
  }
  return result;
}

void KvManager::cache_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t n_valid,
                             const std::vector<BlockId>& table) {
  const size_t whole = std::min(table.size(), static_cast<size_t>(n_valid / block_size()));
  const auto kept = index_.insert(ns, tokens.first(whole * static_cast<size_t>(block_size())),
                                  std::span<const BlockId>(table).first(whole), now());
  for (BlockId id : kept) {
    device_alloc_.add_ref(id);
    if (config_.disk) {
      // Written through: the disk tier holds every cached chunk, so a restart finds them all.
      if (const auto node = index_.node_at(id, Tier::kDevice)) write_to_disk(index_.chunk(*node), device_.block(id));
    }
  }
}

int32_t KvManager::n_available() const {
  int32_t index_only = 0;
  index_.for_each_in(Tier::kDevice, [&](const PrefixIndex::Chunk& c) { index_only += index_only_device(c) ? 1 : 0; });
  return device_alloc_.n_free() + index_only;
}

}  // namespace mnemo
