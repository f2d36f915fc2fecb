#include "router/routing_policy.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/ranges.h>
#include <xxhash.h>

namespace mnemo::router {

Result<Policy> parse_policy(std::string_view name) {
  if (name == "round-robin") return Policy::kRoundRobin;
  if (name == "session") return Policy::kSession;
  if (name == "cache-aware") return Policy::kCacheAware;
  if (name == "least-loaded") return Policy::kLeastLoaded;
  return make_error("unknown routing policy '{}' ({})", name, fmt::join(policy_names(), ", "));
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"cache-aware", "session", "least-loaded", "round-robin"};
  return names;
}

std::string_view policy_name(Policy policy) {
  switch (policy) {
    case Policy::kRoundRobin:
      return "round-robin";
    case Policy::kSession:
      return "session";
    case Policy::kLeastLoaded:
      return "least-loaded";
    case Policy::kCacheAware:
      break;
  }
  return "cache-aware";
}

int64_t RoutingPolicy::tokens_of_text(size_t text_bytes) const {
  return static_cast<int64_t>(std::llround(static_cast<double>(text_bytes) / cost_.bytes_per_token));
}

double RoutingPolicy::exec_seconds(const Candidate& c, int64_t prompt_tokens, int64_t cached_tokens) const {
  const int64_t cached = std::min(cached_tokens, prompt_tokens);
  if (c.profile) {
    return c.profile->recompute_seconds(cached, prompt_tokens) +
           static_cast<double>(c.queued_tokens) * c.profile->seconds_per_token_at(0);
  }
  return static_cast<double>(c.queued_tokens + prompt_tokens - cached) / cost_.prefill_tokens_per_second;
}

double RoutingPolicy::predicted_seconds(const Candidate& c, int64_t prompt_tokens) const {
  const auto ahead = static_cast<double>(c.in_flight);
  const int64_t uncached = prompt_tokens - std::min(prompt_tokens, c.matched_tokens);
  return ahead * cost_.request_seconds + exec_seconds(c, prompt_tokens, c.matched_tokens) + pressure_seconds(c, uncached);
}

double RoutingPolicy::pressure_seconds(const Candidate& c, int64_t new_tokens) const {
  if (cost_.pressure_weight <= 0 || c.cache_capacity_tokens <= 0) return 0;
  const int64_t overflow = std::max<int64_t>(0, new_tokens - std::max<int64_t>(0, c.cache_capacity_tokens - c.cached_tokens));
  const double per_token = c.profile ? c.profile->seconds_per_token_at(0) : 1.0 / cost_.prefill_tokens_per_second;
  return cost_.pressure_weight * static_cast<double>(overflow) * per_token;
}

double RoutingPolicy::transfer_seconds(const Candidate& from, int64_t tokens) const {
  return cost_.transfer_overhead_seconds +
         static_cast<double>(tokens) * static_cast<double>(from.kv_bytes_per_token) / cost_.transfer_bytes_per_second;
}

std::optional<size_t> RoutingPolicy::transfer_source(const std::vector<Candidate>& candidates, size_t chosen) const {
  if (policy_ != Policy::kCacheAware || chosen >= candidates.size() || !candidates[chosen].has_transport) return std::nullopt;
  const Candidate& to = candidates[chosen];
  std::optional<size_t> best;
  double best_gain = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& from = candidates[i];
    if (i == chosen || !from.has_transport || from.kv_bytes_per_token <= 0 || from.matched_tokens <= to.matched_tokens) continue;
    const int64_t extra = from.matched_tokens - to.matched_tokens;
    // What `to` would spend on the positions `from` holds beyond its own prefix.
    const double saved = exec_seconds(to, from.matched_tokens, to.matched_tokens) - exec_seconds(to, 0, 0);
    const double gain = saved - transfer_seconds(from, extra);
    if (gain > best_gain) {
      best_gain = gain;
      best = i;
    }
  }
  return best;
}

size_t least_loaded(const std::vector<Candidate>& candidates) {
  const auto best = std::min_element(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.in_flight, a.queued_tokens, a.routed) < std::tie(b.in_flight, b.queued_tokens, b.routed);
  });
  return static_cast<size_t>(best - candidates.begin());
}

size_t rendezvous(const std::vector<Candidate>& candidates, std::string_view session_key) {
  // Rendezvous hashing: a conversation keeps its instance while that instance lives, and only
  // the conversations of an instance that leaves move.
  uint64_t best = 0;
  size_t chosen = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const uint64_t seed = XXH3_64bits(candidates[i].id.data(), candidates[i].id.size());
    const uint64_t h = XXH3_64bits_withSeed(session_key.data(), session_key.size(), seed);
    if (i == 0 || h > best) {
      best = h;
      chosen = i;
    }
  }
  return chosen;
}

std::optional<Decision> RoutingPolicy::choose(const std::vector<Candidate>& candidates, int64_t prompt_tokens,
                                              std::string_view session_key) {
  if (candidates.empty()) return std::nullopt;
  Decision d;
  switch (policy_) {
    case Policy::kRoundRobin:
      d.index = static_cast<size_t>(next_++ % candidates.size());
      break;
    case Policy::kSession:
      d.index = rendezvous(candidates, session_key);
      break;
    case Policy::kLeastLoaded:
      d.index = least_loaded(candidates);
      break;
    case Policy::kCacheAware: {
      double best = 0;
      for (size_t i = 0; i < candidates.size(); ++i) {
        const double s = predicted_seconds(candidates[i], prompt_tokens);
        // Ties (an idle cluster, nothing cached): the one that got fewer requests, then the first.
        if (i == 0 || s < best || (s == best && candidates[i].routed < candidates[d.index].routed)) {
          best = s;
          d.index = i;
        }
      }
      break;
    }
  }
  const Candidate& chosen = candidates[d.index];
  d.predicted_seconds = predicted_seconds(chosen, prompt_tokens);
  d.predicted_cached_tokens = std::min(prompt_tokens, chosen.matched_tokens);
  return d;
}

RoutePlan plan_route(RoutingPolicy& policy, const std::vector<Candidate>& candidates, int64_t prompt_tokens,
                     std::string_view session_key, bool may_push, std::string_view pinned_session) {
  RoutePlan plan;
  std::optional<Decision> decision = policy.choose(candidates, prompt_tokens, session_key);
  if (!decision) return plan;
  if (!pinned_session.empty()) {
    decision->index = rendezvous(candidates, pinned_session);
    decision->predicted_cached_tokens = std::min(prompt_tokens, candidates[decision->index].matched_tokens);
  }
  plan.order.push_back(decision->index);
  plan.predicted_cached_tokens = decision->predicted_cached_tokens;
  if (may_push) plan.push_from = policy.transfer_source(candidates, decision->index);
  std::vector<size_t> rest;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i != decision->index) rest.push_back(i);
  }
  std::stable_sort(rest.begin(), rest.end(), [&](size_t a, size_t b) {
    return policy.predicted_seconds(candidates[a], prompt_tokens) < policy.predicted_seconds(candidates[b], prompt_tokens);
  });
  plan.order.insert(plan.order.end(), rest.begin(), rest.end());
  return plan;
}

std::optional<size_t> choose_prefill(const std::vector<Candidate>& prefills) {
  if (prefills.empty()) return std::nullopt;
  const auto best = std::min_element(prefills.begin(), prefills.end(), [](const Candidate& a, const Candidate& b) {
    if (a.matched_tokens != b.matched_tokens) return a.matched_tokens > b.matched_tokens;
    return a.in_flight < b.in_flight;
  });
  return static_cast<size_t>(best - prefills.begin());
}

}  // namespace mnemo::router
