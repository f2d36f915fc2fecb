// Where a request goes (SPEC M6, M7): round-robin, session affinity, least-loaded (fewest
// requests in flight, then fewest queued tokens), or cache-aware, which picks argmin over
// instances of (queued work + exec(prompt, cached prefix)). Pure: the router gathers
// the candidates' loads and prompt-tree matches, this decides. Device-free and unit-tested.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/cost_model.h"
#include "util/result.h"

namespace mnemo::router {

enum class Policy { kRoundRobin, kSession, kCacheAware, kLeastLoaded };
Result<Policy> parse_policy(std::string_view name);  // "round-robin", "session", "cache-aware", "least-loaded"
std::string_view policy_name(Policy policy);
// Every policy's name, cache-aware first (the router's default).
const std::vector<std::string>& policy_names();

// The router's own counts drive the queue term: they are exact for its own traffic, while what an
// instance publishes lags by up to a keep-alive period (a request that just finished would still
// count, and send the next turn away from its cache).
struct Candidate {
  std::string id;
  int64_t in_flight = 0;        // requests the router sent it that have not finished
  uint64_t routed = 0;          // requests the router sent it so far (spreads ties)
  int64_t queued_tokens = 0;    // prompt tokens admitted and not yet computed, as published
  int64_t matched_tokens = 0;   // of this prompt, in the instance's prompt tree
  bool has_transport = false;   // can send and receive KV (InstanceInfo.transfer_endpoint)
  int64_t kv_bytes_per_token = 0;
  // The instance's own profile (`mnemo profile`, published in etcd): what a token costs it at
  // each context position. Null: CostParams::prefill_tokens_per_second, flat.
  std::shared_ptr<const CostModel> profile;
  // Cache pressure: tokens the instance's cache holds now (by its events) and can hold (its
  // tiers); 0 capacity: unknown, no pressure term.
  int64_t cached_tokens = 0;
  int64_t cache_capacity_tokens = 0;
};

// exec(x, y_p) of SPEC M6: the prompt's tokens past the cached prefix, each at its context
// position, on the instance's profiled curve (Candidate::profile; attention makes a token at
// position 4096 cost about twice one at 0 here), else 1 / prefill_tokens_per_second each. Every
// request in flight there costs request_seconds.
struct CostParams {
  double prefill_tokens_per_second = 1000;
  double request_seconds = 1.0;
  double bytes_per_token = 4;  // a router that does not tokenize: prompt text bytes -> tokens
  // Moving KV between instances (SPEC M7): bytes / bandwidth + a fixed cost per transfer.
  double transfer_bytes_per_second = 1e9;
  double transfer_overhead_seconds = 0.05;
  // What placing a prompt on a full cache costs later: each cached token it pushes out is
  // charged this share of a token's compute (about the chance it is asked for again). Without
  // it, cache-aware routing keeps sending conversations to the few instances holding a shared
  // prefix, which then evict one another's histories (docs/benchmarks.md, "Cluster
  // simulation"). 0: off.
  double pressure_weight = 0.5;
};

struct Decision {
  size_t index = 0;               // into the candidates
  double predicted_seconds = 0;   // queued work + the prompt's compute there
  int64_t predicted_cached_tokens = 0;
};

class RoutingPolicy {
 public:
  RoutingPolicy(Policy policy, CostParams cost) : policy_(policy), cost_(cost) {}

  // nullopt when there is no candidate. `session_key` identifies the conversation (for kSession).
  std::optional<Decision> choose(const std::vector<Candidate>& candidates, int64_t prompt_tokens,
                                 std::string_view session_key);
  // Cache-aware only (SPEC M7): the candidate to fetch the prompt's KV from for `chosen`, when
  // another holds more of the prefix and moving the difference costs less than recomputing it
  // (transfer(y_p, y_p') <= exec(x, y_p) - exec(x, y_p')); nullopt to recompute.
  std::optional<size_t> transfer_source(const std::vector<Candidate>& candidates, size_t chosen) const;
  double transfer_seconds(const Candidate& from, int64_t tokens) const;
  // What placing `new_tokens` more in c's cache costs later: those beyond its free room push
  // as many cached tokens out, each charged CostParams::pressure_weight of a token's compute.
  double pressure_seconds(const Candidate& c, int64_t new_tokens) const;

  // The seconds cache-aware routing predicts for a candidate: the requests in flight there, the
  // prompt's uncached tokens, and the cache pressure the placement adds (pressure_seconds).
  double predicted_seconds(const Candidate& c, int64_t prompt_tokens) const;
  // exec(x, y_p): seconds for `c` to compute prompt positions [cached_tokens, prompt_tokens),
  // plus the prompt tokens queued there (taken at position 0: their contexts are unknown).
  double exec_seconds(const Candidate& c, int64_t prompt_tokens, int64_t cached_tokens) const;

  // Tokens in `text_bytes` of prompt text, for a router that does not tokenize (an estimate).
  int64_t tokens_of_text(size_t text_bytes) const;

  Policy policy() const { return policy_; }
  const CostParams& cost() const { return cost_; }

 private:
  Policy policy_;
  CostParams cost_;
  uint64_t next_ = 0;  // round-robin position
};

// Where one request goes, decided from the candidates' figures alone (SPEC M7): the policy's
// choice first, then the rest by predicted seconds (the order to try them in when one does not
// answer); with `may_push`, cache-aware, a candidate to move the prompt's KV from to the chosen
// one first (transfer_source).
struct RoutePlan {
  std::vector<size_t> order;        // into the candidates; empty when there are none
  std::optional<size_t> push_from;  // into the candidates
  int64_t predicted_cached_tokens = 0;
};
// `pinned_session` (a client's X-Session-ID; empty: none) sends the request to that session's
// instance by rendezvous hash, whatever the policy.
RoutePlan plan_route(RoutingPolicy& policy, const std::vector<Candidate>& candidates, int64_t prompt_tokens,
                     std::string_view session_key, bool may_push, std::string_view pinned_session = {});
// The candidate with the fewest requests in flight, then queued tokens, then routed so far, then
// the first (candidates non-empty).
size_t least_loaded(const std::vector<Candidate>& candidates);
// The candidate a session key maps to by rendezvous hashing (candidates non-empty).
size_t rendezvous(const std::vector<Candidate>& candidates, std::string_view session_key);

// Of prefill instances, the one to compute a decode instance's prompt (SPEC D4): the one holding
// most of it (matched_tokens), then the least busy (in_flight), then the first.
std::optional<size_t> choose_prefill(const std::vector<Candidate>& prefills);

}  // namespace mnemo::router
