// What a cache simulation is configured with (tier capacities in the real model's bytes, its KV
// geometry, the cost model) and what one policy's replay reports (sim/cache_replay.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kv/cost_model.h"
#include "sim/tier.h"

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
  // With a window, the share of the host's bytes that holds compact copies (global layers only):
  // `serve` keeps them in a pool of their own. 0.4: its default pools' split (65,536 tokens whole,
  // 262,144 compact, on Gemma 3 270M).
  double host_compact_share = 0.4;
  // The element types of the tiers (`serve --kv-types`), as the bytes a host and a disk copy of a
  // chunk take per byte of the device's F16 (kv/kv_codec.h: q8_0 0.53, k4v8 ~0.42, kivi4 ~0.31, q4_0 0.28),
  // and the share of a lossy host kept in the device's type (`serve --host-exact-share`): a
  // replay has no preempted sequences or imported chunks to put there, so it is capacity `serve`
  // reserves and the replay leaves empty.
  std::string kv_types = "device=f16,host=f16,disk=f16";
  double host_bytes_ratio = 1.0;
  double disk_bytes_ratio = 1.0;
  double host_exact_share = 0.0;
  // The share of conversations whose client ends them explicitly with their last turn (a
  // request's cache_control {"type": "end"}: KvCache::end_conversation), chosen by a hash of the
  // conversation's place in the trace. 0: none (what a server knows without the hint).
  double end_signal_share = 0.0;
  // The share of conversations whose client promises each next turn (a request's cache_control
  // {"type": "ephemeral", "ttl": keep_alive_ttl_s}: KvCache::pin_conversation) on every turn but
  // its last, chosen by another hash of its place: an agent harness that knows a tool call or a
  // follow-up comes. 0: none.
  double keep_alive_share = 0.0;
  double keep_alive_ttl_s = 300;
  // Copies ahead of need below this free share of the device (`serve`'s default).
  float swap_out_threshold = 0.25f;
  // Prices what is recomputed (recomputed_seconds); Pensieve's policy weighs chunks by the same.
  CostModel cost;

  int64_t chunk_bytes() const { return kv_bytes_per_token * chunk_tokens; }
  // Whole chunks that fit in each tier.
  std::array<int64_t, kTierCount> capacity_chunks() const {
    std::array<int64_t, kTierCount> chunks{};
    for (size_t t = 0; t < chunks.size(); ++t) chunks[t] = capacity_bytes[t] / chunk_bytes();
    chunks[1] = static_cast<int64_t>(static_cast<double>(capacity_bytes[1]) * (1.0 - host_exact_share) /
                                     (static_cast<double>(chunk_bytes()) * host_bytes_ratio));  // whole chunks, without a window
    chunks[2] = static_cast<int64_t>(static_cast<double>(capacity_bytes[2]) / (static_cast<double>(chunk_bytes()) * disk_bytes_ratio));
    return chunks;
  }
  // The unit bytes moved are counted in: a layer's worth of a chunk with a window (compact copies
  // move too), else a chunk.
  int64_t unit_bytes() const { return sliding_window > 0 ? chunk_bytes() / layers : chunk_bytes(); }
};

struct CacheCounters {
  std::array<std::array<int64_t, kTierCount>, kTierCount> moved_chunks{};  // [from][to]
  std::array<std::array<int64_t, kTierCount>, kTierCount> moved_units{};   // the same in units
  std::array<int64_t, kTierCount> evicted_chunks{};  // copies that left each tier for lack of room
  int64_t dropped_chunks = 0;                        // chunks whose last copy left
  int64_t device_overcommits = 0;                    // blocks a running turn lacked (it ran uncached)
  int64_t peak_device_chunks = 0;
  int64_t peak_device_units = 0;
};

struct PolicyOutcome {
  std::string policy;
  int64_t turns = 0;
  int64_t prompt_tokens = 0;
  int64_t reusable_tokens = 0;                    // what an unbounded cache would serve
  std::array<int64_t, kTierCount> hit_tokens{};  // served from each tier
  int64_t recomputed_tokens = 0;                  // reusable, but computed again
  double recomputed_seconds = 0;                  // what recomputing them costs (SimConfig::cost)
  // Turns that arrived to a device without room for them and waited for running turns to end
  // (the engine's admission), and their waits in seconds: the same for every policy (running
  // turns hold the same blocks whatever is cached).
  int64_t waited_turns = 0;
  double wait_seconds = 0;
  double longest_wait_s = 0;
  // Turns that need more blocks than the whole device has, which `serve` refuses, and the turns
  // of their conversations after them (never asked): neither served, reused nor recomputed.
  int64_t refused_turns = 0;
  int64_t refused_prompt_tokens = 0;
  CacheCounters counters;
  int64_t chunk_bytes = 0;
  int64_t unit_bytes = 0;  // what a unit of the cache's sizes is (a chunk, or a layer of one)

  int64_t hit_tokens_total() const { return hit_tokens[0] + hit_tokens[1] + hit_tokens[2]; }
  int64_t moved_bytes(Tier from, Tier to) const {
    return counters.moved_units[static_cast<size_t>(tier_index(from))][static_cast<size_t>(tier_index(to))] * unit_bytes;
  }
};

}  // namespace mnemo::sim
