#include "sim/simulator.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <queue>
#include <tuple>
#include <vector>

#include "kv/chunk_reuse.h"

namespace mnemo::sim {
namespace {

// The next thing that happens to one conversation. Only one event per conversation is queued at
// a time, so its turns stay in order even when a start and an end fall on the same instant.
struct Event {
  double time_s;
  int kind;  // 0: a turn ends, 1: a turn starts (ends first at equal times: they free pins)
  int32_t conversation;
  int32_t turn;
  bool operator>(const Event& o) const {
    return std::tie(time_s, kind, conversation, turn) > std::tie(o.time_s, o.kind, o.conversation, o.turn);
  }
};
constexpr int kEnd = 0;
constexpr int kStart = 1;

class Replay {
 public:
  // `learner`: the policy's own copy for this replay when it learns from events (else `policy`
  // itself, told nothing).
  Replay(const Trace& trace, const SimConfig& config, const EvictionPolicy& policy, EvictionPolicy* learner)
      : trace_(trace),
        c_(config.chunk_tokens),
        cost_(config.cost),
        policy_(learner ? *learner : policy),
        learner_(learner),
        cache_(config.capacity_units(), policy_, trace.size(), config.chunk_sizes()) {
    out_.policy = std::string(policy.name());
    out_.chunk_bytes = config.chunk_bytes();
    out_.unit_bytes = config.unit_bytes();
    if (learner_) {
      cache_.set_drop_listener(
          [this](ChunkRef c, double now) { learner_->on_drop(cache_.conversation(c.conversation), c.chunk, now); });
    }
  }

  PolicyOutcome run() {
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
    for (size_t i = 0; i < trace_.size(); ++i) {
      if (!trace_[i].turns.empty()) events.push({trace_[i].turns[0].start_s, kStart, static_cast<int32_t>(i), 0});
    }
    while (!events.empty()) {
      const Event e = events.top();
      events.pop();
      const std::vector<TraceTurn>& turns = trace_[static_cast<size_t>(e.conversation)].turns;
      const TraceTurn& turn = turns[static_cast<size_t>(e.turn)];
      if (e.kind == kStart) {
        start_turn(e.conversation, e.turn, e.time_s);
        events.push({turn.end_s, kEnd, e.conversation, e.turn});
      } else {
        end_turn(e.conversation, e.turn, e.time_s);
        if (static_cast<size_t>(e.turn) + 1 < turns.size()) {
          events.push({turns[static_cast<size_t>(e.turn) + 1].start_s, kStart, e.conversation, e.turn + 1});
        }
      }
    }
    out_.counters = cache_.counters();
    return out_;
  }

 private:
  const TraceTurn& turn_at(int32_t id, int32_t t) const {
    return trace_[static_cast<size_t>(id)].turns[static_cast<size_t>(t)];
  }
  int32_t whole_chunks(int64_t tokens) const { return static_cast<int32_t>(tokens / c_); }

  void start_turn(int32_t id, int32_t t, double now) {
    const TraceTurn& turn = turn_at(id, t);
    const int64_t previous_context = t == 0 ? 0 : turn_at(id, t - 1).prompt_tokens + turn_at(id, t - 1).reply_tokens;
    const int64_t shared = std::min(previous_context, turn.prompt_tokens);
    const int32_t n_reusable = whole_chunks(std::max<int64_t>(0, std::min(shared, turn.prompt_tokens - 1)));

    // The lookup sees the cache as it was when the prompt arrived; nothing moves until it is
    // done. The real cache's rules (kv/chunk_reuse.h): a compact chunk is reused only if no
    // computed position has it in its window; without SPEC P5 nothing after a gap is.
    const ConversationState& state = cache_.conversation(id);
    std::vector<ChunkUse> use(static_cast<size_t>(n_reusable));
    for (int32_t j = 0; j < n_reusable; ++j) {
      use[static_cast<size_t>(j)] = !state.tier_of(j)            ? ChunkUse::kRecompute
                                    : cache_.is_compact({id, j}) ? ChunkUse::kCompact
                                                                 : ChunkUse::kFull;
    }
    enforce_sliding_windows(use, static_cast<int32_t>(c_), cache_.sizes().sliding_window);
    if (!policy_.reuses_after_gap()) {
      const auto gap = std::find(use.begin(), use.end(), ChunkUse::kRecompute);
      std::fill(gap, use.end(), ChunkUse::kRecompute);
    }
    std::vector<bool> hit(static_cast<size_t>(n_reusable), false);
    for (int32_t j = 0; j < n_reusable; ++j) {
      const std::optional<Tier> where = state.tier_of(j);
      if (use[static_cast<size_t>(j)] != ChunkUse::kRecompute) {
        hit[static_cast<size_t>(j)] = true;
        out_.hit_tokens[static_cast<size_t>(tier_index(*where))] += c_;
        continue;
      }
      out_.recomputed_tokens += c_;
      out_.recomputed_seconds += cost_.recompute_seconds(j * c_, (j + 1) * c_);
      if (where) out_.stranded_tokens += c_;
    }
    cache_.set_pinned(id, true);
    // Cached chunks this turn does not reuse are recomputed over: drop the stale copies.
    std::vector<ChunkRef> stale;
    std::vector<int32_t> matched;
    for (const Tier tier : kTiers) {
      for (const int32_t j : state.chunks_in[static_cast<size_t>(tier_index(tier))]) {
        if (j >= n_reusable || !hit[static_cast<size_t>(j)]) {
          stale.push_back({id, j});
        } else {
          matched.push_back(j);
        }
      }
    }
    if (learner_) {
      learner_->on_match(state, matched, now);
      for (const ChunkRef& s : stale) learner_->on_drop(state, s.chunk, now);
    }
    for (const ChunkRef& s : stale) cache_.discard(s);
    for (int32_t j = 0; j < whole_chunks(turn.prompt_tokens); ++j) cache_.place_on_device({id, j}, now);

    ++out_.turns;
    out_.prompt_tokens += turn.prompt_tokens;
    out_.reusable_tokens += static_cast<int64_t>(n_reusable) * c_;
  }

