// KvCache, prefixes: a prompt's longest cached prefix brought to the device from whichever tier
// holds each chunk (dropped ones handed back for recompute, SPEC P5), finished chunks offered to
// the index, a conversation forgotten from every tier, and one its client ended.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "kv/kv_cache.h"
#include "kv/chunk_reuse.h"

namespace mnemo {

KvCache::Loaded KvCache::load_chunk(const PrefixIndex::Chunk& c, BlockId block, bool allow_compact, Tier& from) {
  uint8_t* to = device_.block(block);
  if (c.host != kNoBlock && !c.host_compact) {
    const HostCopy copy = host_copy(c);
    if (config_.layerwise_swap_in) {
      copy.pool->add_ref(copy.block);  // kept until the layer-by-layer copy is done
      pending_loads_.push_back({c.host, block});
    } else {
      copy.codec->decode(copy.bytes, to, layout().n_layers);
    }
    counters_.bytes_host_to_device += static_cast<int64_t>(static_cast<size_t>(layout().n_layers) * copy.codec->layer_bytes());
    from = Tier::kHost;
    return Loaded::kFull;
  }
  // Reads the extent, of the disk's type, into `out` in the device's form.
  const auto read_disk = [&](int32_t n_layers, uint8_t* out) {
    const size_t bytes = static_cast<size_t>(n_layers) * disk_codec_.layer_bytes();
    uint8_t* landing = disk_codec_.is_identity() ? out : disk_buffer_.data();
    const Status read = config_.disk->read(c.key, {landing, bytes});
    if (read.ok()) {
      if (landing != out) disk_codec_.decode(landing, out, n_layers);
      counters_.bytes_disk_to_device += static_cast<int64_t>(bytes);
      from = Tier::kDisk;
      return true;
    }
    // Damaged: never served. The chunk is recomputed like a dropped one.
    ++counters_.disk_corrupt_chunks;
    config_.disk->remove(c.key);
    index_.set_disk(c.node, DiskCopy::kNone);
    return false;
  };
  if (c.disk == DiskCopy::kPresent && !c.disk_compact) return read_disk(layout().n_layers, to) ? Loaded::kFull : Loaded::kNothing;
  if (!allow_compact) return Loaded::kNothing;
  if (c.device_slot != kNoBlock) {
    unpack_global_layers(slot_bytes(c.device_slot), to, device_codec_);
    from = Tier::kDevice;
    return Loaded::kCompact;
  }
  if (c.host != kNoBlock) {
    unpack_global_layers(compact_.block(c.host), to, host_codec_);
    counters_.bytes_host_to_device += static_cast<int64_t>(compact_.block_bytes());
    from = Tier::kHost;
    return Loaded::kCompact;
  }
  if (c.disk == DiskCopy::kPresent && read_disk(n_global_layers(), compact_buffer_.data())) {
    unpack_global_layers(compact_buffer_.data(), to, device_codec_);
    return Loaded::kCompact;
  }
  return Loaded::kNothing;
}

PrefixMatch KvCache::match_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t max_chunks) {
  take_disk_completions();
  const double t = now();
  std::vector<PrefixIndex::Chunk> chain = index_.match(ns, tokens, max_chunks, t);
  eviction_.observe_returns(chain, t);
  // Ghosts at the end of the path were observed; there is nothing to bring back.
  while (!chain.empty() && chain.back().dropped()) chain.pop_back();
  // Pin the chain's device blocks and host copies first, so making room for one chunk never
  // evicts another (a device block pushed to the host must not push out the chunk brought next).
  for (const auto& c : chain) {
    if (c.device != kNoBlock) device_alloc_.add_ref(c.device);
    if (c.host != kNoBlock) add_host_ref(c.host, c.host_compact);
  }
  std::vector<ChunkUse> use(chain.size());
  std::vector<Tier> from(chain.size(), Tier::kDevice);
  for (size_t i = 0; i < chain.size(); ++i) {
    use[i] = chain[i].has_full() ? ChunkUse::kFull : chain[i].dropped() ? ChunkUse::kRecompute : ChunkUse::kCompact;
  }
  // A chunk with only its global layers is usable only where no computed position reads its
  // local layers (kv/chunk_reuse.h: the router predicts this match with the same rules).
  enforce_sliding_windows(use, block_size(), config_.sliding_window);
  // Without SPEC P5 (the tail-first baseline) nothing from a missing chunk on (dropped, or
  // compact where a computed position reads it) is reused: the match ends there.
  if (!eviction_.reuses_after_gap()) {
    const auto gap = static_cast<size_t>(std::find(use.begin(), use.end(), ChunkUse::kRecompute) - use.begin());
    for (size_t j = gap; j < chain.size(); ++j) {
      if (chain[j].device != kNoBlock) device_alloc_.release(chain[j].device);
      if (chain[j].host != kNoBlock) release_host(chain[j].host, chain[j].host_compact);
    }
    chain.resize(gap);
    use.resize(gap);
    from.resize(gap);
  }

  PrefixMatch result;
  const size_t brought = bring_to_device(chain, use, from, result.table);
  for (const auto& c : chain) {
    if (c.host != kNoBlock) release_host(c.host, c.host_compact);
  }
  for (size_t j = brought; j < chain.size(); ++j) {
    if (chain[j].device != kNoBlock) device_alloc_.release(chain[j].device);
  }
  use.resize(brought);
  enforce_sliding_windows(use, block_size(), config_.sliding_window);  // the match may have ended early, or loads turned out compact
  // Chunks to recompute at the end of the match save nothing: the caller computes them anyway.
  while (!use.empty() && use.back() == ChunkUse::kRecompute) {
    device_alloc_.release(result.table.ids_.back());
    result.table.ids_.pop_back();
    use.pop_back();
  }
  account_match(use, from, result);
  return result;
}

