// The engine's step planning (SPEC V5, V6): which running sequences go on, which are preempted
// (swapped or recomputed), which waiting ones are admitted, and from which cached prefix they
// start. On the engine thread.
#include <algorithm>

#include "engine/engine.h"

namespace mnemo {

bool Engine::grow(Sequence& seq, int32_t n_tokens) {
  return kv_.prepare_write(seq.kv, seq.n_computed, seq.n_computed + n_tokens);
}

void Engine::release_to_recompute(Sequence& seq) {
  cache_chunks(seq);  // a later admission may find them still cached
  kv_.release(seq.kv);
  seq.n_computed = 0;
  seq.holes.clear();
  seq.partial_chunks.clear();
  seq.state = SequenceState::kWaiting;
}

bool Engine::release_tables_behind_head() {
  bool released = false;
  for (auto it = std::next(waiting_.begin()); it != waiting_.end(); ++it) {
    Sequence& seq = **it;
    if (seq.state != SequenceState::kWaiting || seq.kv.empty()) continue;
    release_to_recompute(seq);
    released = true;
  }
  return released;
}

// Preempts the latest-arrived running sequence other than `keep` (SPEC V5). False when `keep`
// is itself the latest.
bool Engine::preempt_latest(const Sequence* keep) {
  if (running_.empty() || running_.back().get() == keep) return false;
  preempt(std::prev(running_.end()));
  return true;
}

// Moves a running sequence back to the waiting queue (SPEC V6): swapped to the host pool when the
// cost model says a copy out and back is cheaper than recomputing (on a CPU it nearly always is)
// and the host has room; else its blocks are offered to the cache and it recomputes what is gone.
void Engine::preempt(std::list<std::unique_ptr<Sequence>>::iterator it) {
  std::unique_ptr<Sequence> victim = std::move(*it);
  running_.erase(it);
  bool swapped = false;
  // SPEC V6: swap when copying the KV out and back costs less than computing it again.
  const int64_t bytes = static_cast<int64_t>(victim->kv.size() * kv_.layout().block_bytes());
  const bool swap_is_cheaper =
      2 * config_.cost.copy_seconds(bytes) < config_.cost.recompute_seconds(0, victim->n_computed);
  if (!victim->kv.empty() && swap_is_cheaper && kv_.swap_out(victim->kv)) {
    victim->state = SequenceState::kSwapped;
    swapped = true;
  } else {
    release_to_recompute(*victim);
  }
  metrics_.update([&](MetricsSnapshot& m) {
    ++m.preemptions_total;
    m.swaps_total += swapped ? 1 : 0;
  });
  insert_in_order(waiting_, std::move(victim));
}

bool Engine::plan_step(Step& step) {
  int32_t budget = config_.max_batch_tokens;
  // 1. Running sequences, oldest first: decode tokens and unfinished prefill chunks.
  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    Sequence& seq = **it;
    bool room = plan_work(seq, budget, step);
    while (!room && preempt_latest(&seq)) room = plan_work(seq, budget, step);
    if (!room) {
      // seq is the latest itself: it yields its blocks to the older ones.
      preempt(it++);
      continue;
    }
    budget -= step.items.back().hole_tokens + step.items.back().new_tokens;
    ++it;
  }
  // 2. Waiting sequences, FCFS, while the budget, the running limit and the reserve allow.
  const int32_t reserve = static_cast<int32_t>(config_.decode_reserve * static_cast<float>(kv_.n_blocks()));
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < config_.max_running) {
    Sequence& seq = *waiting_.front();
    if (seq.state == SequenceState::kWaiting && seq.kv.empty()) reuse_cached_prefix(seq);
    const int32_t n = std::max(0, std::min(seq.n_pending() - seq.n_hole_tokens(), budget - seq.n_hole_tokens()));
    const int32_t swap_blocks = seq.kv.on_host() ? static_cast<int32_t>(seq.kv.size()) : 0;
    const int32_t needed = swap_blocks + kv_.blocks_needed(seq.kv, seq.n_computed, seq.n_computed + n) + 1;
    if (!running_.empty() && kv_.n_available() - needed < reserve) break;
    if (seq.state == SequenceState::kSwapped) {
      if (!kv_.swap_in(seq.kv)) break;
      seq.state = SequenceState::kWaiting;  // back on the device; it may still wait for room to grow
    }
    if (!plan_work(seq, budget, step)) break;
    seq.state = SequenceState::kRunning;
    budget -= step.items.back().hole_tokens + step.items.back().new_tokens;
    std::unique_ptr<Sequence> moved = std::move(waiting_.front());
    waiting_.pop_front();
    insert_in_order(running_, std::move(moved));
  }
  plan_drafts(step, budget);
  step.tokens = config_.max_batch_tokens - budget;
  return !step.items.empty();
}

