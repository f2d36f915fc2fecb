// Replays a trace through the serving engine's own KV cache (kv/kv_cache.h), with the
// simulation's clock and no model: the policies `mnemo serve --cache-policy` runs (lru, pensieve,
// mnemo) are simulated by the code that serves, so a simulated figure is what the server would do,
// and the baseline and bound it does not run (tail-first, oracle) by the same cache with their
// eviction order (kv/eviction_order.h), so every policy is compared under the same tier rules.
//
// The trace (sim/trace.h): per turn, when it starts, the prompt's chunks that an unbounded cache
// would hold (the whole chunks of the previous turn's prompt and reply, less the prompt's last
// token, which is always computed) are reusable; each is a hit in the tier the cache finds it in,
// or recomputed.
//
// Times and admission are the engine's: a turn the device has no room for beside the running
// turns waits for them to end, oldest first (its conversation's later turns shift with it), and a
// turn that needs more blocks than the whole device has is refused and ends its conversation, as
// `serve` refuses it. Both are reported (PolicyOutcome), and are the same for every policy.
//
// The cache is one SimulatedInstance (sim/simulated_instance.h): serve's KvCache built as `serve`
// builds it, driven turn by turn as the engine drives it. Per turn: the prompt's longest cached
// prefix is matched (at most all but its last token); at the end the turn's sequence is offered
// to the cache and released (a client's end signalled for SimConfig::end_signal_share of the
// conversations, at their last turn).
#pragma once

#include <optional>
#include <string_view>

#include <string>
#include <vector>

#include "kv/eviction_order.h"
#include "sim/sim_config.h"
#include "sim/trace.h"
#include "util/result.h"

namespace mnemo::sim {

// "pensieve", "lru", "tail-first", "mnemo", "oracle", and the cache's policy of each name.
const std::vector<std::string>& simulated_policy_names();
std::optional<RetentionPolicy> simulated_policy(std::string_view name);

// An Error when the configuration cannot be simulated (no device chunk fits, a bad geometry or
// trace, a disk tier that cannot be opened).
Result<PolicyOutcome> replay_through_cache(const Trace& trace, const SimConfig& config, RetentionPolicy policy,
                                           std::string_view name);

}  // namespace mnemo::sim
