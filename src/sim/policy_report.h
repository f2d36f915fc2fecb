// The simulator's results per policy, as a text table and as JSON. Recomputed tokens are also
// given as a ratio to LRU's (the baseline the issue and Pensieve compare against) when LRU ran.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/sim_config.h"

namespace mnemo::sim {

// Columns: policy, recomputed tokens, ratio to LRU, their recompute seconds, hit tokens per
// tier, hit rate (hits / prompt tokens), bytes moved down (device->host, host->disk) and up
// (host->device, disk->device).
std::string format_policy_table(const std::vector<PolicyOutcome>& outcomes);

nlohmann::json policy_outcome_json(const PolicyOutcome& outcome, const std::vector<PolicyOutcome>& all);
nlohmann::json policy_outcomes_json(const std::vector<PolicyOutcome>& outcomes);

}  // namespace mnemo::sim