bool Engine::plan_work(Sequence& seq, int32_t budget, Step& step) {
  Step::Item item{&seq, {}, 0, 0, false, {}, kPromptLookupDrafter};
  for (const QueryRange& hole : seq.holes) {
    if (item.hole_tokens == budget) break;
    const int32_t take = std::min(hole.length, budget - item.hole_tokens);
    item.ranges.push_back({hole.start, take});
    item.hole_tokens += take;
  }
  // New tokens attend to every earlier position: only once no hole is left after this step.
  if (item.hole_tokens == seq.n_hole_tokens()) {
    item.new_tokens = std::min(static_cast<int32_t>(seq.tokens.size()) - seq.n_computed, budget - item.hole_tokens);
    if (item.new_tokens > 0 && !grow(seq, item.new_tokens)) return false;
    if (item.new_tokens > 0) item.ranges.push_back({seq.n_computed, item.new_tokens});
    item.sample = seq.n_computed + item.new_tokens == static_cast<int32_t>(seq.tokens.size());
  }
  step.items.push_back(std::move(item));
  return true;
}

// Starts a sequence from the longest cached prefix of its tokens (automatic prefix caching, and
// the previous turn of a conversation). At least the last token is always computed: its logits
// are needed.
void Engine::reuse_cached_prefix(Sequence& seq) {
  // A mean over every token's hidden state needs every token run.
  if (!config_.prefix_caching || seq.request->request.pooling == Pooling::kMean) return;
  const int32_t bs = config_.block_size;
  const int32_t max_blocks = (static_cast<int32_t>(seq.tokens.size()) - 1) / bs;
  PrefixMatch match = kv_.match_prefix(seq.request->request.cache_namespace, seq.tokens, max_blocks);
  seq.kv = std::move(match.table);
  seq.partial_chunks = std::move(match.partial);
  seq.n_computed = static_cast<int32_t>(seq.kv.size()) * bs;
  seq.holes.clear();
  for (int32_t chunk : match.recompute) {
    if (!seq.holes.empty() && seq.holes.back().end() == chunk * bs) {
      seq.holes.back().length += bs;
    } else {
      seq.holes.push_back({chunk * bs, bs});
    }
  }
  const int32_t recomputed = seq.n_hole_tokens();
  const int32_t reused = seq.n_computed - recomputed;
  RequestUsage& usage = seq.request->usage;
  const auto n_resumed = static_cast<int32_t>(seq.request->request.resume_tokens.size());
  if (seq.n_generated() == n_resumed && seq.choice == 0 && !seq.request->forked && reused >= usage.cached_tokens) {
    // cached_tokens counts prompt tokens (OpenAI's meaning); a resumed request's reuse beyond
    // its prompt is the replica's work, reported on its own.
    usage.cached_tokens = std::min(reused, seq.n_prompt);
    usage.resumed_cached_tokens = std::max(0, reused - seq.n_prompt);
    usage.device_cached_tokens = match.device_chunks * bs;
    usage.host_cached_tokens = match.host_chunks * bs;
    usage.disk_cached_tokens = match.disk_chunks * bs;
    usage.recomputed_tokens = recomputed;
  }
  metrics_.update([&](MetricsSnapshot& m) { m.prefix_cache_hit_tokens += static_cast<uint64_t>(reused); });
}

// Offers a sequence's computed blocks to the prefix index before it lets them go.

}  // namespace mnemo
