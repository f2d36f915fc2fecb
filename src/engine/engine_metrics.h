// Counters and histograms the engine updates and the HTTP server exports (/metrics). Written by
// the engine thread, read by any thread: guarded by a mutex, snapshotted for reading.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

namespace mnemo {

struct Histogram {
  std::vector<double> bounds;  // upper bounds of the buckets (the last bucket is +Inf)
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double value);
};

// Speculative decoding's drafters, as metrics label them (engine/drafter.h).
inline constexpr std::array<const char*, 2> kDrafterNames = {"prompt_lookup", "tenant_history"};
enum DrafterIndex : size_t { kPromptLookupDrafter = 0, kTenantHistoryDrafter = 1 };

struct MetricsSnapshot {
  uint64_t requests_total = 0;
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t prefix_cache_hit_tokens = 0;
  uint64_t preemptions_total = 0;
  uint64_t swaps_total = 0;
  uint64_t steps_total = 0;
  // Per sequence and pass that sampled: 1. Generated tokens over these are the tokens a
  // sequence gets per forward pass (above 1 with speculative decoding).
  uint64_t decode_passes_total = 0;
  std::array<uint64_t, kDrafterNames.size()> spec_draft_tokens{};     // per drafter: verified
  std::array<uint64_t, kDrafterNames.size()> spec_accepted_tokens{};  // and kept
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_used = 0;    // referenced by sequences
  int64_t kv_blocks_cached = 0;  // kept by the prefix index (reusable, evictable when unused)
  int64_t host_blocks_cached = 0;
  int64_t host_blocks_total = 0;        // of the host's type and, beside a lossy host, of the device's
  int64_t host_exact_blocks_total = 0;  // of the device's type beside a lossy host
  int64_t host_compact_blocks_cached = 0;  // global-layer-only copies of sliding-window history
  int64_t host_compact_blocks_total = 0;
  int64_t device_compact_chunks_cached = 0;  // the same on the device, in slots of shared blocks
  int64_t device_compact_blocks = 0;         // device blocks those slots take
  int64_t disk_chunks_cached = 0;
  int64_t disk_bytes_used = 0;
  int64_t disk_bytes_total = 0;
  int64_t disk_writes_queued = 0;
  int64_t chunks_dropped_indexed = 0;  // dropped chunks the index still knows (recomputable)
  uint64_t cache_device_hit_tokens = 0;
  uint64_t cache_host_hit_tokens = 0;
  uint64_t cache_disk_hit_tokens = 0;
  uint64_t cache_recomputed_tokens = 0;
  uint64_t cache_demoted_chunks = 0;
  uint64_t cache_device_compacted_chunks = 0;
  uint64_t cache_ahead_copied_chunks = 0;
  // Model parallelism (kv/remote_device.h): blocks the cache pulled from and pushed to the
  // workers, and operations they could not do.
  uint64_t cache_remote_pulled_blocks = 0;
  uint64_t cache_remote_pushed_blocks = 0;
  uint64_t cache_remote_failures = 0;
  uint64_t cache_evicted_copies = 0;
  uint64_t cache_dropped_chunks = 0;
  uint64_t cache_forgotten_chunks = 0;
  uint64_t cache_ended_chunks = 0;
  uint64_t cache_pinned_chunks = 0;      // pins set or extended (cache_control ttl)
  uint64_t cache_pinned_chunks_now = 0;  // chunks pinned at the moment
  uint64_t cache_exported_chunks = 0;  // sent to other instances
  uint64_t cache_imported_chunks = 0;  // received from other instances
  uint64_t cache_disk_written_chunks = 0;
  uint64_t cache_disk_corrupt_chunks = 0;
  uint64_t persisted_running_chunks = 0;  // cached as requests filled them (persist_running)
  uint64_t bytes_device_to_host = 0;
  uint64_t bytes_host_to_device = 0;
  uint64_t bytes_to_disk = 0;
  uint64_t bytes_disk_to_device = 0;
  int64_t kv_blocks_total = 0;
  // Engine-thread time spent on work other threads posted (KV exports and imports for transfers
  // and replicas, forgets): what moving KV costs the model's own thread.
  double engine_task_seconds = 0;
  Histogram ttft_seconds;
  Histogram tpot_seconds;
  Histogram batch_tokens;
};

class EngineMetrics {
 public:
  EngineMetrics();
  template <class F>
  void update(F&& f) {
    std::lock_guard lock(mutex_);
    f(data_);
  }
  MetricsSnapshot snapshot() const {
    std::lock_guard lock(mutex_);
    return data_;
  }

 private:
  mutable std::mutex mutex_;
  MetricsSnapshot data_;  // guarded by mutex_
};

}  // namespace mnemo
