// A cluster of N instances behind the router's own routing code (router/routing_policy.h: the
// policy's choice and, cache-aware, whether to move a prompt's KV from another instance first,
// SPEC M6/M7), each instance serve's own KV cache (sim/simulated_instance.h), replaying a
// ClusterTrace (sim/cluster_trace.h) with no model. What it measures per routing policy: cache
// hits and recomputed tokens, KV moved between instances, and an estimated TTFT.
//
// The router sees what the real one sees: per instance, the requests it sent there still running
// (in flight), the prompt tokens queued there, and how much of the prompt the instance holds,
// from the instance's own cache events (kv/cache_events.h, the feed of the router's followers:
// every chunk key the index holds, kept current after each event). Its cost model is the
// instances' profiled compute (SimConfig::cost, the `--profile` of `mnemo profile`) and
// CostParams' transfer bandwidth and overhead.
//
// Time: each instance computes prompts one at a time in arrival order (a request's prefill starts
// when it arrives, any transfer to it has landed, and the instance's previous prefill is done) and
// decodes while others prefill; a request holds its blocks from its arrival to its last token.
// TTFT = the wait for the instance + its transfer + its prefill (the uncached prompt's tokens,
// each at its position, on the cost model); the reply then takes reply tokens x
// decode_seconds_per_token. A turn arriving before its previous turn's reply ended finds that
// reply uncached.
#pragma once

#include <cstdint>
#include <string>

#include "kv/eviction_order.h"
#include "router/routing_policy.h"
#include "sim/cluster_trace.h"
#include "sim/sim_config.h"
#include "util/result.h"

namespace mnemo::sim {

struct ClusterConfig {
  int32_t instances = 4;
  router::Policy routing = router::Policy::kCacheAware;
  RetentionPolicy cache_policy = RetentionPolicy::kMnemo;
  SimConfig cache;                  // every instance's tiers; its cost model is the instances' profile
  router::CostParams routing_cost;  // the router's: seconds per request in flight, transfer bandwidth
  bool transfers = true;            // cache-aware may move a prompt's KV between instances first
  double decode_seconds_per_token = 0.02;
};

struct ClusterOutcome {
  std::string routing;
  int32_t instances = 0;
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t reusable_tokens = 0;    // prompt chunks some instance had computed before (one unbounded cache's hits)
  std::array<int64_t, kTierCount> hit_tokens{};  // served from each tier of the chosen instance
  int64_t recomputed_tokens = 0;  // reusable, but computed again
  int64_t transfers = 0;          // prompts whose KV moved from another instance first
  int64_t transfer_bytes = 0;     // in the real model's bytes
  double ttft_mean_s = 0, ttft_p50_s = 0, ttft_p90_s = 0, ttft_p99_s = 0;
  double wait_mean_s = 0;         // for the instance's previous prefills
  int64_t busiest_instance_requests = 0;  // the most requests one instance got
  int64_t device_overcommits = 0;
  double replay_seconds = 0;      // the simulation's own run time

  int64_t hit_tokens_total() const { return hit_tokens[0] + hit_tokens[1] + hit_tokens[2]; }
};

// An Error when the configuration cannot be simulated (see check_sim_config; instances within
// [1, 4096] whose pools fit in memory).
Result<ClusterOutcome> replay_cluster(const ClusterTrace& trace, const ClusterConfig& config);

}  // namespace mnemo::sim
