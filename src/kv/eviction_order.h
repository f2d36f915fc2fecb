// Which cached chunk leaves a tier first (SPEC P3), apart from where the chunks are stored: the
// retention value of each chunk under one of three policies, the search for the lowest, and the
// events the learnt policy observes. KvCache asks it for victims; it never moves a byte.
//
// Policies: mnemo (the default of `mnemo serve`), the recompute a chunk is expected to save per
// byte per second, from a return model learnt online from this cache's own events
// (kv/retention_model.h); Pensieve's V = Cost(chunk)/T with Cost the recompute time of the chunk
// at its position (kv/cost_model.h) and T the idle time of the conversations using it; or least
// recently used. Two more serve as baselines and bounds for `mnemo simulate`: tail-first, least
// recently used with a conversation's last chunk first and no reuse past a missing chunk (what
// radix caches do), the oracle, which is told when each chunk is next used (Belady: the
// farthest first), and two recency-frequency policies in the style of SLRU and ARC (vLLM's CPU
// offloader runs ARC): chunks a match found again (reused) are kept apart from those cached once,
// each group least recently used first; SLRU takes from the once-used group while the reused
// ones are within 80% of a tier, ARC while the once-used exceed a target share it adapts on the
// returns of dropped chunks (a ghost cached once raises it, a reused ghost lowers it).
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "kv/cost_model.h"
#include "kv/prefix_index.h"
#include "kv/retention_model.h"

namespace mnemo {

enum class RetentionPolicy { kPensieve, kLru, kMnemo, kTailFirst, kOracle, kSlru, kArc };

// The oracle's knowledge: when a cached chunk is next used (+infinity: never).
using NextUse = std::function<double(const PrefixIndex::Chunk&)>;

// What a chunk's bytes are, for the value per byte: a sliding-window model's chunks a window
// before their conversation's end keep only their global layers.
struct ChunkGeometry {
  int32_t chunk_tokens = 32;
  int32_t n_layers = 1;
  int32_t global_layers = 0;  // 0: every layer is global (nothing compacts)
  int32_t sliding_window = 0;
  size_t chunk_bytes = 1;     // all layers
};

class EvictionOrder {
 public:
  // `next_use` is the oracle's (required for it, ignored by the others).
  EvictionOrder(RetentionPolicy policy, CostModel cost, RetentionOptions options, ChunkGeometry geometry,
                NextUse next_use = {});

  RetentionPolicy policy() const { return policy_; }
  // Whether a client's end of its conversation (PrefixIndex::set_ended) ranks its chunks first:
  // the learnt policy's (their value is 0); the others are the published baselines, as published.
  bool honours_end() const { return policy_ == RetentionPolicy::kMnemo; }
  // The rank class of ended chunks (below every other).
  static constexpr int32_t kEndedClass = std::numeric_limits<int32_t>::min();
  // Whether a client's pin (PrefixIndex::pin: a request's cache_control ttl) keeps its chunks
  // until every unpinned one of a tier has gone: every policy's but the oracle's (which knows
  // the future) and tail-first's (radix caches' LRU, as published). A pin is soft: pinned
  // chunks still leave, oldest first, when nothing else can.
  bool honours_pins() const { return policy_ != RetentionPolicy::kOracle && policy_ != RetentionPolicy::kTailFirst; }
  // The rank class of pinned chunks (above every other).
  static constexpr int32_t kPinnedClass = std::numeric_limits<int32_t>::max();
  // SPEC P5: the cached chunks after a missing one are reused (the missing one is recomputed).
  // Tail-first reuses only the prefix up to the first missing chunk.
  bool reuses_after_gap() const { return policy_ != RetentionPolicy::kTailFirst; }
  // The retention value of a cached chunk, or any number in the same order: the lowest leaves
  // first (+infinity for a pinned chunk). The same for each copy, and for each chunk of a
  // conversation: which of them goes first is the tie-break's (the leading one), since a
  // sliding-window model's compact history is only usable with the whole chunks after it.
  double score(const PrefixIndex::Chunk& c, double now) const;
  // Whether `c` (score `s`) leaves before `other`: the lower score; among equals the older, then
  // the leading chunk (tail-first: the trailing one), then the lower node slot (a total order:
  // any search finds the same).
  bool leaves_before(double s, const PrefixIndex::Chunk& c, double other_score, const PrefixIndex::Chunk& other) const;

