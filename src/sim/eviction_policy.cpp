#include "sim/eviction_policy.h"

#include <algorithm>
#include <cmath>

#include "kv/retention_model.h"

namespace mnemo::sim {
namespace {

// Tokens [begin, end) of a chunk at a position.
struct ChunkSpan {
  int64_t begin;
  int64_t end;
};

ChunkSpan span_of(int32_t chunk, int32_t chunk_tokens) {
  const int64_t begin = static_cast<int64_t>(chunk) * chunk_tokens;
  return {begin, begin + chunk_tokens};
}

// Whether a chunk never costs less to recompute than the chunk before it, over the contexts
// simulated (up to 2^17 tokens). The default line always does; a profile's measured points, which
// the cost interpolates between, may dip where the measurement was noisy.
ChunkOrder order_by_cost(const CostModel& cost, int32_t chunk_tokens) {
  constexpr int64_t kCheckedTokens = int64_t{1} << 17;
  double previous = cost.recompute_seconds(0, chunk_tokens);
  for (int32_t j = 1; static_cast<int64_t>(j) * chunk_tokens < kCheckedTokens; ++j) {
    const ChunkSpan s = span_of(j, chunk_tokens);
    const double c = cost.recompute_seconds(s.begin, s.end);
    if (c < previous) return ChunkOrder::kAnyPosition;
    previous = c;
  }
  return ChunkOrder::kLeadingFirst;
}

// Policies that weigh chunks by their recompute cost, and so order a conversation's chunks by it.
class CostOrderedPolicy : public EvictionPolicy {
 public:
  CostOrderedPolicy(CostModel cost, int32_t chunk_tokens)
      : cost_(std::move(cost)), chunk_tokens_(chunk_tokens), order_(order_by_cost(cost_, chunk_tokens)) {}
  ChunkOrder chunk_order() const override { return order_; }
  bool reuses_after_gap() const override { return true; }

 protected:
  CostModel cost_;
  int32_t chunk_tokens_;
  ChunkOrder order_;
};

class PensievePolicy final : public CostOrderedPolicy {
 public:
  using CostOrderedPolicy::CostOrderedPolicy;
  std::string_view name() const override { return "pensieve"; }
  EvictionKey key(const ConversationState& c, int32_t chunk, double now_s) const override {
    const ChunkSpan s = span_of(chunk, chunk_tokens_);
    return {cost_.retention_value(s.begin, s.end, now_s - c.last_used_s), static_cast<double>(chunk)};
  }
};

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  EvictionKey key(const ConversationState& c, int32_t chunk, double) const override {
    return {c.last_used_s, static_cast<double>(chunk)};
  }
  ChunkOrder chunk_order() const override { return ChunkOrder::kLeadingFirst; }
  bool reuses_after_gap() const override { return true; }
};

class TailFirstPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "tail-first"; }
  EvictionKey key(const ConversationState& c, int32_t chunk, double) const override {
    return {c.last_used_s, -static_cast<double>(chunk)};
  }
  ChunkOrder chunk_order() const override { return ChunkOrder::kTrailingFirst; }
  bool reuses_after_gap() const override { return false; }
};

// The retention model fed with what the real cache would see, and nothing else: turn ends
// (chunks become idle), matches (a new turn's prompt contains idle chunks: cached ones, and with
// ghosts the dropped ones too, whose keys the cache keeps) and, without ghosts, drops. Every
// chunk of a conversation shares its last use and length, so its leading chunks go first, as
// for LRU.
class MnemoPolicy final : public EvictionPolicy {
 public:
  MnemoPolicy(bool ghosts, int32_t chunk_tokens, ChunkSizes sizes)
      : ghosts_(ghosts), chunk_tokens_(chunk_tokens), sizes_(sizes) {}
  std::string_view name() const override { return ghosts_ ? "mnemo" : "mnemo-no-ghosts"; }
  EvictionKey key(const ConversationState& c, int32_t, double now_s) const override {
    // Equal values (one class, idle times in one flat stretch of the index): the older first.
    return {model_.log_value(facts(c), now_s), c.last_used_s};
  }
  ChunkOrder chunk_order() const override { return ChunkOrder::kLeadingFirst; }
  bool reuses_after_gap() const override { return true; }

