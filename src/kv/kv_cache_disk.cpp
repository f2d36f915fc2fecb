// KvCache, the disk tier: room for new extents, chunks written through as they are cached, the
// writer's completions taken in, and the index rebuilt from the extents at start-up.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "kv/kv_cache.h"
#include "kv/chunk_reuse.h"

namespace mnemo {

bool KvCache::make_disk_room(size_t bytes) {
  index_.expire_pins(now());
  DiskTier& disk = *config_.disk;
  if (static_cast<int64_t>(bytes) > disk.capacity_bytes()) return false;
  while (disk.used_bytes() + static_cast<int64_t>(bytes) > disk.capacity_bytes()) {
    const auto victim = lowest_value(Tier::kDisk, [](const PrefixIndex::Chunk&) { return true; });
    if (!victim) return false;  // the rest is still being written
    const bool last_copy = victim->device == kNoBlock && victim->device_slot == kNoBlock && victim->host == kNoBlock;
    disk.remove(victim->key);
    index_.set_disk(victim->node, DiskCopy::kNone);
    ++counters_.evicted_chunks;
    ++counters_.evicted_disk_copies;
    if (last_copy) note_dropped(*victim);
  }
  return true;
}

void KvCache::write_to_disk(const PrefixIndex::Chunk& c, const uint8_t* bytes, bool compact, const KvCodec& codec) {
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
  const int32_t n_layers = compact ? n_global_layers() : layout().n_layers;
  const size_t n = static_cast<size_t>(n_layers) * disk_codec_.layer_bytes();
  const std::span<const uint8_t> source(bytes, static_cast<size_t>(n_layers) * codec.layer_bytes());
  // A conversion to the disk's type runs on the disk's writer thread: the engine thread copies.
  DiskTier::PayloadEncoder encode;
  if (codec.type() != disk_codec_.type()) {
    encode = [from = codec, to = disk_codec_, n_layers](std::span<const uint8_t> in, std::span<uint8_t> out) {
      convert_layers(from, to, in.data(), out.data(), n_layers);
    };
  }
  if (disk.write(header, source, n, std::move(encode))) {
    index_.set_disk(c.node, DiskCopy::kWriting, compact);
    counters_.bytes_to_disk += static_cast<int64_t>(n);
  }
}

void KvCache::take_disk_completions() {
  if (!config_.disk) return;
  for (const auto& [key, ok] : config_.disk->take_completed()) {
    const auto node = index_.find_by_key(key);
    if (extents_to_delete_.erase(key) != 0) {  // its chunk was deleted while it was being written
      if (ok) config_.disk->remove(key);
      if (node && index_.chunk(*node).disk == DiskCopy::kWriting) {
        index_.set_disk(*node, DiskCopy::kNone);
        index_.forget_now(*node);  // deleted: not kept as a ghost
      }
      continue;
    }
    if (!node || index_.chunk(*node).disk != DiskCopy::kWriting) continue;
    index_.set_disk(*node, ok ? DiskCopy::kPresent : DiskCopy::kNone, index_.chunk(*node).disk_compact);
    counters_.disk_written_chunks += ok ? 1 : 0;
  }
}

size_t KvCache::restore_from_disk() {
  if (!config_.disk) return 0;
  size_t restored = 0;
  const double t = now();
  for (const ExtentHeader& h : config_.disk->scan()) {
    if (h.compact && n_global_layers() == 0) {
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

}  // namespace mnemo
