#include "sim/cache_replay.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"
#include "sim/simulated_instance.h"
#include "util/mix64.h"

namespace mnemo::sim {
namespace {

// The trace's events, as the table-driven simulator orders them: one queued per conversation,
// ends before starts at equal times (they free blocks).
struct Event {
  double time_s;
  int kind;  // kEnd or kStart
  int32_t conversation;
  int32_t turn;
  bool operator>(const Event& o) const {
    return std::tie(time_s, kind, conversation, turn) > std::tie(o.time_s, o.kind, o.conversation, o.turn);
  }
};
constexpr int kEnd = 0;
constexpr int kStart = 1;

// Conversation `id`'s token at `position`: conversations share no chunk (the trace's prefixes
// are per conversation), and a conversation's turns share their history.
TokenId token_at(int32_t id, int64_t position) {
  return static_cast<TokenId>((static_cast<int64_t>(id) * 7919 + position) & 0x3fffffff);
}

class CacheReplay {
 public:
  CacheReplay(const Trace& trace, const SimConfig& config, std::string_view name)
      : trace_(trace), config_(config), c_(config.chunk_tokens), next_use_(trace.size(), std::numeric_limits<double>::infinity()) {
    out_.policy = std::string(name);
    out_.chunk_bytes = config.chunk_bytes();
    out_.unit_bytes = config.unit_bytes();
  }

  Status open(RetentionPolicy policy) {
    NextUse next_use;
    if (policy == RetentionPolicy::kOracle) {
      owners_ = chunk_owners(trace_, config_);
      next_use = [this](const PrefixIndex::Chunk& chunk) {
        const auto owner = owners_.find(chunk.key);
        return owner == owners_.end() ? std::numeric_limits<double>::infinity()
                                      : next_use_[static_cast<size_t>(owner->second)];
      };
    }
    MNEMO_ASSIGN_OR_RETURN(instance_, SimulatedInstance::make(config_, policy, &now_, std::move(next_use)));
    return ok_status();
  }

  // The trace's events, with the engine's admission: a turn the device has no room for waits,
  // oldest first, until running turns end; it then runs for as long as the trace says, and its
  // conversation's next turn comes the trace's think time after it ends. Without waits the times
  // are the trace's.
  PolicyOutcome run() {
    for (size_t i = 0; i < trace_.size(); ++i) {
      if (!trace_[i].turns.empty()) events_.push({trace_[i].turns[0].start_s, kStart, static_cast<int32_t>(i), 0});
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.time_s;
      if (e.kind == kStart) {
        if (fits_the_device(turn_at(e.conversation, e.turn))) {
          waiting_.push_back(e);
        } else {
          refuse(e.conversation, e.turn);
        }
      } else {
        end_turn(e.conversation, e.turn);
      }
      admit_waiting();
      instance_->step();
    }
    out_.counters = instance_->counters();
    return out_;
  }

 private:
  std::vector<TokenId> tokens_of(int32_t id, int64_t n) const {
    std::vector<TokenId> tokens(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) tokens[static_cast<size_t>(p)] = token_at(id, p);
    return tokens;
  }

  const TraceTurn& turn_at(int32_t id, int32_t t) const {
    return trace_[static_cast<size_t>(id)].turns[static_cast<size_t>(t)];
  }

  // The conversation each chunk key belongs to (the oracle's knowledge of whose chunk it is).
  static std::unordered_map<uint64_t, int32_t> chunk_owners(const Trace& trace, const SimConfig& config) {
    std::unordered_map<uint64_t, int32_t> owners;
    const int64_t c = config.chunk_tokens;
    std::vector<TokenId> chunk(static_cast<size_t>(c));
    for (size_t id = 0; id < trace.size(); ++id) {
      if (trace[id].turns.empty()) continue;
      const TraceTurn& last = trace[id].turns.back();
      uint64_t key = 0;
      for (int64_t j = 0; j < (last.prompt_tokens + last.reply_tokens) / c; ++j) {
        for (int64_t p = 0; p < c; ++p) chunk[static_cast<size_t>(p)] = token_at(static_cast<int32_t>(id), j * c + p);
        key = PrefixIndex::chunk_key(key, /*ns=*/0, chunk);
        owners.emplace(key, static_cast<int32_t>(id));
      }
    }
    return owners;
  }

