// One instance's KV cache in a simulation: serve's own KvCache (src/kv), built as `mnemo serve`
// builds it (the same pools, policy, retention options, ghosts, copies ahead of need and a disk
// tier written through), with a KV layout that keeps what the bookkeeping depends on (block size,
// layer count, which layers are global) and shrinks only the bytes: every tier holds as many
// chunks as the real model's bytes would give it. Driven per request as the engine drives it, by
// the simulation's clock and with no model: a request's prompt is matched and given blocks when it
// starts; when it ends its reply gets blocks, the sequence is offered to the cache and released.
// A background step runs after every event (the engine runs one per forward pass).
//
// The engine queues a request until the device has room for it; a driver asks has_room_for()
// before start() and queues what does not fit (sim/cache_replay.cpp). A request started without
// the blocks it needs (every block held by running requests: a request longer than the device, or
// a driver that does not queue) runs without them: counted in device_overcommits; its tokens are
// not cached. `mnemo simulate` replays a trace through one (sim/cache_replay.h), the cluster
// simulation through one per instance (sim/cluster_replay.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/eviction_order.h"
#include "kv/kv_cache.h"
#include "sim/sim_config.h"
#include "util/result.h"

namespace mnemo::sim {

// Why a configuration cannot be simulated (no device chunk fits, a bad geometry, tiers out of
// range), or ok.
Status check_sim_config(const SimConfig& config);

class SimulatedInstance {
 public:
  // `clock` is read whenever the cache asks the time, and outlives the instance. `next_use`:
  // the oracle's knowledge (required by it only). An Error when the disk tier cannot be opened.
  static Result<std::unique_ptr<SimulatedInstance>> make(const SimConfig& config, RetentionPolicy policy,
                                                         const double* clock, NextUse next_use = {});
  ~SimulatedInstance();
  SimulatedInstance(const SimulatedInstance&) = delete;
  SimulatedInstance& operator=(const SimulatedInstance&) = delete;

  struct Started {
    int32_t device_chunks = 0;  // matched chunks found in each tier
    int32_t host_chunks = 0;
    int32_t disk_chunks = 0;
    int32_t matched_chunks = 0;          // the match's length, recomputed chunks included
    std::vector<int32_t> recompute;      // chunks inside the match computed again (dropped)
    int32_t hits() const { return device_chunks + host_chunks + disk_chunks; }
  };
  // Whether a request of `total_tokens` (prompt and reply) has room on the device beside what the
  // running requests hold and their replies will still take: the engine admits a waiting request
  // only then, oldest first. True when nothing runs (nothing would free a block).
  bool has_room_for(int64_t total_tokens) const;
  // Request `id` starts: the longest cached prefix of `prompt` (at most `max_chunks`) is matched
  // and the rest of the prompt gets blocks; the blocks its reply will take, up to `total_tokens`,
  // are counted as taken from now on.
  Started start(int64_t id, std::span<const TokenId> prompt, int32_t max_chunks, int64_t total_tokens);
  // Request `id` ends with `tokens` (its prompt, then its reply) computed: the reply's blocks,
  // then the whole sequence offered to the cache; `ends_conversation`: its client's end
  // (KvCache::end_conversation).
  void end(int64_t id, std::span<const TokenId> tokens, int64_t prompt_tokens, bool ends_conversation = false,
           double keep_alive_s = 0);
  // After every event: the cache's background work, and the disk's writes landed (so that a
  // replay is the same whatever the machine's speed).
  void step();

  KvCache& cache() { return *kv_; }
  const KvCache& cache() const { return *kv_; }
  size_t running() const { return running_.size(); }
  // The cache's counters in the simulator's terms (bytes of the small layout scaled to the real
  // model's), with the overcommits and the peak device use seen by step().
  CacheCounters counters() const;

 private:
  SimulatedInstance(const SimConfig& config, const double* clock);

  // A running request's hold on the cache.
  struct Running {
    KvTable table;
    std::vector<int32_t> partial;
    bool cached = false;
    int64_t reply_blocks = 0;  // blocks its reply will still take (counted in reserved_blocks_)
  };
  KvPoolConfig pool_config(RetentionPolicy policy, std::shared_ptr<DiskTier> disk, NextUse next_use) const;
  void overcommit(Running& r, int64_t tokens);

  const SimConfig config_;
  const double* clock_;
  KvLayout layout_;
  std::string scratch_;  // the disk tier's folder, deleted with the instance ("" without a disk)
  std::shared_ptr<DiskTier> disk_;
  std::unique_ptr<KvCache> kv_;
  std::unordered_map<int64_t, Running> running_;
  int64_t reserved_blocks_ = 0;  // the running requests' reply_blocks
  int64_t device_overcommits_ = 0;
  int64_t peak_device_chunks_ = 0;
};

}  // namespace mnemo::sim
