#include "sim/cluster_replay.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sim/simulated_instance.h"

namespace mnemo::sim {
namespace {

// What the router keeps per instance beside the instance's cache.
struct InstanceState {
  std::unique_ptr<SimulatedInstance> sim;
  double busy_until = 0;                       // its last queued prefill ends
  std::deque<std::pair<double, int64_t>> queue;  // prefills not yet done: (end, tokens)
  int64_t queued_tokens = 0;
  uint64_t events_epoch = 0;                   // how far its cache events were read
  uint64_t events_next = 0;
  int64_t requests = 0;
};

class ClusterReplay {
 public:
  ClusterReplay(const ClusterTrace& trace, const ClusterConfig& config)
      : trace_(trace), config_(config), c_(config.cache.chunk_tokens), router_(config.routing, config.routing_cost),
        profile_(std::make_shared<const CostModel>(config.cache.cost)) {}

  Status open() {
    instances_.resize(static_cast<size_t>(config_.instances));
    candidates_.resize(instances_.size());
    for (size_t i = 0; i < instances_.size(); ++i) {
      MNEMO_ASSIGN_OR_RETURN(instances_[i].sim, SimulatedInstance::make(config_.cache, config_.cache_policy, &now_));
      router::Candidate& c = candidates_[i];
      c.id = fmt::format("instance-{}", i);
      c.has_transport = config_.transfers;
      c.kv_bytes_per_token = config_.cache.kv_bytes_per_token;
      c.profile = profile_;
      c.cache_capacity_tokens = instances_[i].sim->cache().capacity_chunks() * c_;  // as `serve` publishes it
      read_events(i);
    }
    return ok_status();
  }

  ClusterOutcome run() {
    const auto started = std::chrono::steady_clock::now();
    out_.routing = std::string(router::policy_name(config_.routing));
    out_.instances = config_.instances;
    for (size_t k = 0; k < trace_.requests.size(); ++k) {
      const ClusterRequest& r = trace_.requests[k];
      while (!ends_.empty() && ends_.top().first <= r.arrival_s) {
        const auto [time, request] = ends_.top();
        ends_.pop();
        now_ = time;
        end(request);
      }
      now_ = r.arrival_s;
      arrive(k);
    }
    while (!ends_.empty()) {
      now_ = ends_.top().first;
      const size_t request = ends_.top().second;
      ends_.pop();
      end(request);
    }
    summarize();
    out_.replay_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return out_;
  }

 private:
  void arrive(size_t k) {
    const ClusterRequest& r = trace_.requests[k];
    const std::vector<TokenId> prompt = trace_.tokens(r, r.prompt_tokens);
    const auto max_chunks = static_cast<int32_t>((r.prompt_tokens - 1) / c_);
    const std::vector<uint64_t> keys = chunk_keys(prompt, max_chunks);
    int32_t reusable = 0;
    while (reusable < max_chunks && seen_.count(keys[static_cast<size_t>(reusable)]) != 0) ++reusable;

    update_candidates(keys);
    const std::string_view session(reinterpret_cast<const char*>(&r.session), sizeof(r.session));
    const size_t chosen = router_.choose(candidates_, r.prompt_tokens, session)->index;
    const double transfer_s = transfer_to(chosen, prompt, max_chunks);

    InstanceState& at = instances_[chosen];
    const SimulatedInstance::Started s = at.sim->start(static_cast<int64_t>(k), prompt, max_chunks, r.prompt_tokens + r.reply_tokens);
    at.sim->step();
    read_events(chosen);
    const int32_t hits = s.hits();
    out_.hit_tokens[0] += static_cast<int64_t>(s.device_chunks) * c_;
    out_.hit_tokens[1] += static_cast<int64_t>(s.host_chunks) * c_;
    out_.hit_tokens[2] += static_cast<int64_t>(s.disk_chunks) * c_;
    out_.recomputed_tokens += static_cast<int64_t>(reusable - std::min(hits, reusable)) * c_;
    out_.reusable_tokens += static_cast<int64_t>(reusable) * c_;
    out_.prompt_tokens += r.prompt_tokens;
    ++out_.requests;

    // The prompt past the match, and the chunks inside it computed again, on the cost model.
    const CostModel& cost = config_.cache.cost;
    double compute_s = cost.recompute_seconds(static_cast<int64_t>(s.matched_chunks) * c_, r.prompt_tokens);
    for (const int32_t j : s.recompute) compute_s += cost.recompute_seconds(j * c_, (j + 1) * c_);
    const int64_t computed_tokens = r.prompt_tokens - static_cast<int64_t>(hits) * c_;
    const double start = std::max(now_ + transfer_s, at.busy_until);
    const double prefilled = start + compute_s;
    at.busy_until = prefilled;
    at.queue.emplace_back(prefilled, computed_tokens);
    at.queued_tokens += computed_tokens;
    ++at.requests;
    ++candidates_[chosen].in_flight;
    ++candidates_[chosen].routed;
    ttft_.push_back(prefilled - now_);
    wait_total_ += start - now_ - transfer_s;
    placed_[k] = chosen;
    ends_.emplace(prefilled + static_cast<double>(r.reply_tokens) * config_.decode_seconds_per_token, k);
  }

