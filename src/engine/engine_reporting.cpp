// Engine, what it reports: the KV pool's occupancy and counters published into the metrics
// snapshot after each step, and the snapshot as /metrics reads it.
#include "engine/engine.h"

namespace mnemo {

void Engine::publish_cache_metrics() {
  metrics_.update([&](MetricsSnapshot& m) {
    m.running = static_cast<int64_t>(running_.size());
    m.waiting = static_cast<int64_t>(waiting_.size());
    m.kv_blocks_used = kv_.n_blocks() - kv_.n_available();
    m.kv_blocks_cached = static_cast<int64_t>(kv_.n_cached_blocks(Tier::kDevice));
    m.host_blocks_cached = static_cast<int64_t>(kv_.n_cached_blocks(Tier::kHost));
    m.disk_chunks_cached = static_cast<int64_t>(kv_.n_cached_blocks(Tier::kDisk));
    m.host_compact_blocks_cached = kv_.n_host_compact_used();
    m.device_compact_chunks_cached = kv_.n_device_slots_used();
    m.device_compact_blocks = kv_.n_device_slabs();
    m.chunks_dropped_indexed = static_cast<int64_t>(kv_.n_dropped_chunks());
    if (const DiskTier* disk = kv_.disk()) {
      m.disk_bytes_used = disk->used_bytes();
      m.disk_bytes_total = disk->capacity_bytes();
      m.disk_writes_queued = static_cast<int64_t>(disk->queued());
    }
    const KvCache::Counters& c = kv_.counters();
    const auto tokens = [&](int64_t chunks) { return static_cast<uint64_t>(chunks * config_.block_size); };
    m.cache_device_hit_tokens = tokens(c.device_hit_chunks);
    m.cache_host_hit_tokens = tokens(c.host_hit_chunks);
    m.cache_disk_hit_tokens = tokens(c.disk_hit_chunks);
    m.cache_recomputed_tokens = tokens(c.recomputed_chunks);
    m.cache_demoted_chunks = static_cast<uint64_t>(c.demoted_chunks);
    m.cache_device_compacted_chunks = static_cast<uint64_t>(c.device_compacted_chunks);
    m.cache_ahead_copied_chunks = static_cast<uint64_t>(c.ahead_copied_chunks);
    m.cache_remote_pulled_blocks = static_cast<uint64_t>(c.remote_pulled_blocks);
    m.cache_remote_pushed_blocks = static_cast<uint64_t>(c.remote_pushed_blocks);
    m.cache_remote_failures = static_cast<uint64_t>(c.remote_failures);
    m.cache_evicted_copies = static_cast<uint64_t>(c.evicted_chunks);
    m.cache_dropped_chunks = static_cast<uint64_t>(c.dropped_chunks);
    m.cache_forgotten_chunks = static_cast<uint64_t>(c.forgotten_chunks);
    m.cache_ended_chunks = static_cast<uint64_t>(c.ended_chunks);
    m.cache_pinned_chunks = static_cast<uint64_t>(c.pinned_chunks);
    m.cache_pinned_chunks_now = static_cast<uint64_t>(kv_.n_pinned_chunks());
    m.cache_exported_chunks = static_cast<uint64_t>(c.exported_chunks);
    m.cache_imported_chunks = static_cast<uint64_t>(c.imported_chunks);
    m.cache_disk_written_chunks = static_cast<uint64_t>(c.disk_written_chunks);
    m.cache_disk_corrupt_chunks = static_cast<uint64_t>(c.disk_corrupt_chunks);
    m.bytes_device_to_host = static_cast<uint64_t>(c.bytes_device_to_host);
    m.bytes_host_to_device = static_cast<uint64_t>(c.bytes_host_to_device);
    m.bytes_to_disk = static_cast<uint64_t>(c.bytes_to_disk);
    m.bytes_disk_to_device = static_cast<uint64_t>(c.bytes_disk_to_device);
  });
}

MetricsSnapshot Engine::metrics() const {
  MetricsSnapshot m = metrics_.snapshot();
  if (config_.disk) {
    m.disk_bytes_used = config_.disk->used_bytes();
    m.disk_writes_queued = static_cast<int64_t>(config_.disk->queued());
  }
  return m;
}

}  // namespace mnemo