  // Whether the device could hold the turn on its own: `serve` refuses a request that needs more
  // blocks than its pool has (Engine::submit, which also counts a block of slack a replay's turns,
  // of known lengths, do not need).
  bool fits_the_device(const TraceTurn& turn) const {
    return (turn.prompt_tokens + turn.reply_tokens + c_ - 1) / c_ <= config_.capacity_chunks()[0];
  }

  // A refused turn ends its conversation: its client got an error, not a reply to go on from.
  void refuse(int32_t id, int32_t t) {
    const std::vector<TraceTurn>& turns = trace_[static_cast<size_t>(id)].turns;
    out_.refused_turns += static_cast<int64_t>(turns.size()) - t;
    for (size_t i = static_cast<size_t>(t); i < turns.size(); ++i) out_.refused_prompt_tokens += turns[i].prompt_tokens;
    next_use_[static_cast<size_t>(id)] = std::numeric_limits<double>::infinity();
  }

  // Starts waiting turns, oldest first, while the device has room for the next.
  void admit_waiting() {
    while (!waiting_.empty()) {
      const Event& w = waiting_.front();
      const TraceTurn& turn = turn_at(w.conversation, w.turn);
      if (!instance_->has_room_for(turn.prompt_tokens + turn.reply_tokens)) return;
      if (now_ > w.time_s) {
        ++out_.waited_turns;
        out_.wait_seconds += now_ - w.time_s;
        out_.longest_wait_s = std::max(out_.longest_wait_s, now_ - w.time_s);
      }
      start_turn(w.conversation, w.turn);
      events_.push({now_ + (turn.end_s - turn.start_s), kEnd, w.conversation, w.turn});
      waiting_.pop_front();
    }
  }

  void start_turn(int32_t id, int32_t t) {
    const TraceTurn& turn = turn_at(id, t);
    next_use_[static_cast<size_t>(id)] = now_;
    const int64_t previous_context = t == 0 ? 0 : turn_at(id, t - 1).prompt_tokens + turn_at(id, t - 1).reply_tokens;
    const int64_t shared = std::min(previous_context, turn.prompt_tokens);
    const auto n_reusable = static_cast<int32_t>(std::max<int64_t>(0, std::min(shared, turn.prompt_tokens - 1)) / c_);

    const std::vector<TokenId> prompt = tokens_of(id, turn.prompt_tokens);
    const auto max_chunks = static_cast<int32_t>((turn.prompt_tokens - 1) / c_);
    const SimulatedInstance::Started match = instance_->start(id, prompt, max_chunks, turn.prompt_tokens + turn.reply_tokens);
    const int32_t hits = match.hits();
    out_.hit_tokens[0] += static_cast<int64_t>(match.device_chunks) * c_;
    out_.hit_tokens[1] += static_cast<int64_t>(match.host_chunks) * c_;
    out_.hit_tokens[2] += static_cast<int64_t>(match.disk_chunks) * c_;
    // Reusable chunks past the match, or recomputed inside it, are computed again.
    std::vector<bool> recomputed(static_cast<size_t>(n_reusable), false);
    for (int32_t j = match.matched_chunks; j < n_reusable; ++j) recomputed[static_cast<size_t>(j)] = true;
    for (const int32_t j : match.recompute) {
      if (j < n_reusable) recomputed[static_cast<size_t>(j)] = true;
    }
    for (int32_t j = 0; j < n_reusable; ++j) {
      if (recomputed[static_cast<size_t>(j)]) out_.recomputed_seconds += config_.cost.recompute_seconds(j * c_, (j + 1) * c_);
    }
    out_.recomputed_tokens += static_cast<int64_t>(n_reusable - std::min(hits, n_reusable)) * c_;
    ++out_.turns;
    out_.prompt_tokens += turn.prompt_tokens;
    out_.reusable_tokens += static_cast<int64_t>(n_reusable) * c_;
  }

