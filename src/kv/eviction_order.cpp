#include "kv/eviction_order.h"

#include <algorithm>

#include "kv/chunk_reuse.h"
#include "util/check.h"

namespace mnemo {

EvictionOrder::EvictionOrder(RetentionPolicy policy, CostModel cost, RetentionOptions options, ChunkGeometry geometry,
                             NextUse next_use)
    : policy_(policy), next_use_(std::move(next_use)), cost_(std::move(cost)), geometry_(geometry), model_(options) {
  MNEMO_CHECK(policy_ != RetentionPolicy::kOracle || next_use_, "the oracle policy needs to be told the next uses");
}

ChunkFacts EvictionOrder::facts_of(const PrefixIndex::Chunk& c) const {
  ChunkFacts f;
  f.last_use = c.last_use;
  f.chunk_tokens = geometry_.chunk_tokens;
  f.end_chunks = std::max(1, c.end_chunks);
  f.bytes = static_cast<int64_t>(conversation_bytes_per_chunk(f.end_chunks));
  f.ended = c.ended && honours_end();
  return f;
}

double EvictionOrder::conversation_bytes_per_chunk(int32_t end_chunks) const {
  const int32_t global = geometry_.global_layers;
  const int32_t window = global == 0 ? 0 : geometry_.sliding_window;
  const double layer_bytes = static_cast<double>(geometry_.chunk_bytes) / geometry_.n_layers;
  return layer_bytes * layers_per_chunk(end_chunks, geometry_.chunk_tokens, window, geometry_.n_layers, global);
}

double EvictionOrder::score(const PrefixIndex::Chunk& c, double now) const {
  if (pinned(c)) return std::numeric_limits<double>::infinity();
  switch (policy_) {
    case RetentionPolicy::kLru:
    case RetentionPolicy::kTailFirst:
      return c.last_use;
    case RetentionPolicy::kMnemo:
      return model_.log_value(facts_of(c), now);
    case RetentionPolicy::kOracle:
      return -next_use_(c);  // the farthest next use lowest; never (+infinity) lowest of all
    case RetentionPolicy::kSlru:
    case RetentionPolicy::kArc:
      // As if reused chunks were used a year later: once-used ones first. Only where chunks of
      // different kinds are compared (a device slot against a block; copies ahead of need) does
      // this stand for the segment rule of lowest().
      return c.last_use + (c.reused ? 3.15e7 : 0.0);
    case RetentionPolicy::kPensieve:
      break;
  }
  const int64_t begin = static_cast<int64_t>(c.position) * geometry_.chunk_tokens;
  return cost_.retention_value(begin, begin + geometry_.chunk_tokens, now - c.last_use);
}

bool EvictionOrder::leaves_before(double s, const PrefixIndex::Chunk& c, double other_score,
                                  const PrefixIndex::Chunk& other) const {
  // Ties (values in one flat stretch, or one conversation's chunks): the older, then the leading
  // chunk first (tail-first: the trailing one).
  if (s != other_score) return s < other_score;
  if (c.last_use != other.last_use) return c.last_use < other.last_use;
  if (c.position != other.position) {
    return policy_ == RetentionPolicy::kTailFirst ? c.position > other.position : c.position < other.position;
  }
  return PrefixIndex::slot_of(c.node) < PrefixIndex::slot_of(other.node);
}

bool EvictionOrder::pinned_leaves_before(const PrefixIndex::Chunk& c, const PrefixIndex::Chunk& other) {
  if (c.last_use != other.last_use) return c.last_use < other.last_use;
  if (c.position != other.position) return c.position < other.position;
  return PrefixIndex::slot_of(c.node) < PrefixIndex::slot_of(other.node);
}

PrefixIndex::RankClass EvictionOrder::rank_class() const {
  PrefixIndex::RankClass unpinned = unpinned_rank_class();
  if (!honours_pins()) return unpinned;
  return [unpinned = std::move(unpinned)](const PrefixIndex::RankFacts& f) { return f.pinned ? kPinnedClass : unpinned(f); };
}

PrefixIndex::RankClass EvictionOrder::unpinned_rank_class() const {
  switch (policy_) {
    case RetentionPolicy::kLru:
    case RetentionPolicy::kOracle:  // not ranked (rank()); one class if it were
      return [](const PrefixIndex::RankFacts&) { return 0; };
    case RetentionPolicy::kPensieve:
    case RetentionPolicy::kTailFirst:
      return [](const PrefixIndex::RankFacts& f) { return f.position; };
    case RetentionPolicy::kSlru:
    case RetentionPolicy::kArc:
      return [](const PrefixIndex::RankFacts& f) { return f.reused ? 1 : 0; };
    case RetentionPolicy::kMnemo:
      break;
  }
  // Ended conversations' chunks all score -infinity: one class, oldest first. Bytes per chunk (in
  // the value's denominator) depend on the conversation's length only for a sliding-window model:
  // then each length is a class of its own.
  if (geometry_.global_layers != 0) {
    return [](const PrefixIndex::RankFacts& f) { return f.ended ? kEndedClass : std::max(1, f.end_chunks); };
  }
  return [this](const PrefixIndex::RankFacts& f) {
    return f.ended ? kEndedClass : model_.class_of(std::max(1, f.end_chunks));
  };
}

void EvictionOrder::rank(PrefixIndex& index) const {
  if (policy_ != RetentionPolicy::kOracle) index.set_rank_class(this, rank_class());
  ranked_index_ = &index;
}

std::optional<PrefixIndex::Chunk> EvictionOrder::pick_segment(const std::optional<PrefixIndex::Chunk>& recent,
                                                              const std::optional<PrefixIndex::Chunk>& reused,
                                                              size_t n_recent, size_t n_reused) const {
  const bool from_recent = n_reused == 0 || static_cast<double>(n_recent) > recent_share() * static_cast<double>(n_recent + n_reused);
  if (from_recent) return recent ? recent : reused;
  return reused ? reused : recent;
}

std::optional<PrefixIndex::Chunk> EvictionOrder::lowest(const PrefixIndex& index, PrefixIndex::Copies kind,
                                                        const std::function<bool(const PrefixIndex::Chunk&)>& eligible,
                                                        double now) const {
  if (index.ranked_for() != this) return lowest_by_scan(index, kind, eligible, now);
  // The pinned class comes last (kPinnedClass); its oldest eligible chunk leaves only when no
  // other chunk can.
  std::optional<PrefixIndex::Chunk> oldest_pinned;
  if (segmented()) {
    std::optional<PrefixIndex::Chunk> oldest[2];
    index.visit_oldest_per_class(kind, [&](const PrefixIndex::Chunk& c) {
      if (!eligible(c)) return false;
      (pinned(c) ? oldest_pinned : oldest[c.reused ? 1 : 0]) = c;
      return true;
    });
    const auto unpinned = pick_segment(oldest[0], oldest[1], index.class_size(kind, 0), index.class_size(kind, 1));
    return unpinned ? unpinned : oldest_pinned;
  }
  std::optional<PrefixIndex::Chunk> best;
  double best_score = 0;
  index.visit_oldest_per_class(kind, [&](const PrefixIndex::Chunk& c) {
    if (!eligible(c)) return false;
    if (pinned(c)) {
      oldest_pinned = c;
      return true;
    }
    const double s = score(c, now);
    if (!best || leaves_before(s, c, best_score, *best)) {
      best = c;
      best_score = s;
    }
    return true;
  });
  return best ? best : oldest_pinned;
}

std::optional<PrefixIndex::Chunk> EvictionOrder::lowest_by_scan(
    const PrefixIndex& index, PrefixIndex::Copies kind, const std::function<bool(const PrefixIndex::Chunk&)>& eligible,
    double now) const {
  std::optional<PrefixIndex::Chunk> best;
  double best_score = 0;
  std::optional<PrefixIndex::Chunk> oldest[2];
  size_t counts[2] = {0, 0};
  std::optional<PrefixIndex::Chunk> oldest_pinned;
  const auto visit = [&](const PrefixIndex::Chunk& c) {
    if (pinned(c)) {
      if (eligible(c) && (!oldest_pinned || pinned_leaves_before(c, *oldest_pinned))) oldest_pinned = c;
      return;
    }
    if (segmented()) {
      ++counts[c.reused ? 1 : 0];
      std::optional<PrefixIndex::Chunk>& o = oldest[c.reused ? 1 : 0];
      if (eligible(c) && (!o || leaves_before(c.last_use, c, o->last_use, *o))) o = c;
      return;
    }
    if (!eligible(c)) return;
    const double s = score(c, now);
    if (!best || leaves_before(s, c, best_score, *best)) {
      best = c;
      best_score = s;
    }
  };
  if (kind == PrefixIndex::Copies::kDeviceSlot) {
    index.for_each_device_slot(visit);
  } else {
    index.for_each_in(static_cast<Tier>(kind), visit);
  }
  const auto unpinned = segmented() ? pick_segment(oldest[0], oldest[1], counts[0], counts[1]) : best;
  return unpinned ? unpinned : oldest_pinned;
}

void EvictionOrder::observe_insert(int32_t end_chunks, int32_t chunks, double now) {
  if (policy_ != RetentionPolicy::kMnemo || chunks <= 0) return;
  // The whole path is idle from now on, as one conversation of `end_chunks` chunks.
  PrefixIndex::Chunk path_end;
  path_end.last_use = now;
  path_end.end_chunks = end_chunks;
  model_.observe_insert(facts_of(path_end), now, chunks);
}

void EvictionOrder::observe_drop(const PrefixIndex::Chunk& c, double now) {
  // An ended chunk's observation ended with it (observe_end).
  if (policy_ == RetentionPolicy::kMnemo && !c.ended) model_.observe_drop(facts_of(c), now);
}

void EvictionOrder::observe_end(const std::vector<PrefixIndex::Chunk>& chunks, double now) {
  if (policy_ != RetentionPolicy::kMnemo) return;
  for (const PrefixIndex::Chunk& c : chunks) {
    if (!c.ended) model_.observe_end(facts_of(c), now);
  }
}

void EvictionOrder::observe_returns(const std::vector<PrefixIndex::Chunk>& chain, double now) {
  if (policy_ == RetentionPolicy::kArc) {
    adapt_arc_target(chain);
    return;
  }
  if (policy_ != RetentionPolicy::kMnemo) return;
  // Chunks cached together share their facts: one event per run of them. Without ghosts, dropped
  // chunks were reported when they dropped.
  // Nor are chunks of an ended conversation: they left the model's observation then.
  const auto observed = [&](const PrefixIndex::Chunk& c) { return (ghosts_ || !c.dropped()) && !c.ended; };
  size_t i = 0;
  while (i < chain.size()) {
    if (!observed(chain[i])) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < chain.size() && observed(chain[j]) && chain[j].last_use == chain[i].last_use &&
           chain[j].end_chunks == chain[i].end_chunks) {
      ++j;
    }
    model_.observe_return(facts_of(chain[i]), now, static_cast<int32_t>(j - i));
    i = j;
  }
}

void EvictionOrder::adapt_arc_target(const std::vector<PrefixIndex::Chunk>& chain) {
  // ARC's step: a ghost of a once-used chunk (its B1) says the once-used group was cut too
  // short, one of a reused chunk (B2) the reverse; a step is one chunk of the index.
  const double step = 1.0 / static_cast<double>(std::max<size_t>(1, ranked_index_ ? ranked_index_->size() : 1));
  for (const PrefixIndex::Chunk& c : chain) {
    if (!c.dropped()) continue;
    arc_recent_share_ = std::clamp(arc_recent_share_ + (c.reused ? -step : step), 0.0, 1.0);
  }
}

}  // namespace mnemo
