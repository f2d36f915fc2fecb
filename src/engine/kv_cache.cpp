// KvManager, cache side: prefix matching across tiers, caching finished chunks, retention by
// value, and the disk tier. See kv_manager.h for the policy.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "engine/kv_manager.h"
#include "kv/chunk_reuse.h"

namespace mnemo {

ChunkFacts KvManager::facts_of(const PrefixIndex::Chunk& c) const {
  ChunkFacts f;
  f.last_use = c.last_use;
  f.chunk_tokens = block_size();
  f.end_chunks = std::max(1, c.end_chunks);
  f.bytes = static_cast<int64_t>(conversation_bytes_per_chunk(f.end_chunks));
  return f;
}

double KvManager::conversation_bytes_per_chunk(int32_t end_chunks) const {
  const int32_t global = compact_.layout().n_layers;
  const int32_t window = global == 0 ? 0 : config_.sliding_window;
  const double layer_bytes = static_cast<double>(chunk_bytes()) / layout().n_layers;
  return layer_bytes * layers_per_chunk(end_chunks, block_size(), window, layout().n_layers, global);
}

double KvManager::score(const PrefixIndex::Chunk& c, double t) const {
  switch (config_.policy) {
    case RetentionPolicy::kLru:
      return c.last_use;
    case RetentionPolicy::kMnemo:
      return retention_.log_value(facts_of(c), t);
    case RetentionPolicy::kPensieve:
      break;
  }
  const int64_t begin = static_cast<int64_t>(c.position) * block_size();
  return config_.cost.retention_value(begin, begin + block_size(), t - c.last_use);
}

void KvManager::note_dropped(const PrefixIndex::Chunk& c) {
  ++counters_.dropped_chunks;
  if (config_.policy == RetentionPolicy::kMnemo) retention_.observe_drop(facts_of(c), now());
}

void KvManager::note_returns(const std::vector<PrefixIndex::Chunk>& chain, double t) {
  if (config_.policy != RetentionPolicy::kMnemo) return;
  // Chunks cached together share their facts: one event per run of them. Dropped chunks were
  // reported when they dropped.
  size_t i = 0;
  while (i < chain.size()) {
    if (chain[i].dropped()) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < chain.size() && !chain[j].dropped() && chain[j].last_use == chain[i].last_use &&
           chain[j].end_chunks == chain[i].end_chunks) {
      ++j;
    }
    retention_.observe_return(facts_of(chain[i]), t, static_cast<int32_t>(j - i));
    i = j;
  }
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
    if (!best || leaves_before(s, c, best_score, *best)) {
      best = c;
      best_score = s;
    }
  });
  return best;
}

bool KvManager::leaves_before(double s, const PrefixIndex::Chunk& c, double other_score, const PrefixIndex::Chunk& other) {
  // Ties (values in one flat stretch, or one conversation's chunks): the older, then the leading
  // chunk first.
  if (s != other_score) return s < other_score;
  return c.last_use != other.last_use ? c.last_use < other.last_use : c.position < other.position;
}

bool KvManager::index_only_device(const PrefixIndex::Chunk& c) const {
  return c.device != kNoBlock && device_alloc_.ref_count(c.device) == 1;
}

bool KvManager::leaves_device_cheaply(const PrefixIndex::Chunk& c) const {
  return c.has(Tier::kHost) || c.has(Tier::kDisk) || c.device_slot != kNoBlock || (compacts_on_device() && compactable(c));
}

std::optional<KvManager::DeviceVictim> KvManager::next_device_victim() const {
  // Blocks that leave cheaply go first, whatever their value: no copy, or a slot's worth.
  const auto cheap = lowest_value(Tier::kDevice, [&](const auto& c) { return index_only_device(c) && leaves_device_cheaply(c); });
  if (cheap) return DeviceVictim{*cheap, false};
  std::optional<DeviceVictim> best;
  const auto block = lowest_value(Tier::kDevice, [&](const auto& c) { return index_only_device(c); });
  if (block) best = DeviceVictim{*block, false};
  if (slabs_.n_used() == 0) return best;  // no compact copy on the device: no second scan
  // Compact copies compete by value: a conversation's leading chunks leave first, compact or not.
  const double t = now();
  double best_score = block ? score(*block, t) : 0;
  index_.for_each_device_slot([&](const PrefixIndex::Chunk& c) {
    const double s = score(c, t);
    if (!best || leaves_before(s, c, best_score, best->chunk)) {
      best = DeviceVictim{c, true};
      best_score = s;
    }
  });
  return best;
}

