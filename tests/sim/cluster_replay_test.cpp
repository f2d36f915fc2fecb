// The cluster simulation (sim/cluster_replay.h): requests routed by the router's own policies to
// instances that are each serve's KV cache. Hand-made traces whose every decision can be followed,
// the Mooncake trace's loader, a KV transfer through the caches' export and import, and a
// thousand instances on the real trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "sim/cluster_replay.h"
#include "sim/cluster_trace.h"
#include "sim/sim_test_support.h"

namespace mnemo::sim {
namespace {

using testing::conversation;
using testing::kChunk;
using testing::small_config;
using testing::turn;

ClusterConfig cluster(int32_t instances, router::Policy routing, int64_t device_chunks = 100) {
  ClusterConfig c;
  c.instances = instances;
  c.routing = routing;
  c.cache = small_config(device_chunks);
  c.routing_cost.transfer_overhead_seconds = 0;
  c.routing_cost.transfer_bytes_per_second = 1e9;
  return c;
}

ClusterOutcome replay(const ClusterTrace& trace, const ClusterConfig& config) {
  auto out = replay_cluster(trace, config);
  EXPECT_TRUE(out.ok()) << out.error().message();
  return out.ok() ? *out : ClusterOutcome{};
}

// A (two turns), B and C on two instances. A's first turn is computed (prefill 36 s on the test
// costs) and ends at 36.08; B and C end by 72.08; A's second turn at 100 could reuse A's whole
// first turn: 3 chunks, 12 tokens. Round-robin and least-loaded send it to the instance without
// it, session affinity and cache-aware routing to the one with it.
TEST(ClusterReplay, EachRoutingPolicyPlacesTheReturningTurnByItsOwnRule) {
  const Trace trace = {conversation("A", {turn(0, 1, 8, 4), turn(100, 101, 16, 0)}), conversation("B", {turn(2, 3, 8, 4)}),
                       conversation("C", {turn(4, 5, 8, 4)})};
  const ClusterTrace requests = cluster_trace_of(trace, kChunk);
  ASSERT_EQ(requests.requests.size(), 4u);
  // Round-robin: A1 B1 C1 A2 on 0 1 0 1. Least-loaded: A1 on 0, B1 on 1 (fewer in flight), C1 on 0
  // (a tie: the first), A2 on 1 (fewer routed). Cache-aware: the same until A2, which goes where A
  // is cached (a third request there). Session: wherever A's key hashes, both of A's turns.
  for (const auto& [routing, recomputed, busiest] : std::vector<std::tuple<router::Policy, int64_t, int64_t>>{
           {router::Policy::kRoundRobin, 12, 2}, {router::Policy::kLeastLoaded, 12, 2},
           {router::Policy::kSession, 0, -1}, {router::Policy::kCacheAware, 0, 3}}) {
    const ClusterOutcome o = replay(requests, cluster(2, routing));
    const std::string name(router::policy_name(routing));
    EXPECT_EQ(o.requests, 4) << name;
    EXPECT_EQ(o.reusable_tokens, 12) << name;
    EXPECT_EQ(o.recomputed_tokens, recomputed) << name;
    EXPECT_EQ(o.hit_tokens_total(), 12 - recomputed) << name;
    EXPECT_EQ(o.transfers, 0) << name;
    if (busiest >= 0) {
      EXPECT_EQ(o.busiest_instance_requests, busiest) << name;
    }
  }
}

// The instance holding A is busy with D's 200-token prompt (820 s of prefill) when A returns:
// cache-aware routing sends A's turn to the idle instance and, since moving 3 chunks costs less
// than computing them there, first moves them through the caches' export and import. A's first
// prefill takes 36 s, so its TTFT is 36 + the queue it found.
TEST(ClusterReplay, CacheAwareRoutingMovesAPrefixToAnIdleInstanceWhenThatCostsLess) {
  const Trace trace = {conversation("A", {turn(0, 1, 8, 4), turn(100, 101, 16, 0)}), conversation("B", {turn(1, 2, 8, 4)}),
                       conversation("D", {turn(50, 51, 200, 4)})};
  const ClusterTrace requests = cluster_trace_of(trace, kChunk);
  const ClusterOutcome moved = replay(requests, cluster(2, router::Policy::kCacheAware));
  EXPECT_EQ(moved.transfers, 1);
  EXPECT_EQ(moved.transfer_bytes, 3 * kChunk);  // 3 chunks of 4 tokens, 1 byte a token
  EXPECT_EQ(moved.reusable_tokens, 12);
  EXPECT_EQ(moved.recomputed_tokens, 0);
  ClusterConfig no_transfers = cluster(2, router::Policy::kCacheAware);
  no_transfers.transfers = false;
  const ClusterOutcome recomputed = replay(requests, no_transfers);
  EXPECT_EQ(recomputed.transfers, 0);
  EXPECT_EQ(recomputed.recomputed_tokens, 12);
  EXPECT_LT(moved.ttft_mean_s, recomputed.ttft_mean_s);
}

TEST(ClusterReplay, RefusesWhatItCannotSimulate) {
  const ClusterTrace requests = cluster_trace_of({conversation("A", {turn(0, 1, 8, 4)})}, kChunk);
  EXPECT_FALSE(replay_cluster(requests, cluster(0, router::Policy::kRoundRobin)).ok());
  EXPECT_FALSE(replay_cluster(requests, cluster(5000, router::Policy::kRoundRobin)).ok());
  ClusterTrace short_blocks = requests;
  short_blocks.requests[0].blocks.resize(1);
  EXPECT_FALSE(replay_cluster(short_blocks, cluster(2, router::Policy::kRoundRobin)).ok());
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(MooncakeTrace, BlocksScaleToChunksAndSharedIdsShareTokens) {
  const std::string path = write_file("mnemo-mooncake-test.jsonl",
                                      "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 40, \"hash_ids\": [0, 1]}\n"
                                      "{\"timestamp\": 1500, \"input_length\": 1100, \"output_length\": 8, \"hash_ids\": [0, 1, 2]}\n"
                                      "{\"timestamp\": 700, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [0, 7]}\n");
  auto loaded = load_mooncake_trace(path, MooncakeOptions{});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  const ClusterTrace& t = *loaded;
  EXPECT_EQ(t.block_tokens, 32);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 0.7);  // by arrival
  const ClusterRequest& a = t.requests[0];
  const ClusterRequest& b = t.requests[2];
  EXPECT_EQ(a.prompt_tokens, 63);  // 1000 / 16, rounded up
  EXPECT_EQ(a.reply_tokens, 3);    // 40 / 16, rounded
  EXPECT_EQ(t.requests[1].reply_tokens, 1);  // never none
  EXPECT_EQ(a.session, b.session);           // the same first two blocks
  EXPECT_NE(a.session, t.requests[1].session);
  const auto ta = t.tokens(a, a.prompt_tokens + a.reply_tokens);
  const auto tb = t.tokens(b, b.prompt_tokens);
  EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 63, tb.begin()));  // blocks 0 and 1 (the second partial in a)
  EXPECT_NE(ta[63], tb[63]);  // a's reply is not block 1's last token
  auto doubled = load_mooncake_trace(path, MooncakeOptions{16, 2, 7, 0});
  ASSERT_TRUE(doubled.ok());
  ASSERT_EQ(doubled->requests.size(), 6u);
  std::vector<uint64_t> sessions;
  for (const auto& r : doubled->requests) sessions.push_back(r.session);
  std::sort(sessions.begin(), sessions.end());
  EXPECT_EQ(std::unique(sessions.begin(), sessions.end()) - sessions.begin(), 4);  // a copy's conversations are its own

