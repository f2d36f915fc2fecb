// How much a cached chunk is worth keeping, learnt online from what the cache observes (SPEC P3,
// the retention value). Device-free and deterministic: counters, a small fit and lookup tables.
//
// The value of a chunk is the recompute it is expected to save per byte kept per second:
//
//   value = index(class, idle time) x chunk tokens / bytes
//
//   index(a) = max over horizons t of  P(its conversation returns in (a, a + t] | idle for a)
//                                      / E[time it occupies the cache in (a, a + t]]
//
// (a chunk occupies the cache until it is used again or the horizon ends). The index is the best
// rate of returns per second of occupancy a chunk can still deliver; it is made non-increasing in
// the idle time within a class, so with one class (no length information, or every class alike)
// the order is exactly least-recently-used.
//
// The return model is a mixture. A conversation of class c (the length of the conversation cached
// through the chunk, end_chunks, in half-octave buckets) comes back at all with probability p_c,
// and if it does, after a think time from one distribution shared by all classes
// (piecewise-constant hazard over half-octave idle-time bins from 1 s to 9 hours, then open):
//
//   P(alive | idle a, c) = p_c S(a) / (p_c S(a) + 1 - p_c),    S(a) = P(think time > a).
//
// Both are fitted by a few EM steps per refresh to binned, right-censored observations: a return
// (an idle chunk matched by a new request) is an event at its idle time; a chunk whose observation
// ended without a return (observe_drop), and an idle chunk still unresolved at refresh time, are
// censored at their idle time. Censoring matters: counting only returns would teach the model that
// conversations it evicted never come back. Better still, the cache keeps observing a dropped chunk
// (a "ghost": its key and facts) and reports its return when a later prompt contains it; then
// eviction censors nothing and the policy cannot reinforce its own mistakes.
//
// Estimates shrink to priors: p_c to the pooled p (with its neighbouring classes' data at half
// weight), the pooled p to prior_return_probability, each hazard bin to the prior's constant
// hazard. Weights are conversations: a chunk counts 1 / end_chunks, so a conversation's turn
// counts about 1 whatever its length.
//
// A class gets its own p_c only past a significance gate; otherwise p_c is exactly the pooled p,
// so with classes alike the order is exactly LRU's rather than LRU's plus noise. The test: 2 ln
// of the likelihood ratio of the class's data (its neighbours' at half weight, as in its
// estimate), best p against the pooled p, with the think-time distribution fixed, must exceed
// class_split_statistic. The likelihood counts censored observations by what they say (one
// censored at an idle time a returning conversation rarely outlasts says "probably not coming
// back"; one just gone idle says nothing), which a count of returns against observations would
// not. The threshold is far stricter than a single test needs because (measured) a relation can
// be real and still not worth following: on the Chinese ShareGPT set continuation rises from
// ~0.7 to ~0.95 with length, which the test finds at 2 ln LR 15-33 by the end of a replay, and
// following it recomputed more than LRU in about half the runs (so did plain shrinkage, or a
// gate at 10.8, i.e. p < 0.001; at 28 a few runs still were, by under 0.5%). The English set's
// relation (contexts over ~2k tokens continue 10-40% of the time, shorter ones ~80%) passes 40
// early in a replay. The price is that gain delayed: evidence builds for longer before a class
// splits.
//
// What this buys (docs/benchmarks.md, "Cache policy simulation"): it follows a strong relation
// the traffic has between a conversation's length and whether it continues (the think times set
// how fast idling erodes it); where there is none, or a weak one, it is LRU. Tried and left out
// because they did not help in the simulator: the number of turns so far as part of the class,
// weighting tokens by their recompute cost, the current return rate alone (instead of the best
// horizon).
//
// Who calls what (the cache's own events, in time order; nothing about the future):
//   observe_insert  chunks become idle: the request that used them finished (a turn end), or
//                   they were first cached; `c.last_use` is when (normally `now`).
//   observe_return  idle chunks are matched by a new request (cached, or a ghost), with the facts
//                   they had before the match updated last_use.
//   observe_drop    idle chunks are no longer observed: their last copy was dropped (without
//                   ghosts), or their ghost was forgotten.
//   observe_end     idle chunks' conversation was ended by its client: no longer observed.
//   value           for the victim choice; O(1) (tables built by refresh).
// The observe_ calls refresh the fit when refresh_interval_s has passed since the last refresh.
// An idle chunk is known by (last_use, class): report each one once, with the facts it was
// inserted with. Unresolved chunks older than pending_horizon_s are censored there for good.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace mnemo {