  // Victim search at scale. Within a class of chunks (rank_class) the score falls with the idle
  // time alone: LRU's is one class; Pensieve's cost / idle time, a class per position; the learnt
  // value, a class per return class of the model (per conversation length where a sliding-window
  // model's bytes per chunk depend on it). So a class's oldest eligible chunk is its lowest, and
  // the lowest of a tier is the lowest of the classes' oldest: O(classes x log n) in an index
  // ranked for this order (rank()), instead of a scan of every chunk. Tail-first ranks as
  // Pensieve (a class per position); the oracle's score is no function of idle time: it scans.
  void rank(PrefixIndex& index) const;
  PrefixIndex::RankClass rank_class() const;
  // The chunk with a copy of this kind that leaves first; `eligible` filters (each class is
  // walked oldest first until a chunk passes: cheap when few fail). By the classes if `index` is
  // ranked for this order, else by a scan; both give the same chunk.
  std::optional<PrefixIndex::Chunk> lowest(const PrefixIndex& index, PrefixIndex::Copies kind,
                                           const std::function<bool(const PrefixIndex::Chunk&)>& eligible,
                                           double now) const;
  std::optional<PrefixIndex::Chunk> lowest(const PrefixIndex& index, Tier tier,
                                           const std::function<bool(const PrefixIndex::Chunk&)>& eligible,
                                           double now) const {
    return lowest(index, PrefixIndex::copies_in(tier), eligible, now);
  }
  // The exact scan over every chunk, for tests and benchmarks to check the classes against.
  std::optional<PrefixIndex::Chunk> lowest_by_scan(const PrefixIndex& index, PrefixIndex::Copies kind,
                                                   const std::function<bool(const PrefixIndex::Chunk&)>& eligible,
                                                   double now) const;
  // SLRU's and ARC's share of a tier the once-used chunks may hold before the reused ones go.
  double recent_share() const { return policy_ == RetentionPolicy::kArc ? arc_recent_share_ : kSlruProbationShare; }
  static constexpr double kSlruProbationShare = 0.2;

  // What the learnt policy observes (the others ignore it): a conversation of `end_chunks`
  // cached (its last `chunks` chunks idle from `now`), a chunk's last copy gone, and a request
  // finding cached chunks again.
  void observe_insert(int32_t end_chunks, int32_t chunks, double now);
  void observe_drop(const PrefixIndex::Chunk& c, double now);
  // Chunks about to be marked ended (as they were before): they leave the model's observation.
  void observe_end(const std::vector<PrefixIndex::Chunk>& chunks, double now);
  void observe_returns(const std::vector<PrefixIndex::Chunk>& chain, double now);
  // From now on a match reports the returns of dropped chunks too (the cache keeps ghosts:
  // KvPoolConfig::ghosts_per_chunk).
  void observe_ghosts() { ghosts_ = true; }
  const RetentionModel& model() const { return model_; }

 private:
  ChunkFacts facts_of(const PrefixIndex::Chunk& c) const;
  void adapt_arc_target(const std::vector<PrefixIndex::Chunk>& chain);
  bool segmented() const { return policy_ == RetentionPolicy::kSlru || policy_ == RetentionPolicy::kArc; }
  bool pinned(const PrefixIndex::Chunk& c) const { return c.pinned && honours_pins(); }
  // The class of an unpinned chunk under this policy.
  PrefixIndex::RankClass unpinned_rank_class() const;
  // Of two pinned chunks, whether `c` leaves first: the order of their rank class (oldest, then
  // leading, then the lower slot).
  static bool pinned_leaves_before(const PrefixIndex::Chunk& c, const PrefixIndex::Chunk& other);
  // SLRU/ARC: of the oldest eligible once-used and reused chunks, the one that leaves, given how
  // many copies of this kind each group has.
  std::optional<PrefixIndex::Chunk> pick_segment(const std::optional<PrefixIndex::Chunk>& recent,
                                                 const std::optional<PrefixIndex::Chunk>& reused, size_t n_recent,
                                                 size_t n_reused) const;
  // What a conversation of `end_chunks` takes per chunk, its compactable history counted compact.
  double conversation_bytes_per_chunk(int32_t end_chunks) const;

  RetentionPolicy policy_;
  NextUse next_use_;
  CostModel cost_;
  ChunkGeometry geometry_;
  RetentionModel model_;  // learns only under kMnemo
  bool ghosts_ = false;
  double arc_recent_share_ = 0;  // ARC's target p, as a share of a tier; adapted on ghost returns
  mutable const PrefixIndex* ranked_index_ = nullptr;  // the index rank() grouped (ARC's step size)
};

}  // namespace mnemo
