#include "sim/tiered_chunk_cache.h"

#include <algorithm>

#include "kv/chunk_reuse.h"
#include "util/check.h"

namespace mnemo::sim {
namespace {

size_t ti(Tier t) { return static_cast<size_t>(tier_index(t)); }

}  // namespace

TieredChunkCache::TieredChunkCache(std::array<int64_t, kTierCount> capacity, const EvictionPolicy& policy,
                                   size_t n_conversations, ChunkSizes sizes)
    : capacity_(capacity), sizes_(sizes), policy_(policy), conversations_(n_conversations) {
  MNEMO_CHECK(sizes_.compact_units >= 1 && sizes_.compact_units <= sizes_.full_units && sizes_.full_units <= 32767,
              "chunk sizes {} / {} units", sizes_.full_units, sizes_.compact_units);
  MNEMO_CHECK(capacity_[ti(Tier::kDevice)] >= sizes_.full_units, "the device tier needs room for a chunk");
  for (const int64_t c : capacity_) MNEMO_CHECK(c >= 0, "negative tier capacity {}", c);
}

int32_t TieredChunkCache::units_in(const ConversationState& conv, int32_t chunk, Tier t) const {
  const bool whole = (conv.pinned && t == Tier::kDevice) ||
                     !compactable(chunk, conv.end_chunks, sizes_.chunk_tokens, sizes_.sliding_window);
  return whole ? sizes_.full_units : sizes_.compact_units;
}

bool TieredChunkCache::is_compact(ChunkRef c) const {
  const ConversationState& conv = conversation(c.conversation);
  return conv.tier_of(c.chunk).has_value() && conv.units[static_cast<size_t>(c.chunk)] < sizes_.full_units;
}

void TieredChunkCache::resize(int32_t id) {
  if (sizes_.sliding_window <= 0) return;
  ConversationState& conv = mutable_conversation(id);
  for (const Tier t : kTiers) {
    for (const int32_t j : conv.chunks_in[ti(t)]) {
      int16_t& units = conv.units[static_cast<size_t>(j)];
      const auto now = static_cast<int16_t>(units_in(conv, j, t));
      used_[ti(t)] += now - units;
      units = now;
    }
  }
  counters_.peak_device_units = std::max(counters_.peak_device_units, used_[ti(Tier::kDevice)]);
}

void TieredChunkCache::set_pinned(int32_t id, bool pinned) {
  mutable_conversation(id).pinned = pinned;
  resize(id);
}

void TieredChunkCache::set_end_chunks(int32_t id, int32_t chunks) {
  mutable_conversation(id).end_chunks = chunks;
  resize(id);
}

EvictionKey TieredChunkCache::key_of(ChunkRef c, double now_s) const {
  return policy_.key(conversation(c.conversation), c.chunk, now_s);
}

std::optional<ChunkRef> TieredChunkCache::victim(Tier t, double now_s) const {
  std::optional<ChunkRef> best;
  EvictionKey best_key;
  const auto consider = [&](ChunkRef candidate) {
    const EvictionKey k = key_of(candidate, now_s);
    if (!best || k < best_key) {  // ties go to the first seen: lowest id, then position
      best = candidate;
      best_key = k;
    }
  };
  for (const int32_t id : holders_[ti(t)]) {
    const ConversationState& c = conversation(id);
    if (c.pinned) continue;
    const std::set<int32_t>& held = c.chunks_in[ti(t)];
    switch (policy_.chunk_order()) {
      case ChunkOrder::kLeadingFirst: consider({id, *held.begin()}); break;
      case ChunkOrder::kTrailingFirst: consider({id, *held.rbegin()}); break;
      case ChunkOrder::kAnyPosition:
        for (const int32_t j : held) consider({id, j});
        break;
    }
  }
  return best;
}

void TieredChunkCache::put(ChunkRef c, Tier t) {
  ConversationState& conv = mutable_conversation(c.conversation);
  const auto index = static_cast<size_t>(c.chunk);
  if (conv.where.size() <= index) {
    conv.where.resize(index + 1, ConversationState::kNotCached);
    conv.units.resize(index + 1, 0);
  }
  MNEMO_CHECK(conv.where[index] == ConversationState::kNotCached, "chunk {}/{} is cached twice", c.conversation, c.chunk);
  conv.where[index] = static_cast<int8_t>(tier_index(t));
  conv.units[index] = static_cast<int16_t>(units_in(conv, c.chunk, t));
  if (conv.chunks_in[ti(t)].empty()) holders_[ti(t)].insert(c.conversation);
  conv.chunks_in[ti(t)].insert(c.chunk);
  used_[ti(t)] += conv.units[index];
  ++count_[ti(t)];
}

void TieredChunkCache::take(ChunkRef c) {
  ConversationState& conv = mutable_conversation(c.conversation);
  const std::optional<Tier> t = conv.tier_of(c.chunk);
  MNEMO_CHECK(t.has_value(), "chunk {}/{} is not cached", c.conversation, c.chunk);
  conv.where[static_cast<size_t>(c.chunk)] = ConversationState::kNotCached;
  conv.chunks_in[ti(*t)].erase(c.chunk);
  if (conv.chunks_in[ti(*t)].empty()) holders_[ti(*t)].erase(c.conversation);
  used_[ti(*t)] -= conv.units[static_cast<size_t>(c.chunk)];
  --count_[ti(*t)];
}

std::optional<Tier> TieredChunkCache::tier_below(Tier t) const {
  for (int i = tier_index(t) + 1; i < kTierCount; ++i) {
    if (capacity_[static_cast<size_t>(i)] > 0) return static_cast<Tier>(i);
  }
  return std::nullopt;
}

void TieredChunkCache::demote(ChunkRef c, Tier from, double now_s) {
  for (std::optional<Tier> t = tier_below(from); t; t = tier_below(*t)) {
    const int64_t units = units_in(conversation(c.conversation), c.chunk, *t);
    // Worse chunks leave for it, until it fits or none is worse. Those gone stay gone even if it
    // then does not fit: the tier keeps what is worth more than they are.
    std::vector<ChunkRef> evicted;
    while (used_[ti(*t)] + units > capacity_[ti(*t)]) {
      const std::optional<ChunkRef> v = victim(*t, now_s);
      if (!v || !(key_of(*v, now_s) < key_of(c, now_s))) break;
      evicted.push_back(*v);
      take(*v);
      ++counters_.evicted_chunks[ti(*t)];
    }
    const bool fits = used_[ti(*t)] + units <= capacity_[ti(*t)];
    if (fits) {
      put(c, *t);
      ++counters_.moved_chunks[ti(from)][ti(*t)];
      counters_.moved_units[ti(from)][ti(*t)] += units;
    }
    for (const ChunkRef& v : evicted) demote(v, *t, now_s);
    if (fits) return;
    // The tier keeps what it has; the newcomer tries the next one down.
  }
  ++counters_.dropped_chunks;
  if (on_drop_) on_drop_(c, now_s);
}

void TieredChunkCache::place_on_device(ChunkRef c, double now_s) {
  MNEMO_CHECK(conversation(c.conversation).pinned, "conversation {} places a chunk without a pin", c.conversation);
  const std::optional<Tier> current = conversation(c.conversation).tier_of(c.chunk);
  if (current == Tier::kDevice) return;
  if (current) {
    counters_.moved_units[ti(*current)][ti(Tier::kDevice)] += conversation(c.conversation).units[static_cast<size_t>(c.chunk)];
    take(c);
    ++counters_.moved_chunks[ti(*current)][ti(Tier::kDevice)];
  }
  while (used_[ti(Tier::kDevice)] + sizes_.full_units > capacity_[ti(Tier::kDevice)]) {
    const std::optional<ChunkRef> v = victim(Tier::kDevice, now_s);
    if (!v) {
      ++counters_.device_overcommits;
      break;
    }
    take(*v);
    ++counters_.evicted_chunks[ti(Tier::kDevice)];
    demote(*v, Tier::kDevice, now_s);
  }
  put(c, Tier::kDevice);
  counters_.peak_device_chunks = std::max(counters_.peak_device_chunks, count_[ti(Tier::kDevice)]);
  counters_.peak_device_units = std::max(counters_.peak_device_units, used_[ti(Tier::kDevice)]);
}

void TieredChunkCache::discard(ChunkRef c) {
  take(c);
  ++counters_.discarded_chunks;
}

void TieredChunkCache::shrink_device_to_capacity(double now_s) {
  while (used_[ti(Tier::kDevice)] > capacity_[ti(Tier::kDevice)]) {
    const std::optional<ChunkRef> v = victim(Tier::kDevice, now_s);
    if (!v) return;
    take(*v);
    ++counters_.evicted_chunks[ti(Tier::kDevice)];
    demote(*v, Tier::kDevice, now_s);
  }
}

}  // namespace mnemo::sim