// What the cache knows about one cached chunk.
struct ChunkFacts {
  double last_use = 0;      // seconds: when it became idle (the end of the latest request using it)
  int32_t chunk_tokens = 32;
  int32_t end_chunks = 1;   // length in chunks of the last conversation cached through it
  int64_t bytes = 1;        // bytes its copy takes (a compact copy takes fewer)
  bool ended = false;       // its conversation was ended explicitly (e.g. its stored response deleted)
};

struct RetentionOptions {
  // Idle-time bins: [0, first_edge_s), then starts first_edge_s * 2^(k / bins_per_octave); the
  // last bin is open.
  double first_edge_s = 1.0;
  int32_t bins_per_octave = 2;
  int32_t idle_bins = 32;  // the last starts at 2^15 s (9.1 hours)
  // Classes: end_chunks in buckets of 2^(1 / class_bins_per_octave).
  int32_t class_bins_per_octave = 2;
  int32_t classes = 48;  // the last holds 2^23.5 chunks and more
  // Priors: with no observation every class comes back with prior_return_probability after an
  // exponential think time of prior_think_s.
  double prior_return_probability = 0.5;
  double prior_conversations = 4;        // weight of that prior against the pooled data
  double class_prior_conversations = 4;  // weight of the pooled p against a class's own data
  double neighbour_weight = 0.5;         // weight of each neighbouring class's data in a class's p
  // A class gets its own p only when 2 ln (likelihood ratio) of its data (as weighted for its p)
  // against the pooled p exceeds this. Far beyond chi-square's 10.83 (p < 0.001) on purpose: it
  // is tested at every refresh in every class, a conversation's turns are not independent, and a
  // real but weak relation is not worth following (see the comment at the top).
  // With chunk sizes that depend on the conversation's length (kClassSplitStatisticWithSizes) the
  // caller lowers it.
  double class_split_statistic = 40;
  double prior_think_s = 120;
  double prior_hazard_conversations = 2;  // pseudo-conversations through every idle bin at the prior hazard
  double refresh_interval_s = 10;
  int32_t em_steps = 4;
  double pending_horizon_s = 86400;
};

// The gate for a cache whose conversations take bytes per chunk that depend on their length (a
// sliding-window model keeps history a window before the end compact, so a long conversation
// costs less per token kept). There an unsplit class is not LRU's order but one tilted towards
// long conversations, and a relation the data has with length is worth following sooner.
// Measured in `mnemo simulate --sliding-window 512` (docs/benchmarks.md, session 12): at 40 the
// English set's long conversations, which mostly end, kept their tilt too long (mnemo recomputed
// more than LRU in 26 of 90 runs); at 10 and 20 in none of either set's runs; without the window
// 10 and 20 lose on the Chinese set (14 and 16 of 45), so the plain default stays 40.
inline constexpr double kClassSplitStatisticWithSizes = 10;

// The options for a cache whose bytes per chunk do (sliding-window models) or do not depend on a
// conversation's length.
inline RetentionOptions retention_options_for(bool bytes_depend_on_length) {
  RetentionOptions o;
  if (bytes_depend_on_length) o.class_split_statistic = kClassSplitStatisticWithSizes;
  return o;
}

class RetentionModel {
 public:
  // Checks the options (MNEMO_CHECK: they are the program's, not a request's).
  explicit RetentionModel(RetentionOptions options = {});