bool KvManager::make_room(int32_t n) {
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

void KvManager::compact_on_device(const PrefixIndex::Chunk& c) {
  ++counters_.device_compacted_chunks;
  if (const auto slot = slabs_.allocate()) {
    pack_global_layers(device_.block(c.device), slot_bytes(*slot));
    index_.set_device_slot(c.node, *slot);
    index_.set_device(c.node, kNoBlock);
    device_alloc_.release(c.device);
    return;
  }
  // The block becomes a slab with the chunk in its first slot; the index's reference to the
  // block is now the slab's.
  pack_global_layers(device_.block(c.device), compact_buffer_.data());
  const SlotId slot = slabs_.add_slab(c.device);
  std::memcpy(slot_bytes(slot), compact_buffer_.data(), compact_bytes());
  index_.set_device_slot(c.node, slot);
  index_.set_device(c.node, kNoBlock);
}

void KvManager::free_device_slot(SlotId slot) {
  const BlockId slab = slabs_.slab_of(slot);
  if (const auto emptied = slabs_.release(slot)) {
    device_alloc_.release(*emptied);
    return;
  }
  // A slab can empty into the others exactly when they have a slab's worth of free slots between
  // them; draining whenever that happens keeps the copies in as few blocks as they fit.
  drain_slab(slab);
}

void KvManager::drain_slab(BlockId slab) {
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

void KvManager::evict_device_slot(const PrefixIndex::Chunk& c) {
  const bool only_copy = c.device == kNoBlock && c.host == kNoBlock && c.disk == DiskCopy::kNone;
  if (only_copy) {
    if (make_compact_room(1)) {
      demote_compact(c, slot_bytes(c.device_slot));
    } else if (config_.disk) {
      write_to_disk(c, slot_bytes(c.device_slot), /*compact=*/true);
    }
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.device == kNoBlock && now_c.host == kNoBlock && now_c.disk == DiskCopy::kNone;
  index_.set_device_slot(c.node, kNoBlock);  // may forget the node
  free_device_slot(c.device_slot);
  ++counters_.evicted_chunks;
  if (last_copy) note_dropped(c);
}

bool KvManager::compactable(const PrefixIndex::Chunk& c) const {
  return compact_.layout().n_layers != 0 && mnemo::compactable(c.position, c.end_chunks, block_size(), config_.sliding_window);
}

void KvManager::pack_global_layers(const uint8_t* block, uint8_t* compact) const {
  const size_t layer_bytes = layout().layer_elems() * layout().element_bytes();
  for (size_t i = 0; i < config_.global_layers.size(); ++i) {
    std::memcpy(compact + i * layer_bytes, block + static_cast<size_t>(config_.global_layers[i]) * layer_bytes, layer_bytes);
  }
}

void KvManager::unpack_global_layers(const uint8_t* compact, uint8_t* block) const {
  // Local layers are zeros: never read (out of every query's window), and harmless if a masked
  // kernel loads them.
  std::memset(block, 0, chunk_bytes());
  const size_t layer_bytes = layout().layer_elems() * layout().element_bytes();
  for (size_t i = 0; i < config_.global_layers.size(); ++i) {
    std::memcpy(block + static_cast<size_t>(config_.global_layers[i]) * layer_bytes, compact + i * layer_bytes, layer_bytes);
  }
}

void KvManager::demote_compact(const PrefixIndex::Chunk& c, const uint8_t* compact) {
  const BlockId host = (*compact_alloc_.allocate(1))[0];
  std::memcpy(compact_.block(host), compact, compact_bytes());
  index_.set_host(c.node, host, /*compact=*/true);
  ++counters_.demoted_chunks;
  counters_.bytes_device_to_host += static_cast<int64_t>(compact_bytes());
}

void KvManager::evict_device_copy(const PrefixIndex::Chunk& c) {
  if (c.device_slot == kNoBlock && compacts_on_device() && compactable(c)) {
    compact_on_device(c);
    return;
  }
  if (!c.has(Tier::kHost) && !c.has(Tier::kDisk) && c.disk != DiskCopy::kWriting && c.device_slot == kNoBlock) {
    if (compactable(c) && make_compact_room(1)) {
      pack_global_layers(device_.block(c.device), compact_buffer_.data());
      demote_compact(c, compact_buffer_.data());
    } else if (make_host_room(1)) {
      const BlockId host = (*host_alloc_.allocate(1))[0];
      std::memcpy(host_.block(host), device_.block(c.device), chunk_bytes());
      index_.set_host(c.node, host);
      ++counters_.demoted_chunks;
      counters_.bytes_device_to_host += static_cast<int64_t>(chunk_bytes());
    } else if (config_.disk) {
      write_to_disk(c, device_.block(c.device), /*compact=*/false);
    }
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.host == kNoBlock && now_c.disk == DiskCopy::kNone && now_c.device_slot == kNoBlock;
  index_.set_device(c.node, kNoBlock);  // may forget the node
  device_alloc_.release(c.device);
  ++counters_.evicted_chunks;
  if (last_copy) note_dropped(c);
}

bool KvManager::make_host_room(int32_t n) {
  if (n > host_alloc_.n_blocks()) return false;
  while (host_alloc_.n_free() < n) {
    const auto free_copy = [&](const PrefixIndex::Chunk& c) {
      return !c.host_compact && host_alloc_.ref_count(c.host) == 1 && (c.device != kNoBlock || c.has(Tier::kDisk));
    };
    auto victim = lowest_value(Tier::kHost, free_copy);
    if (!victim) {
      victim = lowest_value(Tier::kHost, [&](const PrefixIndex::Chunk& c) {
        return !c.host_compact && host_alloc_.ref_count(c.host) == 1;
      });
    }
    if (!victim) return false;
    evict_host_copy(*victim);
  }
  return true;
}

bool KvManager::make_compact_room(int32_t n) {
  if (n > compact_alloc_.n_blocks()) return false;
  while (compact_alloc_.n_free() < n) {
    const auto victim = lowest_value(Tier::kHost, [&](const PrefixIndex::Chunk& c) { return c.host_compact; });
    if (!victim) return false;
    evict_host_copy(*victim);
  }
  return true;
}

void KvManager::evict_host_copy(const PrefixIndex::Chunk& c) {
  if (c.device == kNoBlock && c.device_slot == kNoBlock && c.disk == DiskCopy::kNone && config_.disk) {
    if (c.host_compact) {
      write_to_disk(c, compact_.block(c.host), /*compact=*/true);
    } else if (compactable(c)) {
      pack_global_layers(host_.block(c.host), compact_buffer_.data());
      write_to_disk(c, compact_buffer_.data(), /*compact=*/true);
    } else {
      write_to_disk(c, host_.block(c.host), /*compact=*/false);
    }
  }
  const PrefixIndex::Chunk now_c = index_.chunk(c.node);
  const bool last_copy = now_c.device == kNoBlock && now_c.device_slot == kNoBlock && now_c.disk == DiskCopy::kNone;
  index_.set_host(c.node, kNoBlock);
  (c.host_compact ? compact_alloc_ : host_alloc_).release(c.host);
  ++counters_.evicted_chunks;
  if (last_copy) note_dropped(c);
}

bool KvManager::make_disk_room(size_t bytes) {
  DiskTier& disk = *config_.disk;
  if (static_cast<int64_t>(bytes) > disk.capacity_bytes()) return false;
  while (disk.used_bytes() + static_cast<int64_t>(bytes) > disk.capacity_bytes()) {
    const auto victim = lowest_value(Tier::kDisk, [](const PrefixIndex::Chunk&) { return true; });
    if (!victim) return false;  // the rest is still being written
    const bool last_copy = victim->device == kNoBlock && victim->device_slot == kNoBlock && victim->host == kNoBlock;
    disk.remove(victim->key);
    index_.set_disk(victim->node, DiskCopy::kNone);
    ++counters_.evicted_chunks;
    if (last_copy) note_dropped(*victim);
  }
  return true;
}

void KvManager::write_to_disk(const PrefixIndex::Chunk& c, const uint8_t* bytes, bool compact) {
  DiskTier& disk = *config_.disk;
  if (c.disk != DiskCopy::kNone) return;
  if (compact && disk.compact_payload_bytes() == 0) return;
  const size_t extent = disk.extent_bytes(static_cast<size_t>(block_size()), compact);
  if (!make_disk_room(extent)) return;
  const auto node = index_.chunk(c.node);  // the room made may not touch it: it has no extent
  ExtentHeader header;
  header.key = node.key;
  header.parent_key = node.parent_key;
  header.position = node.position;
  header.ns = index_.chunk_namespace(c.node);
  const auto tokens = index_.chunk_tokens_of(c.node);
  header.tokens.assign(tokens.begin(), tokens.end());
  const size_t n = compact ? compact_bytes() : chunk_bytes();
  if (disk.write(header, {bytes, n})) {
    index_.set_disk(c.node, DiskCopy::kWriting, compact);
    counters_.bytes_to_disk += static_cast<int64_t>(n);
  }
}

void KvManager::take_disk_completions() {
  if (!config_.disk) return;
  for (const auto& [key, ok] : config_.disk->take_completed()) {
    const auto node = index_.find_by_key(key);
    if (extents_to_delete_.erase(key) != 0) {  // its chunk was deleted while it was being written
      if (ok) config_.disk->remove(key);
      if (node && index_.chunk(*node).disk == DiskCopy::kWriting) index_.set_disk(*node, DiskCopy::kNone);
      continue;
    }
    if (!node || index_.chunk(*node).disk != DiskCopy::kWriting) continue;
    index_.set_disk(*node, ok ? DiskCopy::kPresent : DiskCopy::kNone, index_.chunk(*node).disk_compact);
    counters_.disk_written_chunks += ok ? 1 : 0;
  }
}

size_t KvManager::restore_from_disk() {
  if (!config_.disk) return 0;
  size_t restored = 0;
  const double t = now();
  for (const ExtentHeader& h : config_.disk->scan()) {
    if (h.compact && compact_.layout().n_layers == 0) {
      config_.disk->remove(h.key);  // this configuration cannot use it
      continue;
    }
    if (index_.restore(h.ns, h.parent_key, h.key, h.tokens, t, h.compact)) {
      ++restored;
    } else {
      config_.disk->remove(h.key);  // its parent is gone: nothing can reach it
    }
  }
  return restored;
}

KvManager::Loaded KvManager::load_chunk(const PrefixIndex::Chunk& c, BlockId block, bool allow_compact, Tier& from) {
  uint8_t* to = device_.block(block);
  if (c.host != kNoBlock && !c.host_compact) {
    if (config_.layerwise_swap_in) {
      host_alloc_.add_ref(c.host);  // kept until the layer-by-layer copy is done
      pending_loads_.push_back({c.host, block});
    } else {
      std::memcpy(to, host_.block(c.host), chunk_bytes());
    }
    counters_.bytes_host_to_device += static_cast<int64_t>(chunk_bytes());
    from = Tier::kHost;
    return Loaded::kFull;
  }
  const auto read_disk = [&](std::span<uint8_t> out) {
    const Status read = config_.disk->read(c.key, out);
    if (read.ok()) {
      counters_.bytes_disk_to_device += static_cast<int64_t>(out.size());
      from = Tier::kDisk;
      return true;
    }
    // Damaged: never served. The chunk is recomputed like a dropped one.
    ++counters_.disk_corrupt_chunks;
    config_.disk->remove(c.key);
    index_.set_disk(c.node, DiskCopy::kNone);
    return false;
  };
  if (c.disk == DiskCopy::kPresent && !c.disk_compact) return read_disk({to, chunk_bytes()}) ? Loaded::kFull : Loaded::kNothing;
  if (!allow_compact) return Loaded::kNothing;
  if (c.device_slot != kNoBlock) {
    unpack_global_layers(slot_bytes(c.device_slot), to);
    from = Tier::kDevice;
    return Loaded::kCompact;
  }
  if (c.host != kNoBlock) {
    unpack_global_layers(compact_.block(c.host), to);
    counters_.bytes_host_to_device += static_cast<int64_t>(compact_bytes());
    from = Tier::kHost;
    return Loaded::kCompact;
  }
  if (c.disk == DiskCopy::kPresent && read_disk({compact_buffer_.data(), compact_bytes()})) {
    unpack_global_layers(compact_buffer_.data(), to);
    return Loaded::kCompact;
  }
  return Loaded::kNothing;
}

PrefixMatch KvManager::match_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks) {
  take_disk_completions();
  const double t = now();
  const std::vector<PrefixIndex::Chunk> chain = index_.match(ns, tokens, max_chunks, t);
  note_returns(chain, t);
  // Pin the chain's device blocks first, so making room for one chunk never evicts another.
  for (const auto& c : chain) {
    if (c.device != kNoBlock) device_alloc_.add_ref(c.device);
  }
  using Use = ChunkUse;
  std::vector<Use> use(chain.size());
  std::vector<Tier> from(chain.size(), Tier::kDevice);
  for (size_t i = 0; i < chain.size(); ++i) {
    use[i] = chain[i].has_full() ? Use::kFull : chain[i].dropped() ? Use::kRecompute : Use::kCompact;
  }
  // A chunk with only its global layers is usable only where no computed position reads its
  // local layers (kv/chunk_reuse.h: the router predicts this match with the same rules).
  enforce_sliding_windows(use, block_size(), config_.sliding_window);

  PrefixMatch result;
  size_t i = 0;
  for (; i < chain.size(); ++i) {
    const PrefixIndex::Chunk& c = chain[i];
    if (c.device != kNoBlock) {
      result.table.push_back(c.device);  // the pin becomes the caller's reference
      continue;
    }
    auto fresh = make_room(1) ? device_alloc_.allocate(1) : std::nullopt;
    if (!fresh) break;
    const BlockId block = (*fresh)[0];
    result.table.push_back(block);
    // Making room may have moved this chunk's lower copies: look again.
    if (use[i] == Use::kRecompute || !index_.live(c.node)) {
      use[i] = Use::kRecompute;
      continue;
    }
    switch (load_chunk(index_.chunk(c.node), block, /*allow_compact=*/true, from[i])) {
      case Loaded::kFull:
        // The index keeps the device copy too (its lower copies stay: leaving the device is then free).
        index_.set_device(c.node, block);
        device_alloc_.add_ref(block);
        use[i] = Use::kFull;
        break;
      case Loaded::kCompact:
        use[i] = Use::kCompact;  // the sequence's own block: the index keeps its compact copies
        break;
      case Loaded::kNothing:
        use[i] = Use::kRecompute;
        break;
    }
  }
  for (size_t j = i; j < chain.size(); ++j) {
    if (chain[j].device != kNoBlock) device_alloc_.release(chain[j].device);
  }
  use.resize(i);
  enforce_sliding_windows(use, block_size(), config_.sliding_window);  // the match may have ended early, or loads turned out compact
  // Chunks to recompute at the end of the match save nothing: the caller computes them anyway.
  while (!use.empty() && use.back() == Use::kRecompute) {
    device_alloc_.release(result.table.back());
    result.table.pop_back();
    use.pop_back();
  }
  for (size_t p = 0; p < use.size(); ++p) {
    if (use[p] == Use::kRecompute) {
      result.recompute.push_back(static_cast<int32_t>(p));
      ++counters_.recomputed_chunks;
      continue;
    }
    if (use[p] == Use::kCompact) result.partial.push_back(static_cast<int32_t>(p));
    switch (from[p]) {
      case Tier::kDevice:
        ++result.device_chunks;
        ++counters_.device_hit_chunks;
        break;
      case Tier::kHost:
        ++result.host_chunks;
        ++counters_.host_hit_chunks;
        break;
      case Tier::kDisk:
        ++result.disk_chunks;
        ++counters_.disk_hit_chunks;
        break;
    }
  }
  return result;
}

void KvManager::cache_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t n_valid,
                             const std::vector<BlockId>& table, std::span<const int32_t> partial_chunks) {
  const size_t whole = std::min(table.size(), static_cast<size_t>(n_valid / block_size()));
  const auto adoptable = [&](size_t chunk) {
    return std::find(partial_chunks.begin(), partial_chunks.end(), static_cast<int32_t>(chunk)) == partial_chunks.end();
  };
  const double t = now();
  const auto kept = index_.insert(ns, tokens.first(whole * static_cast<size_t>(block_size())),
                                  std::span<const BlockId>(table).first(whole), t, adoptable);
  if (config_.policy == RetentionPolicy::kMnemo && whole > 0) {
    // The whole path is idle from now on, as one conversation of `whole` chunks.
    PrefixIndex::Chunk path_end;
    path_end.last_use = t;
    path_end.end_chunks = static_cast<int32_t>(whole);
    retention_.observe_insert(facts_of(path_end), t, static_cast<int32_t>(whole));
  }
  for (BlockId id : kept) {
    device_alloc_.add_ref(id);
    if (config_.disk) {
      // Written through: the disk tier holds every cached chunk, so a restart finds them all.
      // A chunk already a window before its conversation's end goes compact.
      if (const auto node = index_.node_at(id, Tier::kDevice)) {
        const PrefixIndex::Chunk c = index_.chunk(*node);
        if (compactable(c) && config_.disk->compact_payload_bytes() != 0) {
          pack_global_layers(device_.block(id), compact_buffer_.data());
          write_to_disk(c, compact_buffer_.data(), /*compact=*/true);
        } else {
          write_to_disk(c, device_.block(id), /*compact=*/false);
        }
      }
    }
  }
}

int32_t KvManager::forget(uint64_t ns, std::span<const TokenId> tokens, int32_t keep_chunks) {
  take_disk_completions();
  const std::vector<PrefixIndex::NodeId> path = index_.path(ns, tokens);
  if (static_cast<int32_t>(path.size()) <= keep_chunks) return 0;
  // Leaves first: a chunk goes only once nothing below it is left. What is cached below the
  // path's end goes too when it is one chain (this conversation's own tail, which a re-rendered
  // history may not match token for token); where it branches, other conversations continue
  // from there (a shared system prompt), and it stays.
  std::vector<PrefixIndex::NodeId> order = index_.descendants(path.back());
  const bool one_chain = index_.n_children(path.back()) <= 1 &&
                         std::all_of(order.begin(), order.end(), [&](auto node) { return index_.n_children(node) <= 1; });
  if (!one_chain) order.clear();
  for (size_t i = path.size(); i-- > static_cast<size_t>(std::max(0, keep_chunks));) order.push_back(path[i]);
  const double t = now();
  int32_t forgotten = 0;
  // Children deleted by this call that stay in the index until their extent is written.
  std::unordered_map<PrefixIndex::NodeId, int32_t> pending_children;
  for (const PrefixIndex::NodeId node : order) {
    if (!index_.live(node)) continue;
    const auto pending = pending_children.find(node);
    if (index_.n_children(node) != (pending == pending_children.end() ? 0 : pending->second)) continue;
    const PrefixIndex::Chunk c = index_.chunk(node);
    BlockAllocator& host_pool = c.host_compact ? compact_alloc_ : host_alloc_;
    const bool in_use = (c.device != kNoBlock && device_alloc_.ref_count(c.device) > 1) ||
                        (c.host != kNoBlock && host_pool.ref_count(c.host) > 1);
    if (in_use) continue;
    // An extent still being written goes once written (take_disk_completions); until then the
    // node keeps only that pending copy, which no match can read.
    if (c.disk == DiskCopy::kWriting) extents_to_delete_.insert(c.key);
    if (config_.policy == RetentionPolicy::kMnemo) retention_.observe_drop(facts_of(c), t);
    // Each copy goes; removing the last forgets the node.
    if (c.disk == DiskCopy::kPresent) {
      config_.disk->remove(c.key);
      index_.set_disk(node, DiskCopy::kNone);
    }
    if (c.host != kNoBlock) {
      index_.set_host(node, kNoBlock);
      host_pool.release(c.host);
    }
    if (c.device != kNoBlock) {
      index_.set_device(node, kNoBlock);
      device_alloc_.release(c.device);
    }
    if (c.device_slot != kNoBlock) {
      index_.set_device_slot(node, kNoBlock);
      free_device_slot(c.device_slot);
    }
    // Still indexed (its extent or a child's is being written): gone once the writes land.
    if (index_.live(node) && c.parent_key != 0) {
      if (const auto parent = index_.find_by_key(c.parent_key)) ++pending_children[*parent];
    }
    ++forgotten;
  }
  counters_.forgotten_chunks += forgotten;
  return forgotten;
}

namespace {
// The key of chunk `chunks - 1` of `tokens` (0 for none): the chain of PrefixIndex::chunk_key.
uint64_t key_of_prefix(uint64_t ns, std::span<const TokenId> tokens, size_t chunk_tokens, size_t chunks) {
  uint64_t key = 0;
  for (size_t i = 0; i < chunks; ++i) key = PrefixIndex::chunk_key(key, ns, tokens.subspan(i * chunk_tokens, chunk_tokens));
  return key;
}
}  // namespace

KvManager::ExportedPrefix KvManager::export_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks,
                                                   int32_t first_chunk, std::vector<uint8_t> staging) {
  take_disk_completions();
  ExportedPrefix out;
  out.payload = std::move(staging);
  out.payload.clear();
  out.first_chunk = std::max(0, first_chunk);
  const std::vector<PrefixIndex::NodeId> path = index_.path(ns, tokens);
  const size_t n = std::min(path.size(), static_cast<size_t>(std::max(0, max_chunks)));
  const auto first = static_cast<size_t>(out.first_chunk);
  if (n <= first) return out;
  out.payload.reserve((n - first) * chunk_bytes());
  for (size_t i = first; i < n; ++i) {
    const PrefixIndex::Chunk c = index_.chunk(path[i]);
    const size_t at = out.payload.size();
    out.payload.resize(at + chunk_bytes());
    uint8_t* to = out.payload.data() + at;
    if (c.device != kNoBlock) {
      std::memcpy(to, device_.block(c.device), chunk_bytes());
    } else if (c.host != kNoBlock && !c.host_compact) {
      std::memcpy(to, host_.block(c.host), chunk_bytes());
    } else if (c.disk != DiskCopy::kPresent || c.disk_compact || !config_.disk->read(c.key, {to, chunk_bytes()}).ok()) {
      out.payload.resize(at);  // a gap: the chunks after it are useless without it
      break;
    }
    ++out.chunks;
  }
  const auto bs = static_cast<size_t>(block_size());
  out.parent_key = first == 0 ? 0 : index_.chunk(path[first - 1]).key;
  out.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(first * bs),
                    tokens.begin() + static_cast<ptrdiff_t>((first + static_cast<size_t>(out.chunks)) * bs));
  counters_.exported_chunks += out.chunks;
  return out;
}