size_t KvCache::bring_to_device(const std::vector<PrefixIndex::Chunk>& chain, std::vector<ChunkUse>& use,
                                std::vector<Tier>& from, KvTable& table) {
  size_t i = 0;
  std::vector<size_t> loaded;  // chain positions written into fresh device blocks here
  for (; i < chain.size(); ++i) {
    const PrefixIndex::Chunk& c = chain[i];
    if (c.device != kNoBlock) {
      table.ids_.push_back(c.device);  // the pin becomes the caller's reference
      continue;
    }
    auto fresh = make_room(1) ? device_alloc_.allocate(1) : std::nullopt;
    if (!fresh) break;
    const BlockId block = (*fresh)[0];
    table.ids_.push_back(block);
    // Making room may have moved this chunk's lower copies, or dropped it from the index (its id
    // is then stale: PrefixIndex ids carry a generation): look again.
    if (use[i] == ChunkUse::kRecompute || !index_.live(c.node)) {
      use[i] = ChunkUse::kRecompute;
      continue;
    }
    switch (load_chunk(index_.chunk(c.node), block, /*allow_compact=*/true, from[i])) {
      case Loaded::kFull:
        // The index keeps the device copy too (its lower copies stay: leaving the device is then free).
        index_.set_device(c.node, block);
        device_alloc_.add_ref(block);
        use[i] = ChunkUse::kFull;
        break;
      case Loaded::kCompact:
        use[i] = ChunkUse::kCompact;  // the sequence's own block: the index keeps its compact copies
        break;
      case Loaded::kNothing:
        use[i] = ChunkUse::kRecompute;
        break;
    }
    if (use[i] != ChunkUse::kRecompute) loaded.push_back(i);
  }
  push_loaded(chain, loaded, use, table);
  return i;
}

void KvCache::push_loaded(const std::vector<PrefixIndex::Chunk>& chain, const std::vector<size_t>& loaded,
                          std::vector<ChunkUse>& use, const KvTable& table) {
  if (config_.remote_device == nullptr) return;  // the loads wrote the device's own bytes
  std::vector<BlockId> blocks;
  for (size_t i : loaded) blocks.push_back(table[i]);
  if (push_device(blocks)) return;
  // The workers do not have these chunks' bytes: recomputed, and the index forgets the device
  // copies it was given (their lower copies stay).
  for (size_t i : loaded) {
    if (use[i] == ChunkUse::kFull && index_.live(chain[i].node) && index_.chunk(chain[i].node).device == table[i]) {
      index_.set_device(chain[i].node, kNoBlock);
      device_alloc_.release(table[i]);
    }
    use[i] = ChunkUse::kRecompute;
  }
}