  // --- Events the cache feeds (`now` never decreases); `chunks` alike chunks at once (none: a
  // no-op) ---
  void observe_insert(const ChunkFacts& c, double now, int32_t chunks = 1);
  void observe_return(const ChunkFacts& c, double now, int32_t chunks = 1);
  void observe_drop(const ChunkFacts& c, double now, int32_t chunks = 1);
  // Idle chunks whose conversation its client ended (ChunkFacts::ended): no longer observed,
  // neither a return nor a censoring, so the model learns how conversations that were not ended
  // come back (the ended ones are ranked apart: value 0).
  void observe_end(const ChunkFacts& c, double now, int32_t chunks = 1);

  // --- Victim choice: the lowest leaves first ---
  // Expected tokens of recompute saved per byte per second kept; 0 for an ended conversation. O(1).
  double value(const ChunkFacts& c, double now) const;
  // Its natural logarithm (-infinity for 0): the same order, without underflow for chunks idle
  // for many think times. O(1).
  double log_value(const ChunkFacts& c, double now) const;

  // Fits the model and rebuilds the tables now.
  void refresh(double now);

  // --- The fit, for tests and reports ---
  int32_t class_of(int32_t end_chunks) const;
  int32_t bin_of(double idle_seconds) const;
  double bin_start(int32_t bin) const { return starts_[static_cast<size_t>(bin)]; }
  double return_probability(int32_t cls) const { return p_[static_cast<size_t>(cls)]; }
  double pooled_return_probability() const { return p_pooled_; }
  double hazard(int32_t bin) const { return hazard_[static_cast<size_t>(bin)]; }  // per second, of returning conversations
  // P(the conversation comes back at all | idle for `idle_seconds`).
  double alive_probability(int32_t cls, double idle_seconds) const;
  // ln index at the start of an idle bin.
  double log_index_at_bin_start(int32_t cls, int32_t bin) const { return log_index_[slot(cls, bin)]; }
  double observed_conversations() const;  // weight of the resolved observations
  size_t pending_groups() const { return pending_.size(); }

  const RetentionOptions& options() const { return o_; }

 private:
  size_t slot(int32_t cls, int32_t bin) const {
    return static_cast<size_t>(cls) * static_cast<size_t>(o_.idle_bins) + static_cast<size_t>(bin);
  }
  double weight_of(const ChunkFacts& c) const;
  double log_survival(double idle_seconds) const;  // ln S
  double log_index(int32_t cls, double idle_seconds) const;
  // One observation ending at `idle` seconds, of weight `w`, into a (count, time in bin) pair.
  void add(std::vector<double>& count, std::vector<double>& in_bin, int32_t cls, double idle, double w) const;
  void resolve(const ChunkFacts& c, double now, int32_t chunks, bool returned);
  void take_pending(int32_t cls, double last_use, double w);
  void maybe_refresh(double now);
  // The EM fit of the hazards and return probabilities, in its steps (retention_model.cpp).
  struct FitState;
  void fit(const std::vector<double>& censored, const std::vector<double>& censored_in_bin);
  void survival_starts();  // log_s_start_ from hazard_
  void expect_returns(FitState& f) const;
  void fit_hazards(FitState& f);
  void fit_return_probabilities(const FitState& f);
  void build_index_tables();

  RetentionOptions o_;
  std::vector<double> starts_;  // of the idle bins; starts_[0] = 0
  std::vector<double> widths_;  // the open last bin: as if the ratio went on

  // Resolved observations per (class, bin): weight, and weight x time spent inside the bin.
  std::vector<double> returns_, returns_in_bin_;
  std::vector<double> drops_, drops_in_bin_;
  // Idle chunks not yet resolved, by (last_use, class): their weight.
  std::map<std::pair<double, int32_t>, double> pending_;

  std::vector<double> p_;  // per class
  double p_pooled_ = 0;
  std::vector<double> hazard_;       // per bin
  std::vector<double> log_s_start_;  // ln S at each bin start
  std::vector<double> log_index_;    // per (class, bin start)
  double last_refresh_ = 0;
  bool refreshed_ = false;
};

}  // namespace mnemo
