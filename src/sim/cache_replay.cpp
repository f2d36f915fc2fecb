#include "sim/cache_replay.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <queue>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"

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

// Per layer and token, K and V of this many F16 elements each: a block's bytes dwarf a disk
// extent's header, as the real model's do, while a tier of a million chunks stays in memory.
constexpr int32_t kHeadDim = 8;

KvLayout small_layout(const SimConfig& config) {
  KvLayout layout;
  layout.n_layers = config.sliding_window > 0 ? config.layers : 1;
  layout.n_kv_heads = 1;
  layout.head_dim_k = kHeadDim;
  layout.head_dim_v = kHeadDim;
  layout.block_size = config.chunk_tokens;
  layout.dtype = DType::F16;
  return layout;
}

// Conversation `id`'s token at `position`: conversations share no chunk (the trace's prefixes
// are per conversation), and a conversation's turns share their history.
TokenId token_at(int32_t id, int64_t position) {
  return static_cast<TokenId>((static_cast<int64_t>(id) * 7919 + position) & 0x3fffffff);
}

KvLayout compact_layout(const SimConfig& config) {
  KvLayout layout = small_layout(config);
  layout.n_layers = config.sliding_window > 0 ? config.global_layers : 0;
  return layout;
}

// The disk tier's extents live in memory where the system has a memory file system (its syncs
// then cost nothing), and are deleted with the replay.
class ScratchDirectory {
 public:
  static Result<ScratchDirectory> make() {
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path(ec);
    std::string pattern = (base / "mnemo-simulate-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return make_error("cannot make a scratch folder for the disk tier in {}", base.string());
    return ScratchDirectory(pattern);
  }
  ScratchDirectory(ScratchDirectory&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  ScratchDirectory& operator=(ScratchDirectory&&) = delete;
  ScratchDirectory(const ScratchDirectory&) = delete;
  ~ScratchDirectory() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit ScratchDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The disk tier as `serve` opens it, holding as many extents as the real model's chunks would
// fill (a header is a larger share of the small layout's extents than of the model's: counted
// per extent, not per byte).
Result<std::shared_ptr<DiskTier>> open_disk(const SimConfig& config, const std::string& dir) {
  const KvLayout layout = small_layout(config);
  const auto extent_bytes =
      static_cast<int64_t>(DiskTier::header_bytes(static_cast<size_t>(config.chunk_tokens)) + layout.block_bytes());
  MNEMO_ASSIGN_OR_RETURN(auto disk, DiskTier::open(dir, 1, layout.block_bytes(), config.capacity_chunks()[2] * extent_bytes,
                                                   compact_layout(config).block_bytes()));
  return std::shared_ptr<DiskTier>(std::move(disk));
}

class CacheReplay {
 public:
  CacheReplay(const Trace& trace, const SimConfig& config, RetentionPolicy policy, std::string_view name,
              std::shared_ptr<DiskTier> disk)
      : trace_(trace), config_(config), c_(config.chunk_tokens), layout_(small_layout(config)),
        next_use_(trace.size(), std::numeric_limits<double>::infinity()),
        owners_(policy == RetentionPolicy::kOracle ? chunk_owners(trace, config) : std::unordered_map<uint64_t, int32_t>{}),
        disk_(std::move(disk)), kv_(layout_, pool_config(policy, disk_)), running_(trace.size()) {
    out_.policy = std::string(name);
    out_.chunk_bytes = config.chunk_bytes();
    out_.unit_bytes = config.unit_bytes();
  }

  PolicyOutcome run() {
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
    for (size_t i = 0; i < trace_.size(); ++i) {
      if (!trace_[i].turns.empty()) events.push({trace_[i].turns[0].start_s, kStart, static_cast<int32_t>(i), 0});
    }
    while (!events.empty()) {
      const Event e = events.top();
      events.pop();
      now_ = e.time_s;
      const std::vector<TraceTurn>& turns = trace_[static_cast<size_t>(e.conversation)].turns;
      const TraceTurn& turn = turns[static_cast<size_t>(e.turn)];
      if (e.kind == kStart) {
        start_turn(e.conversation, e.turn);
        events.push({turn.end_s, kEnd, e.conversation, e.turn});
      } else {
        end_turn(e.conversation, e.turn);
        if (static_cast<size_t>(e.turn) + 1 < turns.size()) {
          events.push({turns[static_cast<size_t>(e.turn) + 1].start_s, kStart, e.conversation, e.turn + 1});
        }
      }
      kv_.begin_background_work();
      kv_.end_background_work();
      // The disk's writes land before the next event, whatever the machine's speed: replays are
      // reproducible.
      if (disk_) disk_->flush();
      note_device_use();
    }
    fill_counters();
    return out_;
  }

 private:
  // A running turn's hold on the cache.
  struct Running {
    KvTable table;
    std::vector<int32_t> partial;
    bool cached = false;
  };

  KvPoolConfig pool_config(RetentionPolicy policy, std::shared_ptr<DiskTier> disk) const {
    KvPoolConfig c;
    c.disk = std::move(disk);
    const std::array<int64_t, kTierCount> chunks = config_.capacity_chunks();
    c.device_blocks = static_cast<int32_t>(chunks[0]);
    c.host_blocks = static_cast<int32_t>(chunks[1]);
    if (config_.sliding_window > 0) {
      std::vector<int32_t> global(static_cast<size_t>(config_.global_layers));
      for (int32_t l = 0; l < config_.global_layers; ++l) global[static_cast<size_t>(l)] = l;
      use_sliding_window(c, config_.sliding_window, std::move(global));
      // The host's bytes split between whole and compact copies as `serve`'s pools are.
      // Both hold the host's type: more of each at equal bytes. `serve` takes its exact blocks
      // from the whole pool's share.
      const auto host = static_cast<double>(config_.capacity_bytes[1]);
      const double compact_bytes = host * config_.host_compact_share;
      const double ratio = config_.host_bytes_ratio;
      c.host_blocks = static_cast<int32_t>((host - compact_bytes) * (1.0 - config_.host_exact_share) /
                                           (static_cast<double>(config_.chunk_bytes()) * ratio));
      c.host_compact_blocks =
          static_cast<int32_t>(compact_bytes / (static_cast<double>(config_.unit_bytes() * config_.global_layers) * ratio));
    }
    c.policy = policy;
    c.ghosts_per_chunk = kGhostsPerChunk;  // as `serve`
    if (policy == RetentionPolicy::kOracle) {
      c.next_use = [this](const PrefixIndex::Chunk& chunk) {
        const auto owner = owners_.find(chunk.key);
        return owner == owners_.end() ? std::numeric_limits<double>::infinity()
                                      : next_use_[static_cast<size_t>(owner->second)];
      };
    }
    c.cost = config_.cost;
    c.layerwise_swap_in = true;
    c.swap_out_threshold = config_.swap_out_threshold;
    c.clock = [this] { return now_; };
    return c;
  }

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

  void start_turn(int32_t id, int32_t t) {
    const TraceTurn& turn = turn_at(id, t);
    next_use_[static_cast<size_t>(id)] = now_;
    const int64_t previous_context = t == 0 ? 0 : turn_at(id, t - 1).prompt_tokens + turn_at(id, t - 1).reply_tokens;
    const int64_t shared = std::min(previous_context, turn.prompt_tokens);
    const auto n_reusable = static_cast<int32_t>(std::max<int64_t>(0, std::min(shared, turn.prompt_tokens - 1)) / c_);

    const std::vector<TokenId> prompt = tokens_of(id, turn.prompt_tokens);
    const auto max_chunks = static_cast<int32_t>((turn.prompt_tokens - 1) / c_);
    PrefixMatch match = kv_.match_prefix(/*ns=*/0, prompt, max_chunks);
    const int32_t hits = match.device_chunks + match.host_chunks + match.disk_chunks;
    out_.hit_tokens[0] += static_cast<int64_t>(match.device_chunks) * c_;
    out_.hit_tokens[1] += static_cast<int64_t>(match.host_chunks) * c_;
    out_.hit_tokens[2] += static_cast<int64_t>(match.disk_chunks) * c_;
    // Reusable chunks past the match, or recomputed inside it, are computed again.
    std::vector<bool> recomputed(static_cast<size_t>(n_reusable), false);
    for (int32_t j = static_cast<int32_t>(match.table.size()); j < n_reusable; ++j) recomputed[static_cast<size_t>(j)] = true;
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

    Running& r = running_[static_cast<size_t>(id)];
    r.table = std::move(match.table);
    r.partial = std::move(match.partial);
    r.cached = kv_.prepare_write(r.table, static_cast<int32_t>(r.table.size()) * static_cast<int32_t>(c_),
                                 static_cast<int32_t>(turn.prompt_tokens));
    if (!r.cached) overcommit(r, turn.prompt_tokens);
  }

  void end_turn(int32_t id, int32_t t) {
    const TraceTurn& turn = turn_at(id, t);
    const std::vector<TraceTurn>& turns = trace_[static_cast<size_t>(id)].turns;
    next_use_[static_cast<size_t>(id)] = static_cast<size_t>(t) + 1 < turns.size() ? turns[static_cast<size_t>(t) + 1].start_s
                                                                                  : std::numeric_limits<double>::infinity();
    Running& r = running_[static_cast<size_t>(id)];
    const int64_t end = turn.prompt_tokens + turn.reply_tokens;
    if (r.cached && !kv_.prepare_write(r.table, static_cast<int32_t>(turn.prompt_tokens), static_cast<int32_t>(end))) {
      overcommit(r, end);
    }
    if (r.cached || ends_explicitly(id, t)) {
      const std::vector<TokenId> tokens = tokens_of(id, end);
      if (r.cached) kv_.cache_prefix(/*ns=*/0, tokens, static_cast<int32_t>(end), r.table, r.partial);
      if (ends_explicitly(id, t)) kv_.end_conversation(/*ns=*/0, tokens);
    }
    kv_.release(r.table);
    r = Running{};
  }

  // Whether turn t is its conversation's last and its client says so (SimConfig::end_signal_share).
  bool ends_explicitly(int32_t id, int32_t t) const {
    if (static_cast<size_t>(t) + 1 != trace_[static_cast<size_t>(id)].turns.size()) return false;
    uint64_t h = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;  // splitmix64 of the place
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    return static_cast<double>(h >> 11) * 0x1.0p-53 < config_.end_signal_share;
  }

  // The turn cannot have the blocks it needs: it runs without caching anything.
  void overcommit(Running& r, int64_t tokens) {
    out_.counters.device_overcommits += (tokens + c_ - 1) / c_ - static_cast<int64_t>(r.table.size());
    kv_.release(r.table);
    r.partial.clear();
    r.cached = false;
  }

  void note_device_use() {
    const int64_t used = kv_.n_blocks() - kv_.n_free();
    out_.counters.peak_device_chunks = std::max(out_.counters.peak_device_chunks, used);
    out_.counters.peak_device_units = std::max(out_.counters.peak_device_units, used * layout_.n_layers);
  }

  // The cache's counters in the simulator's terms: bytes of the small layout scaled to the real
  // model's (both have the same layers, so a compact copy scales alike).
  void fill_counters() {
    const KvCache::Counters& k = kv_.counters();
    CacheCounters& c = out_.counters;
    const auto units = [&](int64_t small_bytes) {
      return small_bytes / static_cast<int64_t>(layout_.block_bytes() / static_cast<size_t>(layout_.n_layers));
    };
    const auto d = static_cast<size_t>(tier_index(Tier::kDevice));
    const auto h = static_cast<size_t>(tier_index(Tier::kHost));
    const auto s = static_cast<size_t>(tier_index(Tier::kDisk));
    c.moved_units[d][h] = units(k.bytes_device_to_host);
    c.moved_units[h][d] = units(k.bytes_host_to_device);
    c.moved_units[h][s] = units(k.bytes_to_disk);  // written through, or on leaving the host
    c.moved_units[s][d] = units(k.bytes_disk_to_device);
    const auto chunks = [&](int64_t u) { return u / layout_.n_layers; };
    c.moved_chunks[d][h] = chunks(c.moved_units[d][h]);
    c.moved_chunks[h][d] = chunks(c.moved_units[h][d]);
    c.moved_chunks[h][s] = chunks(c.moved_units[h][s]);
    c.moved_chunks[s][d] = chunks(c.moved_units[s][d]);
    c.evicted_chunks[d] = k.evicted_device_copies;
    c.evicted_chunks[h] = k.evicted_host_copies;
    c.evicted_chunks[s] = k.evicted_disk_copies;
    c.dropped_chunks = k.dropped_chunks;
  }

  const Trace& trace_;
  const SimConfig& config_;
  int64_t c_;
  KvLayout layout_;
  double now_ = 0;
  std::vector<double> next_use_;  // per conversation: its next turn's start (the oracle's)
  std::unordered_map<uint64_t, int32_t> owners_;  // the oracle's only
  std::shared_ptr<DiskTier> disk_;
  KvCache kv_;
  std::vector<Running> running_;
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
  if (!(config.host_compact_share >= 0 && config.host_compact_share <= 1)) {
    return make_error("the host's compact share must be within [0, 1], got {}", config.host_compact_share);
  }
  if (config.capacity_chunks()[0] < 1) {
    return make_error("the device tier ({} bytes) holds no chunk of {} bytes", config.capacity_bytes[0], config.chunk_bytes());
  }
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
  const std::array<int64_t, kTierCount> chunks = config.capacity_chunks();
  for (const int64_t n : chunks) {
    if (n > (int64_t{1} << 28)) return make_error("a tier of {} chunks is beyond the replay's range", n);
  }
  if (chunks[2] == 0) return CacheReplay(trace, config, policy, name, nullptr).run();
  MNEMO_ASSIGN_OR_RETURN(ScratchDirectory scratch, ScratchDirectory::make());
  MNEMO_ASSIGN_OR_RETURN(std::shared_ptr<DiskTier> disk, open_disk(config, scratch.path()));
  return CacheReplay(trace, config, policy, name, std::move(disk)).run();
}

}  // namespace mnemo::sim