  void end_turn(int32_t id, int32_t t) {
    const TraceTurn& turn = turn_at(id, t);
    const std::vector<TraceTurn>& turns = trace_[static_cast<size_t>(id)].turns;
    // The next turn comes the trace's think time after this one ends (later than the trace's
    // time when this one waited).
    const bool last = static_cast<size_t>(t) + 1 >= turns.size();
    next_use_[static_cast<size_t>(id)] = last ? std::numeric_limits<double>::infinity()
                                              : now_ + (turns[static_cast<size_t>(t) + 1].start_s - turn.end_s);
    if (!last) events_.push({next_use_[static_cast<size_t>(id)], kStart, id, t + 1});
    instance_->end(id, tokens_of(id, turn.prompt_tokens + turn.reply_tokens), turn.prompt_tokens, ends_explicitly(id, t),
                   keeps_alive(id, t) ? config_.keep_alive_ttl_s : 0.0);
  }

  // Whether turn t has another after it and its client promises it (SimConfig::keep_alive_share).
  bool keeps_alive(int32_t id, int32_t t) const {
    if (static_cast<size_t>(t) + 1 >= trace_[static_cast<size_t>(id)].turns.size()) return false;
    return unit_interval(mix64(static_cast<uint64_t>(id) + 2 * kSplitMixGamma)) < config_.keep_alive_share;
  }

  // Whether turn t is its conversation's last and its client says so (SimConfig::end_signal_share).
  bool ends_explicitly(int32_t id, int32_t t) const {
    if (static_cast<size_t>(t) + 1 != trace_[static_cast<size_t>(id)].turns.size()) return false;
    return unit_interval(mix64(static_cast<uint64_t>(id) + kSplitMixGamma)) < config_.end_signal_share;
  }

  const Trace& trace_;
  const SimConfig& config_;
  int64_t c_;
  double now_ = 0;
  std::vector<double> next_use_;  // per conversation: its next turn's start, now while one runs (the oracle's too)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::deque<Event> waiting_;  // turns that arrived and wait for the device's room, oldest first
  std::unordered_map<uint64_t, int32_t> owners_;  // the oracle's only
  std::unique_ptr<SimulatedInstance> instance_;
  PolicyOutcome out_;
};

}  // namespace

const std::vector<std::string>& simulated_policy_names() {
  static const std::vector<std::string> names = {"pensieve", "lru", "tail-first", "mnemo", "oracle", "slru", "arc"};
  return names;
}

std::optional<RetentionPolicy> simulated_policy(std::string_view name) {
  if (name == "lru") return RetentionPolicy::kLru;
  if (name == "pensieve") return RetentionPolicy::kPensieve;
  if (name == "mnemo") return RetentionPolicy::kMnemo;
  if (name == "tail-first") return RetentionPolicy::kTailFirst;
  if (name == "oracle") return RetentionPolicy::kOracle;
  if (name == "slru") return RetentionPolicy::kSlru;
  if (name == "arc") return RetentionPolicy::kArc;
  return std::nullopt;
}

Result<PolicyOutcome> replay_through_cache(const Trace& trace, const SimConfig& config, RetentionPolicy policy,
                                           std::string_view name) {
  MNEMO_RETURN_IF_ERROR(check_sim_config(config));
  for (const TraceConversation& c : trace) {
    for (size_t t = 0; t < c.turns.size(); ++t) {
      const TraceTurn& turn = c.turns[t];
      if (turn.prompt_tokens < 1 || turn.reply_tokens < 0 || turn.prompt_tokens + turn.reply_tokens > (int64_t{1} << 30) ||
          turn.end_s < turn.start_s ||
          (t > 0 && turn.start_s < c.turns[t - 1].end_s)) {
        return make_error("conversation '{}' turn {}: bad trace turn (prompt {}, reply {}, {} s to {} s)", c.id, t,
                          turn.prompt_tokens, turn.reply_tokens, turn.start_s, turn.end_s);
      }
    }
  }
  CacheReplay replay(trace, config, name);
  MNEMO_RETURN_IF_ERROR(replay.open(policy));
  return replay.run();
}

}  // namespace mnemo::sim
