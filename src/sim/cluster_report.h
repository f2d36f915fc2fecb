// The cluster simulation's results (sim/cluster_replay.h) per instance count and routing policy,
// as a text table and as JSON.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cluster_replay.h"

namespace mnemo::sim {

// Columns: instances, routing, hit rate (of prompt tokens), of what one unbounded cache would
// serve (hits / reusable), recomputed tokens, transfers and their bytes, TTFT mean / p50 / p90 /
// p99, the busiest instance's share of requests, the replay's own seconds.
std::string format_cluster_table(const std::vector<ClusterOutcome>& outcomes);
nlohmann::json cluster_outcomes_json(const std::vector<ClusterOutcome>& outcomes);

}  // namespace mnemo::sim
