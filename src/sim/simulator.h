// Replays a trace against the chunk cache under one eviction policy and counts what the cache
// saved and what it cost.
//
// Per turn, when it starts: the prompt's chunks that an unbounded cache would hold (the whole
// chunks of the previous turn's prompt and reply, less the prompt's last token, which is always
// computed) are looked up. A cached one is a hit in its tier and moves up to the device; a missing
// one is recomputed. After a missing chunk, policies with SPEC P5 reuse the cached chunks that
// follow; the others recompute everything after it (those chunks are "stranded"). The prompt's
// whole chunks are then on the device, pinned. When the turn ends, its reply's whole chunks join
// them there, and the pins are released.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kv/cost_model.h"
#include "sim/eviction_policy.h"
#include "sim/tier.h"
#include "sim/tiered_chunk_cache.h"
#include "sim/trace.h"

namespace mnemo::sim {

struct SimConfig {
  int32_t chunk_tokens = 32;
  // KV bytes of one token: layers x KV heads x (K dim + V dim) x element bytes. The default is
  // Gemma 3 270M with an F16 pool: 18 x 1 x (256 + 256) x 2.
  int64_t kv_bytes_per_token = 18 * 1 * (256 + 256) * 2;
  std::array<int64_t, kTierCount> capacity_bytes{};  // device, host, disk (0: no such tier)
  // A sliding-window model (Gemma 3 270M: 512 tokens, 3 global layers of 18): a chunk a window
  // before the end of its idle conversation takes global_layers / layers of a whole chunk's
  // bytes, as in the real cache. 0: no window.
  int32_t sliding_window = 0;
  int32_t layers = 18;
  int32_t global_layers = 3;
  // Prices what is recomputed (recomputed_seconds); the policies that weigh cost take the same.
  CostModel cost;

  int64_t chunk_bytes() const { return kv_bytes_per_token * chunk_tokens; }
  // Whole chunks that fit in each tier.
  std::array<int64_t, kTierCount> capacity_chunks() const;
  // The cache's sizes: a layer's worth of a chunk per unit with a window, else a chunk per unit.
  ChunkSizes chunk_sizes() const;
  std::array<int64_t, kTierCount> capacity_units() const;
  int64_t unit_bytes() const { return sliding_window > 0 ? chunk_bytes() / layers : chunk_bytes(); }
};

struct PolicyOutcome {
  std::string policy;
  int64_t turns = 0;
  int64_t prompt_tokens = 0;
  int64_t reusable_tokens = 0;                    // what an unbounded cache would serve
  std::array<int64_t, kTierCount> hit_tokens{};  // served from each tier
  int64_t recomputed_tokens = 0;                  // reusable, but computed again
  int64_t stranded_tokens = 0;                    // of those: cached, but behind a missing chunk (or, compact, in a computed position's window)
  double recomputed_seconds = 0;                  // what recomputing them costs (SimConfig::cost)
  CacheCounters counters;
  int64_t chunk_bytes = 0;
  int64_t unit_bytes = 0;  // what a unit of the cache's sizes is (a chunk, or a layer of one)

  int64_t hit_tokens_total() const { return hit_tokens[0] + hit_tokens[1] + hit_tokens[2]; }
  int64_t moved_bytes(Tier from, Tier to) const {
    return counters.moved_units[static_cast<size_t>(tier_index(from))][static_cast<size_t>(tier_index(to))] * unit_bytes;
  }
};

// An Error when the configuration cannot be simulated (no device chunk fits, bad chunk size).
Result<PolicyOutcome> simulate_policy(const Trace& trace, const SimConfig& config, const EvictionPolicy& policy);

}  // namespace mnemo::sim
