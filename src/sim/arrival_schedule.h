// When each turn of a simulated workload happens: conversations start as a Poisson process,
// a user sends the next turn a think time after the previous reply ended, and a turn runs for
// as long as its reply takes to decode (its chunks stay pinned on the device meanwhile).
// Durations do not depend on cache hits, so every policy replays the same timeline.
#pragma once

#include <cstdint>
#include <vector>

#include "loadgen/think_time.h"
#include "sim/conversation_lengths.h"
#include "sim/trace.h"

namespace mnemo::sim {

struct ArrivalOptions {
  double conversations_per_second = 0.1;
  loadgen::ThinkTime think = loadgen::ThinkTime::exponential(60.0);
  double decode_seconds_per_token = 0.02;  // how long a turn holds its pins
  uint64_t seed = 1;
};

// Deterministic for a given seed: the first conversation arrives after one exponential gap, the
// arrival gaps are drawn first, then each conversation's think times in order.
Trace schedule_arrivals(const std::vector<ConversationLengths>& conversations, const ArrivalOptions& options);

}  // namespace mnemo::sim
