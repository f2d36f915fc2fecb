// The simulator on the real English ShareGPT set (data/, token counts estimated as
// chars/4 so no model is needed): the same traffic for every policy, every reusable token either
// hit or recomputed, a cache under pressure recomputes something, the oracle recomputes the
// least, and a seed replays exactly.
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/cache_replay.h"
#include "sim/simulation.h"

namespace mnemo::sim {
namespace {

SimulationOptions small_run() {
  SimulationOptions o;
  o.data_path = (std::filesystem::path(MNEMO_SOURCE_DIR) / "data/sharegpt_en.jsonl").lexically_normal().string();
  o.estimate_tokens = true;
  o.conversations = 120;
  o.rate = 0.2;
  o.think_mean_s = 60;
  // The device holds every running turn (no overcommit); device and host together hold less than
  // the peak live working set.
  o.cache.capacity_bytes = {256ll << 20, 96ll << 20, 0};
  o.policies = simulated_policy_names();
  return o;
}

TEST(DatasetSimulation, ShareGptUnderPressure) {
  const auto result = run_simulation(small_run());
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->trace.conversations, 120);
  EXPECT_GT(result->trace.turns, 120);
  // The capacities are well under the live working set: this is a cache under pressure.
  const int64_t cache_chunks = ((256ll + 96) << 20) / (32 * 18432);
  EXPECT_GT(result->trace.peak_live_chunks, cache_chunks);
  ASSERT_EQ(result->outcomes.size(), simulated_policy_names().size());
  const PolicyOutcome* oracle = nullptr;
  for (const PolicyOutcome& o : result->outcomes) {
    if (o.policy == "oracle") oracle = &o;
    EXPECT_EQ(o.prompt_tokens, result->trace.prompt_tokens) << o.policy;
    EXPECT_EQ(o.hit_tokens_total() + o.recomputed_tokens, o.reusable_tokens) << o.policy;
    EXPECT_GT(o.recomputed_tokens, 0) << o.policy;
    EXPECT_GT(o.hit_tokens[0], 0) << o.policy;
    EXPECT_GT(o.hit_tokens[1], 0) << o.policy;
    EXPECT_EQ(o.hit_tokens[2], 0) << o.policy;  // no disk tier
    EXPECT_GT(o.moved_bytes(Tier::kDevice, Tier::kHost), 0) << o.policy;
    EXPECT_EQ(o.counters.device_overcommits, 0) << o.policy;
  }
  ASSERT_NE(oracle, nullptr);
  for (const PolicyOutcome& o : result->outcomes) EXPECT_LE(oracle->recomputed_tokens, o.recomputed_tokens) << o.policy;
}

TEST(DatasetSimulation, ASeedReplaysExactly) {
  SimulationOptions o = small_run();
  o.conversations = 40;
  o.policies = {"pensieve"};
  const auto a = run_simulation(o);
  const auto b = run_simulation(o);
  o.seed = 9;
  const auto c = run_simulation(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->outcomes[0].recomputed_tokens, b->outcomes[0].recomputed_tokens);
  EXPECT_EQ(a->outcomes[0].hit_tokens, b->outcomes[0].hit_tokens);
  EXPECT_EQ(a->trace.duration_s, b->trace.duration_s);
  EXPECT_NE(a->trace.duration_s, c->trace.duration_s);
}

TEST(DatasetSimulation, AMissingDataFileIsAnErrorNamingIt) {
  SimulationOptions o = small_run();
  o.data_path = "/nonexistent/conversations.jsonl";
  const auto result = run_simulation(o);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message().find("/nonexistent/conversations.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace mnemo::sim
