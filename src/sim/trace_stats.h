// What a trace asks of a cache, independent of any policy: how much it sends, how big the live
// working set gets (the whole chunks of every conversation that has started and has a turn still
// to come or running), and how much the running turns pin. Capacities under the live working set
// put a cache under pressure; a device under the running peak is overcommitted.
#pragma once

#include <cstdint>
#include <string>

#include "sim/trace.h"

namespace mnemo::sim {

struct TraceStats {
  int64_t conversations = 0;
  int64_t turns = 0;
  int64_t prompt_tokens = 0;
  int64_t reply_tokens = 0;
  int64_t max_context_tokens = 0;  // the longest prompt + reply of any turn
  double duration_s = 0;           // until the last reply ends
  int64_t peak_live_chunks = 0;
  double mean_live_chunks = 0;     // averaged over time, from the first arrival to the last end
  int64_t peak_running_chunks = 0;  // prompts of the turns running at once: the device must hold them
};

TraceStats trace_stats(const Trace& trace, int32_t chunk_tokens);

// Two lines for reports: volume and working set (in chunks, tokens and bytes).
std::string describe_trace(const TraceStats& stats, int32_t chunk_tokens, int64_t kv_bytes_per_token);

}  // namespace mnemo::sim