  std::unique_ptr<EvictionPolicy> start_replay() const override {
    return std::make_unique<MnemoPolicy>(ghosts_, chunk_tokens_, sizes_);
  }
  void on_match(const ConversationState& c, const std::vector<int32_t>& chunks, double now_s) override {
    // With ghosts every chunk of the previous context is seen again: the new prompt holds them all.
    const auto n = static_cast<int32_t>(chunks.size());
    if (ghosts_ ? c.end_chunks > 0 : n > 0) model_.observe_return(facts(c), now_s, ghosts_ ? c.end_chunks : n);
  }
  void on_idle(const ConversationState& c, double now_s) override {
    int32_t n = 0;
    for (const auto& held : c.chunks_in) n += static_cast<int32_t>(held.size());
    if (n > 0) model_.observe_insert(facts(c), now_s, n);
  }
  void on_drop(const ConversationState& c, int32_t, double now_s) override {
    if (!ghosts_) model_.observe_drop(facts(c), now_s);
  }

 private:
  ChunkFacts facts(const ConversationState& c) const {
    ChunkFacts f;
    f.last_use = c.last_used_s;
    f.chunk_tokens = chunk_tokens_;
    f.end_chunks = c.end_chunks;
    // As the real cache: the conversation's bytes per chunk, its compactable history counted
    // compact (in 1/1024 units: only the order matters).
    f.bytes = std::max<int64_t>(1, std::llround(1024.0 * sizes_.units_per_chunk(std::max(1, c.end_chunks))));
    return f;
  }

  bool ghosts_;
  int32_t chunk_tokens_;
  ChunkSizes sizes_;
  RetentionModel model_{retention_options_for(sizes_.bytes_depend_on_length())};
};

class OraclePolicy final : public CostOrderedPolicy {
 public:
  using CostOrderedPolicy::CostOrderedPolicy;
  std::string_view name() const override { return "oracle"; }
  EvictionKey key(const ConversationState& c, int32_t chunk, double) const override {
    // Farthest next use first: never (+inf) sorts lowest.
    const ChunkSpan s = span_of(chunk, chunk_tokens_);
    return {-c.next_use_s, cost_.recompute_seconds(s.begin, s.end)};
  }
};

}  // namespace

const std::vector<std::string>& eviction_policy_names() {
  static const std::vector<std::string> names = {"pensieve", "lru", "tail-first", "mnemo", "mnemo-no-ghosts", "oracle"};
  return names;
}

Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name, const CostModel& cost,
                                                             int32_t chunk_tokens, const ChunkSizes& sizes) {
  if (chunk_tokens <= 0) return make_error("chunk size must be positive, got {}", chunk_tokens);
  if (name == "pensieve") return std::unique_ptr<EvictionPolicy>(std::make_unique<PensievePolicy>(cost, chunk_tokens));
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(std::make_unique<LruPolicy>());
  if (name == "tail-first") return std::unique_ptr<EvictionPolicy>(std::make_unique<TailFirstPolicy>());
  if (name == "mnemo") return std::unique_ptr<EvictionPolicy>(std::make_unique<MnemoPolicy>(true, chunk_tokens, sizes));
  if (name == "mnemo-no-ghosts") {
    return std::unique_ptr<EvictionPolicy>(std::make_unique<MnemoPolicy>(false, chunk_tokens, sizes));
  }
  if (name == "oracle") return std::unique_ptr<EvictionPolicy>(std::make_unique<OraclePolicy>(cost, chunk_tokens));
  return make_error("unknown eviction policy '{}' (pensieve, lru, tail-first, mnemo, mnemo-no-ghosts, oracle)", name);
}

}  // namespace mnemo::sim
