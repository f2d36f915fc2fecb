// Routing decisions on hand-made candidates: round-robin, session affinity, cache-aware argmin.
#include <gtest/gtest.h>

#include <map>

#include "router/routing_policy.h"

namespace mnemo::router {
namespace {

std::vector<Candidate> three() {
  std::vector<Candidate> c;
  for (char name : {'a', 'b', 'c'}) {
    c.emplace_back();
    c.back().id.push_back(name);
  }
  return c;
}

// Three candidates that can move KV, 1000 bytes of it per token.
std::vector<Candidate> three_with_transports() {
  auto c = three();
  for (auto& x : c) {
    x.has_transport = true;
    x.kv_bytes_per_token = 1000;
  }
  return c;
}

TEST(RoutingPolicy, RoundRobinCyclesThroughTheCandidates) {
  RoutingPolicy p(Policy::kRoundRobin, {});
  std::vector<size_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(p.choose(three(), 100, "")->index);
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_FALSE(p.choose({}, 100, "").has_value());
}

TEST(RoutingPolicy, LeastLoadedTakesFewestInFlightThenQueuedThenRouted) {
  RoutingPolicy p(Policy::kLeastLoaded, {});
  auto c = three();
  c[0].in_flight = 2;
  c[1].in_flight = 1;
  c[2].in_flight = 1;
  c[1].queued_tokens = 50;
  c[2].matched_tokens = 100;  // a cached prefix does not count
  EXPECT_EQ(p.choose(c, 100, "")->index, 2u);
  c[2].queued_tokens = 50;
  c[2].routed = 3;
  EXPECT_EQ(p.choose(c, 100, "")->index, 1u);
  EXPECT_EQ(parse_policy("least-loaded").value(), Policy::kLeastLoaded);
  EXPECT_EQ(policy_name(Policy::kLeastLoaded), "least-loaded");
}

TEST(RoutingPolicy, SessionKeepsAConversationOnOneInstanceAndMovesOnlyTheLeaversConversations) {
  RoutingPolicy p(Policy::kSession, {});
  std::map<std::string, std::string> home;
  std::map<std::string, int> per_instance;
  for (int s = 0; s < 200; ++s) {
    const std::string key = "conversation " + std::to_string(s);
    const auto c = three();
    const std::string id = c[p.choose(c, 10, key)->index].id;
    EXPECT_EQ(c[p.choose(c, 999, key)->index].id, id);  // the same conversation, later
    home[key] = id;
    ++per_instance[id];
  }
  for (const auto& [id, n] : per_instance) EXPECT_GT(n, 30) << id;  // spread over all three
  // "b" leaves: its conversations move, the others stay.
  std::vector<Candidate> without_b = three();
  without_b.erase(without_b.begin() + 1);
  for (const auto& [key, id] : home) {
    const std::string now = without_b[p.choose(without_b, 10, key)->index].id;
    if (id != "b") {
      EXPECT_EQ(now, id) << key;
    }
  }
}

TEST(RoutingPolicy, CacheAwareWeighsTheCachedPrefixAgainstTheQueue) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;
  cost.request_seconds = 1.0;
  cost.bytes_per_token = 4;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three();
  // 1000 tokens = 10 s to compute from scratch.
  c[1].matched_tokens = 800;  // 200 tokens left: 2 s
  Decision d = *p.choose(c, 1000, "");
  EXPECT_EQ(d.index, 1u);
  EXPECT_DOUBLE_EQ(d.predicted_seconds, 2.0);
  EXPECT_EQ(d.predicted_cached_tokens, 800);
  // Seven requests in flight there (7 s + 2 s) beat 10 s elsewhere still...
  c[1].in_flight = 7;
  EXPECT_EQ(p.choose(c, 1000, "")->index, 1u);
  // ...nine do not: an idle instance recomputes sooner.
  c[1].in_flight = 9;
  EXPECT_EQ(p.choose(c, 1000, "")->index, 0u);
  // Published queued prompt tokens weigh as compute.
  c = three();
  c[0].queued_tokens = 500;
  c[1].queued_tokens = 100;
  c[2].queued_tokens = 300;
  EXPECT_EQ(p.choose(c, 100, "")->index, 1u);
}

TEST(RoutingPolicy, CacheAwareTiesGoToTheLeastUsedThenTheFirst) {
  RoutingPolicy p(Policy::kCacheAware, {});
  auto c = three();
  EXPECT_EQ(p.choose(c, 100, "")->index, 0u);
  c[0].routed = 5;
  c[1].routed = 2;
  c[2].routed = 2;
  EXPECT_EQ(p.choose(c, 100, "")->index, 1u);
  c[1].in_flight = 1;  // no longer a tie
  EXPECT_EQ(p.choose(c, 100, "")->index, 2u);
}

TEST(RoutingPolicy, KvMovesWhenTransferCostsLessThanTheRecomputeItSaves) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;  // 1000 tokens: 10 s
  cost.bytes_per_token = 4;
  cost.transfer_bytes_per_second = 1e6;  // 1000 tokens of 1000 bytes: 1 s
  cost.transfer_overhead_seconds = 0.5;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three_with_transports();
  c[1].matched_tokens = 1000;
  c[2].matched_tokens = 500;
  EXPECT_EQ(p.transfer_source(c, 0), std::optional<size_t>(1));  // 10 s saved for 1.5 s moved: the most
  EXPECT_DOUBLE_EQ(p.transfer_seconds(c[1], 1000), 1.5);
  EXPECT_EQ(p.transfer_source(c, 1), std::nullopt);               // the chosen one holds the most
  EXPECT_EQ(p.transfer_source(c, 2), std::optional<size_t>(1));   // 500 more tokens: 5 s for 1 s
  // Slow links: moving costs more than recomputing.
  cost.transfer_bytes_per_second = 1e5;  // 10 s + 0.5 s for 1000 tokens
  RoutingPolicy slow(Policy::kCacheAware, cost);
  EXPECT_EQ(slow.transfer_source(c, 0), std::nullopt);
  // No transport at either end, or unknown KV size: never.
  c[0].has_transport = false;
  EXPECT_EQ(p.transfer_source(c, 0), std::nullopt);
  c[0].has_transport = true;
  c[1].kv_bytes_per_token = 0;
  EXPECT_EQ(p.transfer_source(c, 0), std::optional<size_t>(2));
  // Only cache-aware routing moves KV.
  EXPECT_EQ(RoutingPolicy(Policy::kSession, cost).transfer_source(c, 0), std::nullopt);
}

