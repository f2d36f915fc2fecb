// KvCache, eviction: the next chunk to leave each tier (ranked by kv/eviction_order.h), and how
// it leaves: demoted a tier, shrunk to its global layers, or dropped.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "kv/kv_cache.h"
#include "kv/chunk_reuse.h"

namespace mnemo {

void KvCache::note_dropped(const PrefixIndex::Chunk& c) {
  ++counters_.dropped_chunks;
  if (config_.ghosts_per_chunk == 0) eviction_.observe_drop(c, now());
}

bool KvCache::index_only_device(const PrefixIndex::Chunk& c) const {
  return c.device != kNoBlock && device_alloc_.ref_count(c.device) == 1;
}

bool KvCache::leaves_device_cheaply(const PrefixIndex::Chunk& c) const {
  return c.has(Tier::kHost) || c.has(Tier::kDisk) || c.device_slot != kNoBlock || (compacts_on_device() && compactable(c));
}

std::optional<KvCache::DeviceVictim> KvCache::next_device_victim() const {
  // Blocks that leave cheaply go first, whatever their value: no copy, or a slot's worth.
  const auto cheap = lowest_value(Tier::kDevice, [&](const auto& c) { return index_only_device(c) && leaves_device_cheaply(c); });
  if (cheap) return DeviceVictim{*cheap, false};
  std::optional<DeviceVictim> best;
  const auto block = lowest_value(Tier::kDevice, [&](const auto& c) { return index_only_device(c); });
  if (block) best = DeviceVictim{*block, false};
  if (slabs_.n_used() == 0) return best;  // no compact copy on the device: no second scan
  // Compact copies compete by value: a conversation's leading chunks leave first, compact or not.
  const double t = now();
  const auto slot = eviction_.lowest(index_, PrefixIndex::Copies::kDeviceSlot, [](const auto&) { return true; }, t);
  if (slot && (!best || eviction_.leaves_before(eviction_.score(*slot, t), *slot, eviction_.score(*block, t), *block))) {
    best = DeviceVictim{*slot, true};
  }
  return best;
}

bool KvCache::make_room(int32_t n) {
  index_.expire_pins(now());
  while (device_alloc_.n_free() < n) {
    const auto victim = next_device_victim();
    if (!victim) return false;
    if (victim->slot) {
      evict_device_slot(victim->chunk);
    } else {
      evict_device_copy(victim->chunk);
    }
  }
  return true;
}

void KvCache::compact_on_device(const PrefixIndex::Chunk& c) {
  ++counters_.device_compacted_chunks;
  if (const auto slot = slabs_.allocate()) {
    pack_global_layers(device_.block(c.device), slot_bytes(*slot), device_codec_);
    index_.set_device_slot(c.node, *slot);
    index_.set_device(c.node, kNoBlock);
    device_alloc_.release(c.device);
    return;
  }
  // The block becomes a slab with the chunk in its first slot; the index's reference to the
  // block is now the slab's.
  pack_global_layers(device_.block(c.device), compact_buffer_.data(), device_codec_);
  const SlotId slot = slabs_.add_slab(c.device);
  std::memcpy(slot_bytes(slot), compact_buffer_.data(), compact_bytes());
  index_.set_device_slot(c.node, slot);
  index_.set_device(c.node, kNoBlock);
}

void KvCache::free_device_slot(SlotId slot) {
  const BlockId slab = slabs_.slab_of(slot);
  if (const auto emptied = slabs_.release(slot)) {
    device_alloc_.release(*emptied);
    return;
  }
  // A slab can empty into the others exactly when they have a slab's worth of free slots between
  // them; draining whenever that happens keeps the copies in as few blocks as they fit.
  drain_slab(slab);
}

void KvCache::drain_slab(BlockId slab) {
  const std::vector<SlotId> used = slabs_.used_slots(slab);
  const auto n_used = static_cast<int32_t>(used.size());
  const int32_t free_elsewhere = slabs_.n_free_slots() - (slabs_.slots_per_slab() - n_used);
  if (n_used == 0 || n_used > free_elsewhere) return;
  for (const SlotId from : used) {
    const auto node = index_.node_at_device_slot(from);
    const auto to = slabs_.allocate(/*except=*/slab);
    if (!node || !to) return;  // cannot happen: every used slot is indexed, and the room was counted
    std::memcpy(slot_bytes(*to), slot_bytes(from), compact_bytes());
    index_.set_device_slot(*node, *to);
    if (const auto emptied = slabs_.release(from)) device_alloc_.release(*emptied);
  }
}

void KvCache::evict_device_slot(const PrefixIndex::Chunk& c) {
  const bool only_copy = c.device == kNoBlock && c.host == kNoBlock && c.disk == DiskCopy::kNone;
  if (only_copy) {
    if (make_compact_room(1)) {
      demote_compact(c, slot_bytes(c.device_slot));
    } else if (config_.disk) {
      write_to_disk(c, slot_bytes(c.device_slot), /*compact=*/true, device_codec_);
    }
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.device == kNoBlock && now_c.host == kNoBlock && now_c.disk == DiskCopy::kNone;
  index_.set_device_slot(c.node, kNoBlock);  // may forget the node
  free_device_slot(c.device_slot);
  ++counters_.evicted_chunks;
  ++counters_.evicted_device_copies;
  if (last_copy) note_dropped(c);
}

bool KvCache::compactable(const PrefixIndex::Chunk& c) const {
  return n_global_layers() != 0 && mnemo::compactable(c.position, c.end_chunks, block_size(), config_.sliding_window);
}

void KvCache::pack_global_layers(const uint8_t* block, uint8_t* compact, const KvCodec& codec) const {
  const size_t layer_bytes = codec.layer_bytes();
  for (size_t i = 0; i < config_.global_layers.size(); ++i) {
    std::memcpy(compact + i * layer_bytes, block + static_cast<size_t>(config_.global_layers[i]) * layer_bytes, layer_bytes);
  }
}

void KvCache::unpack_global_layers(const uint8_t* compact, uint8_t* block, const KvCodec& codec) const {
  // Local layers are zeros: never read (out of every query's window), and harmless if a masked
  // kernel loads them.
  std::memset(block, 0, chunk_bytes());
  const size_t layer_bytes = device_codec_.layer_bytes();
  for (size_t i = 0; i < config_.global_layers.size(); ++i) {
    codec.decode(compact + i * codec.layer_bytes(), block + static_cast<size_t>(config_.global_layers[i]) * layer_bytes, 1);
  }
}

void KvCache::demote_compact(const PrefixIndex::Chunk& c, const uint8_t* compact) {
  const BlockId host = (*compact_alloc_.allocate(1))[0];
  host_codec_.encode(compact, compact_.block(host), n_global_layers());
  index_.set_host(c.node, host, /*compact=*/true);
  ++counters_.demoted_chunks;
  counters_.bytes_device_to_host += static_cast<int64_t>(compact_.block_bytes());
}

void KvCache::evict_device_copy(const PrefixIndex::Chunk& c) {
  if (c.device_slot == kNoBlock && compacts_on_device() && compactable(c)) {
    compact_on_device(c);
    return;
  }
  const bool copy_in_memory = c.has(Tier::kHost) || c.device_slot != kNoBlock;
  const bool on_disk = c.has(Tier::kDisk) || c.disk == DiskCopy::kWriting;
  // A remote device's bytes are pulled only for a copy that is made; if they cannot be, the
  // chunk leaves without one (dropped, when it was its last).
  const auto readable = [&] { return pull_device(std::span<const BlockId>(&c.device, 1)); };
  if (!copy_in_memory && !on_disk && readable()) {
    if (compactable(c) && make_compact_room(1)) {
      pack_global_layers(device_.block(c.device), compact_buffer_.data(), device_codec_);
      demote_compact(c, compact_buffer_.data());
    } else if (make_host_room(1)) {
      demote_to_host(c);
    } else if (config_.disk) {
      write_to_disk(c, device_.block(c.device), /*compact=*/false, device_codec_);
    }
  } else if (!copy_in_memory && on_disk && !compactable(c) && host_takes_instead_of_disk(c) && readable()) {
    // Its lower copy is on disk only (written through): a host copy makes its return a copy from
    // memory rather than a read, and keeps the host tier in use.
    demote_to_host(c);
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.host == kNoBlock && now_c.disk == DiskCopy::kNone && now_c.device_slot == kNoBlock;
  index_.set_device(c.node, kNoBlock);  // may forget the node
  device_alloc_.release(c.device);
  ++counters_.evicted_chunks;
  ++counters_.evicted_device_copies;
  if (last_copy) note_dropped(c);
}

void KvCache::demote_to_host(const PrefixIndex::Chunk& c) {
  const BlockId host = (*host_alloc_.allocate(1))[0];
  host_codec_.encode(device_.block(c.device), host_.block(host), layout().n_layers);
  index_.set_host(c.node, host);
  ++counters_.demoted_chunks;
  counters_.bytes_device_to_host += static_cast<int64_t>(host_codec_.block_bytes());
}

bool KvCache::evictable_host_copy(const PrefixIndex::Chunk& c, bool exact) const {
  return !c.host_compact && in_exact_pool(c.host, false) == exact && host_ref_count(c) == 1;
}

bool KvCache::make_host_room(int32_t n, bool exact) {
  index_.expire_pins(now());
  exact = exact && lossy_host_;  // an exact host is its own exact pool
  const BlockAllocator& pool = exact ? exact_alloc_ : host_alloc_;
  if (n > pool.n_blocks()) return false;
  const auto evictable = [&](const PrefixIndex::Chunk& c) { return evictable_host_copy(c, exact); };
  while (pool.n_free() < n) {
    auto victim = lowest_value(Tier::kHost, [&](const PrefixIndex::Chunk& c) { return evictable(c) && copy_outside_host(c); });
    if (!victim) victim = lowest_value(Tier::kHost, evictable);
    if (!victim) return false;
    evict_host_copy(*victim);
  }
  return true;
}

bool KvCache::host_takes_instead_of_disk(const PrefixIndex::Chunk& c) {
  if (host_alloc_.n_free() > 0) return true;
  // Only in place of a host copy that leaves for free (another copy stays) and is worth less.
  const auto victim = lowest_value(Tier::kHost, [&](const PrefixIndex::Chunk& h) {
    return evictable_host_copy(h, /*exact=*/false) && copy_outside_host(h);
  });
  if (!victim) return false;
  const double t = now();
  if (!eviction_.leaves_before(eviction_.score(*victim, t), *victim, eviction_.score(c, t), c)) return false;
  evict_host_copy(*victim);
  return host_alloc_.n_free() > 0;
}

bool KvCache::make_compact_room(int32_t n) {
  index_.expire_pins(now());
  if (n > compact_alloc_.n_blocks()) return false;
  while (compact_alloc_.n_free() < n) {
    const auto victim = lowest_value(Tier::kHost, [&](const PrefixIndex::Chunk& c) {
      return c.host_compact && compact_alloc_.ref_count(c.host) == 1;
    });
    if (!victim) return false;
    evict_host_copy(*victim);
  }
  return true;
}

void KvCache::evict_host_copy(const PrefixIndex::Chunk& c) {
  const HostCopy copy = host_copy(c);
  if (c.device == kNoBlock && c.device_slot == kNoBlock && c.disk == DiskCopy::kNone && config_.disk) {
    if (c.host_compact) {
      write_to_disk(c, copy.bytes, /*compact=*/true, *copy.codec);
    } else if (compactable(c)) {
      std::vector<uint8_t> packed(static_cast<size_t>(n_global_layers()) * copy.codec->layer_bytes());
      pack_global_layers(copy.bytes, packed.data(), *copy.codec);
      write_to_disk(c, packed.data(), /*compact=*/true, *copy.codec);
    } else {
      write_to_disk(c, copy.bytes, /*compact=*/false, *copy.codec);
    }
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.device == kNoBlock && now_c.device_slot == kNoBlock && now_c.disk == DiskCopy::kNone;
  index_.set_host(c.node, kNoBlock);
  copy.pool->release(copy.block);
  ++counters_.evicted_chunks;
  ++counters_.evicted_host_copies;
  if (last_copy) note_dropped(c);
}

}  // namespace mnemo