  const std::string bad = write_file("mnemo-mooncake-bad.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 4, \"hash_ids\": [0, 1]}\n"
                                     "{\"timestamp\": 5, \"input_length\": 2000, \"output_length\": 4, \"hash_ids\": [0, 1]}\n");
  const auto refused = load_mooncake_trace(bad, MooncakeOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("line 2"), std::string::npos) << refused.error().message();
  EXPECT_FALSE(load_mooncake_trace(path, MooncakeOptions{24, 1, 1, 0}).ok());  // 24 does not divide 512
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

// The real trace (its first 1,000 requests) on a thousand instances: every policy runs through,
// and routing by the caches' contents keeps far more of the shared prefixes than spreading does.
TEST(ClusterReplay, AThousandInstancesOnTheMooncakeTrace) {
  MooncakeOptions o;
  o.max_requests = 1000;
  auto trace = load_mooncake_trace((std::filesystem::path(MNEMO_SOURCE_DIR) / "data/mooncake_conversation_trace.jsonl").string(), o);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  std::map<router::Policy, ClusterOutcome> out;
  for (const router::Policy routing : {router::Policy::kRoundRobin, router::Policy::kCacheAware, router::Policy::kSession,
                                       router::Policy::kLeastLoaded}) {
    ClusterConfig c = cluster(1000, routing);
    c.cache.chunk_tokens = 32;
    c.cache.capacity_bytes = {128 * 32, 0, 0};  // 128 chunks each
    c.cache.cost = CostModel{};                // 1 ms a token: the trace's load spread over 1,000 instances
    out[routing] = replay(*trace, c);
    EXPECT_EQ(out[routing].requests, 1000);
    EXPECT_LE(out[routing].hit_tokens_total(), out[routing].prompt_tokens);
    EXPECT_LE(out[routing].recomputed_tokens, out[routing].reusable_tokens);
  }
  EXPECT_EQ(out[router::Policy::kRoundRobin].reusable_tokens, out[router::Policy::kCacheAware].reusable_tokens);
  EXPECT_GT(out[router::Policy::kCacheAware].hit_tokens_total(), 3 * out[router::Policy::kRoundRobin].hit_tokens_total());
  EXPECT_LE(out[router::Policy::kRoundRobin].busiest_instance_requests, 2);
}

}  // namespace
}  // namespace mnemo::sim