  void end_turn(int32_t id, int32_t t, double now) {
    const TraceTurn& turn = turn_at(id, t);
    for (int32_t j = whole_chunks(turn.prompt_tokens); j < whole_chunks(turn.prompt_tokens + turn.reply_tokens); ++j) {
      cache_.place_on_device({id, j}, now);
    }
    const std::vector<TraceTurn>& turns = trace_[static_cast<size_t>(id)].turns;
    cache_.set_last_used(id, now);
    cache_.set_next_use(id, static_cast<size_t>(t) + 1 < turns.size() ? turns[static_cast<size_t>(t) + 1].start_s
                                                                      : ConversationState::kNever);
    cache_.set_end_chunks(id, whole_chunks(turn.prompt_tokens + turn.reply_tokens));
    cache_.set_pinned(id, false);
    if (learner_) learner_->on_idle(cache_.conversation(id), now);
    cache_.shrink_device_to_capacity(now);
  }

  const Trace& trace_;
  int64_t c_;
  const CostModel& cost_;
  const EvictionPolicy& policy_;
  EvictionPolicy* learner_;
  TieredChunkCache cache_;
  PolicyOutcome out_;
};

}  // namespace

ChunkSizes SimConfig::chunk_sizes() const {
  if (sliding_window <= 0) return {};
  return ChunkSizes{layers, global_layers, chunk_tokens, sliding_window};
}

std::array<int64_t, kTierCount> SimConfig::capacity_units() const {
  std::array<int64_t, kTierCount> units{};
  for (size_t t = 0; t < units.size(); ++t) units[t] = capacity_bytes[t] / unit_bytes();
  return units;
}

std::array<int64_t, kTierCount> SimConfig::capacity_chunks() const {
  std::array<int64_t, kTierCount> chunks{};
  for (size_t t = 0; t < chunks.size(); ++t) chunks[t] = capacity_bytes[t] / chunk_bytes();
  return chunks;
}

Result<PolicyOutcome> simulate_policy(const Trace& trace, const SimConfig& config, const EvictionPolicy& policy) {
  if (config.chunk_tokens <= 0) return make_error("chunk size must be positive, got {}", config.chunk_tokens);
  if (config.kv_bytes_per_token <= 0) return make_error("KV bytes per token must be positive, got {}", config.kv_bytes_per_token);
  if (config.sliding_window < 0 ||
      (config.sliding_window > 0 && (config.layers < 1 || config.layers > 1024 || config.global_layers < 1 ||
                                     config.global_layers > config.layers || config.chunk_bytes() % config.layers != 0))) {
    return make_error("sliding window {} over {} layers, {} global: a window needs 1 <= global layers <= layers, "
                      "and a chunk's bytes divisible by its layers",
                      config.sliding_window, config.layers, config.global_layers);
  }
  for (const int64_t b : config.capacity_bytes) {
    if (b < 0) return make_error("a tier capacity is negative ({} bytes)", b);
  }
  if (config.capacity_chunks()[0] < 1) {
    return make_error("the device tier ({} bytes) holds no chunk of {} bytes", config.capacity_bytes[0], config.chunk_bytes());
  }
  for (const TraceConversation& c : trace) {
    for (size_t t = 0; t < c.turns.size(); ++t) {
      const TraceTurn& turn = c.turns[t];
      if (turn.prompt_tokens < 1 || turn.reply_tokens < 0 || turn.end_s < turn.start_s ||
          (t > 0 && turn.start_s < c.turns[t - 1].end_s)) {
        return make_error("conversation '{}' turn {}: bad trace turn (prompt {}, reply {}, {} s to {} s)", c.id, t,
                          turn.prompt_tokens, turn.reply_tokens, turn.start_s, turn.end_s);
      }
    }
  }
  const std::unique_ptr<EvictionPolicy> learner = policy.start_replay();
  return Replay(trace, config, policy, learner.get()).run();
}

}  // namespace mnemo::sim