KvManager::ExportedPrefix KvManager::export_blocks(uint64_t ns, std::span<const TokenId> tokens, std::span<const BlockId> table,
                                                   int32_t first_chunk, int32_t end_chunk, std::vector<uint8_t> staging) {
  ExportedPrefix out;
  out.payload = std::move(staging);
  out.payload.clear();
  const auto bs = static_cast<size_t>(block_size());
  const size_t end = std::min({static_cast<size_t>(std::max(0, end_chunk)), table.size(), tokens.size() / bs});
  const auto first = static_cast<size_t>(std::max(0, first_chunk));
  out.first_chunk = static_cast<int32_t>(first);
  if (end <= first) return out;
  out.chunks = static_cast<int32_t>(end - first);
  out.parent_key = key_of_prefix(ns, tokens, bs, first);
  out.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(first * bs), tokens.begin() + static_cast<ptrdiff_t>(end * bs));
  out.payload.resize((end - first) * chunk_bytes());
  for (size_t i = first; i < end; ++i) std::memcpy(out.payload.data() + (i - first) * chunk_bytes(), device_.block(table[i]), chunk_bytes());
  counters_.exported_chunks += out.chunks;
  return out;
}

Result<int32_t> KvManager::import_prefix(uint64_t ns, std::span<const TokenId> tokens, std::span<const uint8_t> payload,
                                         uint64_t parent_key, int32_t first_position) {
  const auto chunk_tokens = static_cast<size_t>(block_size());
  if (tokens.size() % chunk_tokens != 0) {
    return make_error("KV import: {} tokens are not whole chunks of {}", tokens.size(), chunk_tokens);
  }
  const size_t n = tokens.size() / chunk_tokens;
  if (payload.size() != n * chunk_bytes()) {
    return make_error("KV import: {} bytes of KV for {} chunks of {} bytes", payload.size(), n, chunk_bytes());
  }
  if ((parent_key == 0) != (first_position == 0) || first_position < 0) {
    return make_error("KV import: chunks from position {} need the key of the chunk before them", first_position);
  }
  take_disk_completions();
  // Where the chunks hang: the root, or an indexed chunk (dropped or not: a dropped parent is
  // recomputed when used, SPEC P5) at the position before the first.
  const auto find_parent = [&]() -> std::optional<PrefixIndex::NodeId> {
    if (parent_key == 0) return PrefixIndex::kNoParent;
    const auto node = index_.find_by_key(parent_key);
    if (!node || index_.chunk_namespace(*node) != ns || index_.chunk(*node).position != first_position - 1) return std::nullopt;
    return node;
  };
  const auto walk = [&](PrefixIndex::NodeId parent) {  // the indexed part of the chunks' path
    std::vector<PrefixIndex::NodeId> nodes;
    for (size_t i = 0; i < n; ++i) {
      const auto child = index_.child(parent, ns, tokens.subspan(i * chunk_tokens, chunk_tokens));
      if (!child) break;
      nodes.push_back(parent = *child);
    }
    return nodes;
  };
  std::optional<PrefixIndex::NodeId> parent = find_parent();
  if (!parent) return make_error(ErrorCode::kNotFound, "KV import: the chunk before position {} is not cached here", first_position);
  // Room first, for the chunks that lack a copy now. Making room may evict any cached chunk, this
  // path's too, so the path is walked only afterwards, rebuilt where eviction removed it; a chunk
  // found without a copy then takes one of the blocks, and the import stops where they run out
  // (never leaving a node without a copy and without children).
  int32_t wanted = 0;
  {
    const std::vector<PrefixIndex::NodeId> existing = walk(*parent);
    wanted = static_cast<int32_t>(n - existing.size());
    for (const PrefixIndex::NodeId node : existing) wanted += index_.chunk(node).dropped() ? 1 : 0;
  }
  const bool to_host = host_alloc_.n_blocks() > 0;
  BlockAllocator& pool = to_host ? host_alloc_ : device_alloc_;
  std::vector<BlockId> blocks;
  if (wanted > 0) {
    std::optional<std::vector<BlockId>> got;
    if (to_host ? make_host_room(wanted) : make_room(wanted)) got = pool.allocate(wanted);
    if (!got) return make_error(ErrorCode::kResourceExhausted, "KV import: no room for {} chunks in the {} tier", wanted, to_host ? "host" : "device");
    blocks = std::move(*got);
  }
  parent = find_parent();
  if (!parent) {  // making room dropped the parent's last trace
    for (BlockId b : blocks) pool.release(b);
    return make_error(ErrorCode::kNotFound, "KV import: the chunk before position {} left the cache", first_position);
  }
  const double t = now();
  std::vector<PrefixIndex::NodeId> path;
  int32_t inserted = 0;
  size_t next_block = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto chunk = tokens.subspan(i * chunk_tokens, chunk_tokens);
    const PrefixIndex::NodeId at = path.empty() ? *parent : path.back();
    const std::optional<PrefixIndex::NodeId> found = index_.child(at, ns, chunk);
    if (found && !index_.chunk(*found).dropped()) {
      path.push_back(*found);
      continue;
    }
    if (next_block == blocks.size()) break;  // eviction took more than was planned for
    const PrefixIndex::NodeId node =
        found ? *found : index_.extend(at, ns, chunk, first_position + static_cast<int32_t>(i), t);
    const BlockId block = blocks[next_block++];
    std::memcpy(to_host ? host_.block(block) : device_.block(block), payload.data() + i * chunk_bytes(), chunk_bytes());
    if (to_host) {
      index_.set_host(node, block);
    } else {
      index_.set_device(node, block);  // the allocation's reference is the index's
    }
    path.push_back(node);
    ++inserted;
  }
  for (size_t b = next_block; b < blocks.size(); ++b) pool.release(blocks[b]);
  index_.mark_path_end(path);
  // Not written through, unlike the chunks computed here: an import is another instance's copy
  // (a replica, a transfer), which keeps its own durable one, and writing and syncing a file per
  // chunk received cost replication more than the copy. An imported chunk reaches this disk tier
  // when the host tier evicts it, as any host copy does.
  if (config_.policy == RetentionPolicy::kMnemo && !path.empty()) {
    PrefixIndex::Chunk path_end;
    path_end.last_use = t;
    path_end.end_chunks = first_position + static_cast<int32_t>(path.size());
    retention_.observe_insert(facts_of(path_end), t, static_cast<int32_t>(path.size()));
  }
  counters_.imported_chunks += inserted;
  return inserted;
}

int32_t KvManager::n_available() const {
  int32_t index_only = 0;
  index_.for_each_in(Tier::kDevice, [&](const PrefixIndex::Chunk& c) { index_only += index_only_device(c) ? 1 : 0; });
  // A slab's copies can always leave (nothing pins them), and its block with them.
  return device_alloc_.n_free() + index_only + slabs_.n_slabs();
}

}  // namespace mnemo
