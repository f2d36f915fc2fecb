// Small hand-made traces and cache configurations for the simulator tests: 4-token chunks and
// 1 byte of KV per token, so a chunk is 4 bytes and capacities read as chunk counts; costs with
// round numbers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <optional>
#include <string_view>
#include <vector>

#include "kv/cost_model.h"
#include "sim/cache_replay.h"
#include "sim/sim_config.h"
#include "sim/trace.h"

namespace mnemo::sim::testing {

inline constexpr int32_t kChunk = 4;

// A token at context position l costs 1 + l seconds, so chunk j (tokens 4j to 4j + 3) costs
// 16j + 10: chunk 0 costs 10, chunk 1 costs 26, chunk 2 costs 42, chunk 3 costs 58.
inline CostModel simple_costs() {
  CostModel m;
  m.per_token_seconds = 1;
  m.per_context_token_seconds = 1;
  m.source = "test";
  return m;
}

inline SimConfig small_config(int64_t device_chunks, int64_t host_chunks = 0, int64_t disk_chunks = 0) {
  SimConfig c;
  c.chunk_tokens = kChunk;
  c.kv_bytes_per_token = 1;
  c.capacity_bytes = {device_chunks * kChunk, host_chunks * kChunk, disk_chunks * kChunk};
  c.cost = simple_costs();
  return c;
}

inline TraceTurn turn(double start_s, double end_s, int64_t prompt_tokens, int64_t reply_tokens) {
  return {start_s, end_s, prompt_tokens, reply_tokens};
}

inline TraceConversation conversation(std::string id, std::vector<TraceTurn> turns) {
  return {std::move(id), std::move(turns)};
}

// One replay of `trace` through the serving cache under the named policy, sized as `config`
// says, as `mnemo simulate` runs it; a failure fails the test.
inline PolicyOutcome run_policy(const Trace& trace, const SimConfig& config, std::string_view name) {
  const std::optional<RetentionPolicy> policy = simulated_policy(name);
  EXPECT_TRUE(policy.has_value()) << name;
  auto outcome = replay_through_cache(trace, config, policy.value_or(RetentionPolicy::kLru), name);
  EXPECT_TRUE(outcome.ok()) << outcome.error().message();
  return outcome.ok() ? std::move(*outcome) : PolicyOutcome{};
}

}  // namespace mnemo::sim::testing