// A profile as `mnemo profile` writes it: `per_token` s at position 0, `per_context` s more per
// position of context.
std::shared_ptr<const CostModel> profile(double per_token, double per_context) {
  auto m = std::make_shared<CostModel>();
  m->per_token_seconds = per_token;
  m->per_context_token_seconds = per_context;
  m->source = "test";
  return m;
}

TEST(RoutingPolicy, CacheAwareChargesEachInstanceItsOwnProfiledCost) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;  // instances without a profile: 10 ms per token
  cost.request_seconds = 1.0;
  cost.bytes_per_token = 4;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three();
  c[0].profile = profile(0.004, 0);  // 4 ms per token, flat
  c[1].profile = profile(0.001, 0);  // 1 ms per token: the fastest
  // c[2]: no profile, the flags' 10 ms per token.
  EXPECT_DOUBLE_EQ(p.predicted_seconds(c[0], 1000), 4.0);
  EXPECT_DOUBLE_EQ(p.predicted_seconds(c[1], 1000), 1.0);
  EXPECT_DOUBLE_EQ(p.predicted_seconds(c[2], 1000), 10.0);
  EXPECT_EQ(p.choose(c, 1000, "")->index, 1u);
  // A cached prefix on the slower instance: 200 tokens left there (0.8 s) beat 1000 on the fast one.
  c[0].matched_tokens = 800;
  EXPECT_EQ(p.choose(c, 1000, "")->index, 0u);
  EXPECT_DOUBLE_EQ(p.choose(c, 1000, "")->predicted_seconds, 0.8);
  // Queued prompt tokens cost what the instance's first positions cost.
  c[0].queued_tokens = 100;  // +0.4 s there: 1.2 s, more than the fast one's 1.0 s
  EXPECT_EQ(p.choose(c, 1000, "")->index, 1u);
}

