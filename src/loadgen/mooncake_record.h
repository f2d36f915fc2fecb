// One line of the Mooncake trace (data/mooncake_conversation_trace.jsonl): {"timestamp" (ms),
// "input_length", "output_length", "hash_ids": [...]}, each hash id a 512-token prompt block,
// equal ids a shared prefix. Read by the think-time inference (loadgen/think_time.h), which
// needs only the timestamp and the ids, and by the cluster simulation (sim/cluster_trace.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace mnemo::loadgen {

struct MooncakeRecord {
  double timestamp_ms = 0;
  std::vector<int64_t> hash_ids;
  std::optional<int64_t> input_length;   // absent from the line: nullopt
  std::optional<int64_t> output_length;
};

// An Error (without the line's place: the caller adds it) when the line is not a JSON object
// with a number `timestamp` and an integer array `hash_ids`, or has lengths that are not
// integers.
Result<MooncakeRecord> parse_mooncake_record(std::string_view line);

}  // namespace mnemo::loadgen