  void end(size_t k) {
    const ClusterRequest& r = trace_.requests[k];
    const size_t i = placed_.at(k);
    placed_.erase(k);
    const std::vector<TokenId> tokens = trace_.tokens(r, r.prompt_tokens + r.reply_tokens);
    instances_[i].sim->end(static_cast<int64_t>(k), tokens, r.prompt_tokens);
    instances_[i].sim->step();
    read_events(i);
    --candidates_[i].in_flight;
    for (const uint64_t key : chunk_keys(tokens, static_cast<int32_t>(tokens.size() / static_cast<size_t>(c_)))) seen_.insert(key);
  }

  std::vector<uint64_t> chunk_keys(const std::vector<TokenId>& tokens, int32_t chunks) const {
    std::vector<uint64_t> keys;
    keys.reserve(static_cast<size_t>(chunks));
    uint64_t key = 0;
    for (int32_t j = 0; j < chunks; ++j) {
      key = PrefixIndex::chunk_key(key, /*ns=*/0, std::span(tokens).subspan(static_cast<size_t>(j) * static_cast<size_t>(c_), static_cast<size_t>(c_)));
      keys.push_back(key);
    }
    return keys;
  }

  // The router's view before a decision: loads, queues, and the prompt's leading chunks each
  // instance holds (by its events), found from the holders of each key in turn.
  void update_candidates(const std::vector<uint64_t>& keys) {
    for (const size_t i : matched_touched_) candidates_[i].matched_tokens = 0;
    matched_touched_.clear();
    for (size_t i = 0; i < instances_.size(); ++i) {
      InstanceState& s = instances_[i];
      while (!s.queue.empty() && s.queue.front().first <= now_) {
        s.queued_tokens -= s.queue.front().second;
        s.queue.pop_front();
      }
      candidates_[i].queued_tokens = s.queued_tokens;
    }
    if (keys.empty()) return;
    const auto first = holders_.find(keys[0]);
    if (first == holders_.end()) return;
    std::vector<int32_t> alive = first->second;
    for (size_t j = 0; !alive.empty(); ++j) {
      for (const int32_t i : alive) candidates_[static_cast<size_t>(i)].matched_tokens = static_cast<int64_t>(j + 1) * c_;
      if (j + 1 == keys.size()) break;
      const auto next = holders_.find(keys[j + 1]);
      if (next == holders_.end()) break;
      std::erase_if(alive, [&](int32_t i) { return std::find(next->second.begin(), next->second.end(), i) == next->second.end(); });
    }
    for (const int32_t i : first->second) matched_touched_.push_back(static_cast<size_t>(i));
  }

  // Cache-aware: the prompt's KV moved to `to` from the instance the router's cost model picks,
  // through the cache's own export and import (SPEC M7). The seconds it takes.
  double transfer_to(size_t to, const std::vector<TokenId>& prompt, int32_t max_chunks) {
    if (!config_.transfers) return 0;
    const std::optional<size_t> from = router_.transfer_source(candidates_, to);
    if (!from) return 0;
    const auto first_chunk = static_cast<int32_t>(candidates_[to].matched_tokens / c_);
    KvCache::ExportedPrefix sent = instances_[*from].sim->cache().export_prefix(/*ns=*/0, prompt, max_chunks, first_chunk);
    if (sent.chunks <= 0) return 0;
    const auto imported = instances_[to].sim->cache().import_prefix(/*ns=*/0, sent.tokens, sent.payload, sent.parent_key,
                                                                   sent.first_chunk);
    if (!imported.ok()) return 0;
    read_events(to);
    ++out_.transfers;
    out_.transfer_bytes += static_cast<int64_t>(sent.chunks) * config_.cache.chunk_bytes();
    return router_.transfer_seconds(candidates_[*from], static_cast<int64_t>(sent.chunks) * c_);
  }

