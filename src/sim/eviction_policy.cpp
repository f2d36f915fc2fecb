#include "sim/eviction_policy.h"

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

class PensievePolicy final : public EvictionPolicy {
 public:
  PensievePolicy(CostModel cost, int32_t chunk_tokens)
      : cost_(std::move(cost)), chunk_tokens_(chunk_tokens), order_(order_by_cost(cost_, chunk_tokens)) {}
  std::string_view name() const override { return "pensieve"; }
  EvictionKey key(const ConversationState& c, int32_t chunk, double now_s) const override {
    const ChunkSpan s = span_of(chunk, chunk_tokens_);
    return {cost_.retention_value(s.begin, s.end, now_s - c.last_used_s), static_cast<double>(chunk)};
  }
  ChunkOrder chunk_order() const override { return order_; }
  bool reuses_after_gap() const override { return true; }

 private:
  CostModel cost_;
  int32_t chunk_tokens_;
  ChunkOrder order_;
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

class OraclePolicy final : public EvictionPolicy {
 public:
  OraclePolicy(CostModel cost, int32_t chunk_tokens)
      : cost_(std::move(cost)), chunk_tokens_(chunk_tokens), order_(order_by_cost(cost_, chunk_tokens)) {}
  std::string_view name() const override { return "oracle"; }
  EvictionKey key(const ConversationState& c, int32_t chunk, double) const override {
    // Farthest next use first: never (+inf) sorts lowest.
    const ChunkSpan s = span_of(chunk, chunk_tokens_);
    return {-c.next_use_s, cost_.recompute_seconds(s.begin, s.end)};
  }
  ChunkOrder chunk_order() const override { return order_; }
  bool reuses_after_gap() const override { return true; }

 private:
  CostModel cost_;
  int32_t chunk_tokens_;
  ChunkOrder order_;
};

}  // namespace

const std::vector<std::string>& eviction_policy_names() {
  static const std::vector<std::string> names = {"pensieve", "lru", "tail-first", "oracle"};
  return names;
}

Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name, const CostModel& cost,
                                                             int32_t chunk_tokens) {
  if (chunk_tokens <= 0) return make_error("chunk size must be positive, got {}", chunk_tokens);
  if (name == "pensieve") return std::unique_ptr<EvictionPolicy>(std::make_unique<PensievePolicy>(cost, chunk_tokens));
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(std::make_unique<LruPolicy>());
  if (name == "tail-first") return std::unique_ptr<EvictionPolicy>(std::make_unique<TailFirstPolicy>());
  if (name == "oracle") return std::unique_ptr<EvictionPolicy>(std::make_unique<OraclePolicy>(cost, chunk_tokens));
  return make_error("unknown eviction policy '{}' (pensieve, lru, tail-first, oracle)", name);
}

}  // namespace mnemo::sim