TEST(RoutingPolicy, ProfiledCostRisesWithTheContextPositionOfTheUncachedTokens) {
  RoutingPolicy p(Policy::kCacheAware, {});
  Candidate c;
  c.profile = profile(0.001, 0.001 / 1000);  // a token at position 1000 costs twice one at 0
  // 1000 uncached tokens at positions [0, 1000): mean position 499.5.
  EXPECT_NEAR(p.exec_seconds(c, 1000, 0), 1000 * (0.001 + 0.000001 * 499.5), 1e-9);
  // The same 1000 tokens at [3000, 4000), after a cached prefix, cost more: attention over it.
  EXPECT_NEAR(p.exec_seconds(c, 4000, 3000), 1000 * (0.001 + 0.000001 * 3499.5), 1e-9);
  EXPECT_DOUBLE_EQ(p.exec_seconds(c, 4000, 3000), c.profile->recompute_seconds(3000, 4000));
  // A match longer than the prompt (the tree holds the reply too) leaves nothing to compute.
  EXPECT_DOUBLE_EQ(p.exec_seconds(c, 100, 500), 0.0);
}

TEST(RoutingPolicy, KvMovesWhenItSavesMoreOfTheTargetsOwnProfiledTime) {
  CostParams cost;
  cost.prefill_tokens_per_second = 1e6;  // the flags would say recomputing is nearly free
  cost.bytes_per_token = 4;
  cost.transfer_bytes_per_second = 1e6;  // 1000 tokens of 1000 bytes: 1 s
  cost.transfer_overhead_seconds = 0.5;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three_with_transports();
  c[1].matched_tokens = 1000;
  EXPECT_EQ(p.transfer_source(c, 0), std::nullopt);  // no profile: 1 ms to recompute, 1.5 s to move
  c[0].profile = profile(0.01, 0);                   // the target's profile: 10 s to recompute
  EXPECT_EQ(p.transfer_source(c, 0), std::optional<size_t>(1));
  c[0].profile = profile(0.001, 0);  // 1 s to recompute: moving (1.5 s) does not pay
  EXPECT_EQ(p.transfer_source(c, 0), std::nullopt);
}

TEST(RoutingPolicy, TextBytesConvertToTokensAtTheConfiguredRate) {
  CostParams cost;
  cost.bytes_per_token = 4;
  RoutingPolicy p(Policy::kCacheAware, cost);
  EXPECT_EQ(p.tokens_of_text(4000), 1000);
  EXPECT_EQ(p.tokens_of_text(6), 2);  // rounded
  EXPECT_EQ(p.tokens_of_text(0), 0);
}

TEST(RoutingPolicy, PolicyNamesRoundTripAndUnknownOnesAreRefused) {
  for (Policy policy : {Policy::kRoundRobin, Policy::kSession, Policy::kCacheAware}) {
    EXPECT_EQ(*parse_policy(policy_name(policy)), policy);
  }
  const auto bad = parse_policy("random");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("random"), std::string::npos);
}

TEST(PlanRoute, ThePoliciesChoiceFirstThenTheRestByPredictedTime) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;
  cost.request_seconds = 1;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three();
  c[0].in_flight = 3;         // 3 s queued + 10 s of prompt
  c[1].matched_tokens = 900;  // 1 s of prompt: the choice
  c[2].in_flight = 1;         // 1 s queued + 10 s
  const RoutePlan plan = plan_route(p, c, 1000, "", /*may_push=*/true);
  EXPECT_EQ(plan.order, (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(plan.predicted_cached_tokens, 900);
  EXPECT_EQ(plan.push_from, std::nullopt);  // no transports
  EXPECT_TRUE(plan_route(p, {}, 1000, "", true).order.empty());
}

TEST(PlanRoute, PushesTheKvOfTheHolderOnlyWhenAllowedAndCheaper) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;
  cost.request_seconds = 20;  // the holder is busy: the work goes elsewhere
  cost.transfer_bytes_per_second = 1e6;
  cost.transfer_overhead_seconds = 0.5;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three_with_transports();
  c[1].matched_tokens = 1000;
  c[1].in_flight = 2;  // 40 s queued: worse than computing the prompt anywhere else
  const RoutePlan plan = plan_route(p, c, 1000, "", /*may_push=*/true);
  ASSERT_FALSE(plan.order.empty());
  EXPECT_NE(plan.order.front(), 1u);
  EXPECT_EQ(plan.push_from, std::optional<size_t>(1));  // its KV moves to the chosen one (1.5 s < 10 s)
  EXPECT_EQ(plan_route(p, c, 1000, "", /*may_push=*/false).push_from, std::nullopt);  // a Responses turn
  EXPECT_EQ(plan.order.size(), 3u);
}