void KvCache::account_match(const std::vector<ChunkUse>& use, const std::vector<Tier>& from, PrefixMatch& result) {
  for (size_t p = 0; p < use.size(); ++p) {
    if (use[p] == ChunkUse::kRecompute) {
      result.recompute.push_back(static_cast<int32_t>(p));
      ++counters_.recomputed_chunks;
      continue;
    }
    if (use[p] == ChunkUse::kCompact) result.partial.push_back(static_cast<int32_t>(p));
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
}

void KvCache::cache_prefix(uint64_t ns, std::span<const TokenId> tokens, int32_t n_valid,
                             const KvTable& table, std::span<const int32_t> partial_chunks) {
  const size_t whole = std::min(table.size(), static_cast<size_t>(n_valid / block_size()));
  const auto adoptable = [&](size_t chunk) {
    return std::find(partial_chunks.begin(), partial_chunks.end(), static_cast<int32_t>(chunk)) == partial_chunks.end();
  };
  const double t = now();
  const auto kept = index_.insert(ns, tokens.first(whole * static_cast<size_t>(block_size())),
                                  table.blocks().first(whole), t, adoptable);
  eviction_.observe_insert(static_cast<int32_t>(whole), static_cast<int32_t>(whole), t);
  // Written through to disk below: a remote device's bytes first (if the workers cannot send
  // them, the chunks stay cached without a durable copy).
  const bool write_through = config_.disk && pull_device(kept);
  for (BlockId id : kept) {
    device_alloc_.add_ref(id);
    if (write_through) {
      // Written through: the disk tier holds every cached chunk, so a restart finds them all.
      // A chunk already a window before its conversation's end goes compact.
      if (const auto node = index_.node_at(id, Tier::kDevice)) {
        const PrefixIndex::Chunk c = index_.chunk(*node);
        if (compactable(c) && config_.disk->compact_payload_bytes() != 0) {
          pack_global_layers(device_.block(id), compact_buffer_.data(), device_codec_);
          write_to_disk(c, compact_buffer_.data(), /*compact=*/true, device_codec_);
        } else {
          write_to_disk(c, device_.block(id), /*compact=*/false, device_codec_);
        }
      }
    }
  }
}

int32_t KvCache::forget(uint64_t ns, std::span<const TokenId> tokens, int32_t keep_chunks) {
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
    const bool in_use = (c.device != kNoBlock && device_alloc_.ref_count(c.device) > 1) ||
                        (c.host != kNoBlock && host_ref_count(c) > 1);
    if (in_use) continue;
    // An extent still being written goes once written (take_disk_completions); until then the
    // node keeps only that pending copy, which no match can read.
    if (c.disk == DiskCopy::kWriting) extents_to_delete_.insert(c.key);
    // Its observation ends here (with ghosts, when the index forgets it: the listener).
    if (config_.ghosts_per_chunk == 0 && !c.dropped()) eviction_.observe_drop(c, t);
    // Each copy goes; removing the last forgets the node.
    if (c.disk == DiskCopy::kPresent) {
      config_.disk->remove(c.key);
      index_.set_disk(node, DiskCopy::kNone);
    }
    if (c.host != kNoBlock) {
      index_.set_host(node, kNoBlock);
      release_host(c.host, c.host_compact);
    }
    if (c.device != kNoBlock) {
      index_.set_device(node, kNoBlock);
      device_alloc_.release(c.device);
    }
    if (c.device_slot != kNoBlock) {
      index_.set_device_slot(node, kNoBlock);
      free_device_slot(c.device_slot);
    }
    index_.forget_now(node);  // deleted: not kept as a ghost
    // Still indexed (its extent or a child's is being written): gone once the writes land.
    if (index_.live(node) && c.parent_key != 0) {
      if (const auto parent = index_.find_by_key(c.parent_key)) ++pending_children[*parent];
    }
    ++forgotten;
  }
  counters_.forgotten_chunks += forgotten;
  return forgotten;
}

int32_t KvCache::end_conversation(uint64_t ns, std::span<const TokenId> tokens) {
  const std::vector<PrefixIndex::NodeId> path = index_.path(ns, tokens);
  // The conversation's own chunks: from its end back to where another branch leaves the path
  // (a shared system prompt, or an earlier turn another conversation forked from), which
  // someone else may still come back for.
  std::vector<PrefixIndex::Chunk> own;
  for (size_t i = path.size(); i-- > 0;) {
    if (index_.n_children(path[i]) > 1) break;
    own.push_back(index_.chunk(path[i]));
  }
  eviction_.observe_end(own, now());
  for (const PrefixIndex::Chunk& c : own) index_.set_ended(c.node);
  counters_.ended_chunks += static_cast<int64_t>(own.size());
  return static_cast<int32_t>(own.size());
}

int32_t KvCache::pin_conversation(uint64_t ns, std::span<const TokenId> tokens, double ttl_seconds) {
  if (ttl_seconds <= 0) return 0;
  const std::vector<PrefixIndex::NodeId> path = index_.path(ns, tokens);
  const double until = now() + ttl_seconds;
  for (const PrefixIndex::NodeId node : path) index_.pin(node, until);
  counters_.pinned_chunks += static_cast<int64_t>(path.size());
  return static_cast<int32_t>(path.size());
}

}  // namespace mnemo