  // The instance's cache events since the last read, applied to the holders of each key.
  void read_events(size_t i) {
    InstanceState& s = instances_[i];
    CacheEventLog& log = s.sim->cache().cache_events();
    const auto instance = static_cast<int32_t>(i);
    while (true) {
      CacheEventLog::Batch batch = log.read(s.events_epoch, s.events_next, std::chrono::milliseconds(0));
      if (batch.snapshot) {
        for (auto& [key, held] : holders_) std::erase(held, instance);
        candidates_[i].cached_tokens = 0;
        for (const auto& [key, hold] : batch.held) hold_key(key, instance, hold);
      }
      for (const auto& [key, hold] : batch.events) hold_key(key, instance, hold);
      const bool more = !batch.snapshot && !batch.events.empty();
      s.events_epoch = batch.epoch;
      s.events_next = batch.next;
      if (!more) break;
    }
  }

  void hold_key(uint64_t key, int32_t instance, ChunkHold hold) {
    std::vector<int32_t>& held = holders_[key];
    const auto it = std::find(held.begin(), held.end(), instance);
    int64_t& cached = candidates_[static_cast<size_t>(instance)].cached_tokens;
    if (hold == ChunkHold::kNone) {
      if (it != held.end()) {
        held.erase(it);
        cached -= c_;
      }
      if (held.empty()) holders_.erase(key);
    } else if (it == held.end()) {
      held.push_back(instance);
      cached += c_;
    }
  }

  void summarize() {
    if (!ttft_.empty()) {
      std::sort(ttft_.begin(), ttft_.end());
      const auto at = [&](double q) { return ttft_[std::min(ttft_.size() - 1, static_cast<size_t>(q * static_cast<double>(ttft_.size())))]; };
      double sum = 0;
      for (const double t : ttft_) sum += t;
      out_.ttft_mean_s = sum / static_cast<double>(ttft_.size());
      out_.ttft_p50_s = at(0.5);
      out_.ttft_p90_s = at(0.9);
      out_.ttft_p99_s = at(0.99);
      out_.wait_mean_s = wait_total_ / static_cast<double>(ttft_.size());
    }
    for (const InstanceState& s : instances_) {
      out_.busiest_instance_requests = std::max(out_.busiest_instance_requests, s.requests);
      out_.device_overcommits += s.sim->counters().device_overcommits;
    }
  }

  const ClusterTrace& trace_;
  const ClusterConfig& config_;
  int64_t c_;
  router::RoutingPolicy router_;
  std::shared_ptr<const CostModel> profile_;
  double now_ = 0;
  std::vector<InstanceState> instances_;
  std::vector<router::Candidate> candidates_;
  std::vector<size_t> matched_touched_;
  std::unordered_map<uint64_t, std::vector<int32_t>> holders_;  // chunk key -> instances holding it
  std::unordered_set<uint64_t> seen_;                           // chunk keys computed anywhere so far
  std::priority_queue<std::pair<double, size_t>, std::vector<std::pair<double, size_t>>, std::greater<>> ends_;
  std::unordered_map<size_t, size_t> placed_;                   // running request -> its instance
  std::vector<double> ttft_;
  double wait_total_ = 0;
  ClusterOutcome out_;
};

}  // namespace

Result<ClusterOutcome> replay_cluster(const ClusterTrace& trace, const ClusterConfig& config) {
  if (config.instances < 1 || config.instances > 4096) return make_error("instances must be within [1, 4096], got {}", config.instances);
  MNEMO_RETURN_IF_ERROR(check_sim_config(config.cache));
  if (trace.block_tokens < 1) return make_error("the trace's blocks must hold tokens, got {}", trace.block_tokens);
  // The replay's pools (a small layout: 32 bytes per layer and token) for every instance.
  const auto chunks = config.cache.capacity_chunks();
  const int64_t layers = config.cache.sliding_window > 0 ? config.cache.layers : 1;
  const int64_t bytes = (chunks[0] + chunks[1]) * config.cache.chunk_tokens * layers * 32 * config.instances;
  if (bytes > (int64_t{16} << 30)) {
    return make_error("{} instances' pools would take {} GiB of this machine's memory", config.instances, bytes >> 30);
  }
  const auto blocks_of = [&](int64_t tokens) { return (tokens + trace.block_tokens - 1) / trace.block_tokens; };
  for (const ClusterRequest& r : trace.requests) {
    const int64_t needed = r.reply_apart ? blocks_of(r.prompt_tokens) + blocks_of(r.reply_tokens) : blocks_of(r.prompt_tokens + r.reply_tokens);
    if (r.prompt_tokens < 1 || r.reply_tokens < 0 || r.prompt_tokens + r.reply_tokens > (int64_t{1} << 30) ||
        static_cast<int64_t>(r.blocks.size()) < needed) {
      return make_error("a request of {} prompt and {} reply tokens has {} blocks", r.prompt_tokens, r.reply_tokens, r.blocks.size());
    }
  }
  ClusterReplay replay(trace, config);
  MNEMO_RETURN_IF_ERROR(replay.open());
  return replay.run();
}

}  // namespace mnemo::sim