// Cache pressure: a prompt whose new tokens overflow a full cache pushes as many cached tokens
// out, each charged pressure_weight of a token's compute, so a holder of a shared prefix that is
// full loses a new conversation to an instance with room; with room, or with the term off, the
// holder keeps it; an unknown capacity adds nothing.
TEST(RoutingPolicy, CacheAwareChargesWhatAPlacementPushesOutOfAFullCache) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;  // 1 token: 10 ms
  cost.pressure_weight = 0.5;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three();
  for (auto& x : c) x.cache_capacity_tokens = 10000;
  c[0].matched_tokens = 300;   // the shared prefix: 9 s for the 900 new tokens
  c[0].cached_tokens = 10000;  // full: those 900 push 900 out, 0.5 x 9 s more
  c[1].cached_tokens = 9900;   // room for 100 of its 1,200 new: 1,100 pushed out
  c[2].cached_tokens = 2000;   // room for all
  EXPECT_DOUBLE_EQ(p.pressure_seconds(c[0], 900), 4.5);
  EXPECT_DOUBLE_EQ(p.pressure_seconds(c[1], 1200), 5.5);
  EXPECT_DOUBLE_EQ(p.pressure_seconds(c[2], 1200), 0.0);
  EXPECT_DOUBLE_EQ(p.predicted_seconds(c[0], 1200), 13.5);
  EXPECT_DOUBLE_EQ(p.predicted_seconds(c[1], 1200), 17.5);
  EXPECT_EQ(p.choose(c, 1200, "")->index, 2u);  // 12 s, with room, against the full holder's 13.5 s
  // The holder with room keeps the conversation (9 s).
  c[0].cached_tokens = 2000;
  EXPECT_EQ(p.choose(c, 1200, "")->index, 0u);
  // Full, but the term off, or the capacity unknown: the prefix decides.
  c[0].cached_tokens = 10000;
  cost.pressure_weight = 0;
  EXPECT_EQ(RoutingPolicy(Policy::kCacheAware, cost).choose(c, 1200, "")->index, 0u);
  c[0].cache_capacity_tokens = 0;
  EXPECT_EQ(p.choose(c, 1200, "")->index, 0u);
}

TEST(PlanRoute, APinnedSessionGoesToItsInstanceWhateverTheCacheAndLoad) {
  CostParams cost;
  cost.prefill_tokens_per_second = 100;
  RoutingPolicy p(Policy::kCacheAware, cost);
  auto c = three();
  // Each session maps to one instance; over many sessions every instance gets some.
  std::vector<int> hits(3, 0);
  for (int s = 0; s < 60; ++s) {
    const std::string session = "session-" + std::to_string(s);
    const RoutePlan plan = plan_route(p, c, 1000, "", true, session);
    ASSERT_EQ(plan.order.size(), 3u);
    ++hits[plan.order.front()];
    // The cache and the load elsewhere do not move it.
    auto busy = c;
    busy[(plan.order.front() + 1) % 3].matched_tokens = 1000;
    busy[plan.order.front()].in_flight = 5;
    EXPECT_EQ(plan_route(p, busy, 1000, "", true, session).order.front(), plan.order.front()) << session;
    // An instance that leaves moves only its own sessions.
    const size_t gone = (plan.order.front() + 2) % 3;
    auto fewer = c;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(gone));
    EXPECT_EQ(fewer[plan_route(p, fewer, 1000, "", true, session).order.front()].id, c[plan.order.front()].id) << session;
  }
  for (int h : hits) EXPECT_GT(h, 5);
}

TEST(ChoosePrefill, MostOfThePromptHeldThenTheLeastBusy) {
  auto c = three();
  EXPECT_EQ(choose_prefill({}), std::nullopt);
  c[0].in_flight = 2;
  c[1].in_flight = 1;
  c[2].in_flight = 1;
  EXPECT_EQ(choose_prefill(c), std::optional<size_t>(1));  // none holds any: the least busy, first of equals
  c[2].matched_tokens = 64;
  EXPECT_EQ(choose_prefill(c), std::optional<size_t>(2));  // holds most of the prompt
  c[0].matched_tokens = 64;
  EXPECT_EQ(choose_prefill(c), std::optional<size_t>(2));  // as much, less busy
}

}  // namespace
}  // namespace mnemo::router
