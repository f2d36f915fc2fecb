// The chunk-level cache the simulator drives: every conversation's chunks, each in one tier
// (device, host, disk) or nowhere; bounded tiers; eviction that cascades down.
//
// Sizes: a chunk takes one unit, or, for a sliding-window model (ChunkSizes), `full_units` (its
// layers) or, once it is a window before the end of its idle conversation, `compact_units` (its
// global layers: the real cache keeps only those). A running conversation's chunks on the device
// are whole (its sequence's blocks).
//
// Rules:
// - A chunk of a running (pinned) conversation is placed on the device; room is made by
//   evicting the policy's victim among unpinned device chunks. When every device chunk is
//   pinned the device goes over capacity (counted), and comes back when the pins are released.
// - An evicted chunk goes to the next tier. A full lower tier evicts its own victims that are
//   worse than the newcomer (by the policy's key) until the newcomer fits; if it still does not,
//   the newcomer continues down. Whatever leaves the last tier is a drop. Bytes moved are counted
//   by (from, to); a chunk that skips a tier is counted once, from where it left to where it
//   stayed.
// - Pinned conversations are never victims in any tier.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "sim/chunk_sizes.h"
#include "sim/conversation_state.h"
#include "sim/eviction_policy.h"
#include "sim/tier.h"

namespace mnemo::sim {

struct ChunkRef {
  int32_t conversation = 0;
  int32_t chunk = 0;  // position in the conversation: tokens [chunk * C, (chunk + 1) * C)
  bool operator==(const ChunkRef&) const = default;
};

struct CacheCounters {
  std::array<std::array<int64_t, kTierCount>, kTierCount> moved_chunks{};  // [from][to]
  std::array<std::array<int64_t, kTierCount>, kTierCount> moved_units{};   // the same in units
  std::array<int64_t, kTierCount> evicted_chunks{};  // chunks that left each tier for lack of room
  int64_t dropped_chunks = 0;                        // fell out of the last tier
  int64_t discarded_chunks = 0;                      // stale copies thrown away before a recompute
  int64_t device_overcommits = 0;                    // placements beyond capacity (all pinned)
  int64_t peak_device_chunks = 0;
  int64_t peak_device_units = 0;
};

class TieredChunkCache {
 public:
  // capacity[t] in units (chunks by default); 0: tier t is absent (the device must have room for
  // at least one whole chunk).
  TieredChunkCache(std::array<int64_t, kTierCount> capacity, const EvictionPolicy& policy, size_t n_conversations,
                   ChunkSizes sizes = {});

  const ConversationState& conversation(int32_t id) const { return conversations_[static_cast<size_t>(id)]; }
  // Times and pins are the simulator's to set; chunk locations change only through the methods
  // below. Pins and lengths resize a sliding-window conversation's chunks.
  void set_last_used(int32_t id, double t) { mutable_conversation(id).last_used_s = t; }
  void set_next_use(int32_t id, double t) { mutable_conversation(id).next_use_s = t; }
  void set_pinned(int32_t id, bool pinned);
  void set_end_chunks(int32_t id, int32_t chunks);
  // Told of every chunk that falls out of the last tier, after it left.
  void set_drop_listener(std::function<void(ChunkRef, double now_s)> listener) { on_drop_ = std::move(listener); }

  // Puts a chunk of a pinned conversation on the device: a move up if it was in a lower tier,
  // nothing if it is there already, a new chunk otherwise.
  void place_on_device(ChunkRef chunk, double now_s);
  // Forgets a cached chunk (its tokens are about to be recomputed, so this copy is stale).
  void discard(ChunkRef chunk);
  // Evicts from the device until it is within capacity again (after pins are released).
  void shrink_device_to_capacity(double now_s);

  const ChunkSizes& sizes() const { return sizes_; }
  int64_t used_chunks(Tier t) const { return count_[static_cast<size_t>(tier_index(t))]; }
  int64_t used_units(Tier t) const { return used_[static_cast<size_t>(tier_index(t))]; }
  int64_t capacity_units(Tier t) const { return capacity_[static_cast<size_t>(tier_index(t))]; }
  // Whether a cached chunk is held compact (its global layers only).
  bool is_compact(ChunkRef c) const;
  const CacheCounters& counters() const { return counters_; }

  // The chunk the policy evicts next from a tier (unpinned only), if any. Public for tests.
  std::optional<ChunkRef> victim(Tier t, double now_s) const;

 private:
  ConversationState& mutable_conversation(int32_t id) { return conversations_[static_cast<size_t>(id)]; }
  EvictionKey key_of(ChunkRef c, double now_s) const;
  int32_t units_in(const ConversationState& conv, int32_t chunk, Tier t) const;
  // Brings the units of a conversation's held chunks in line with its state.
  void resize(int32_t id);
  void put(ChunkRef c, Tier t);
  void take(ChunkRef c);
  std::optional<Tier> tier_below(Tier t) const;
  // Sends a chunk that just left tier `from` down the tiers below it, or drops it.
  void demote(ChunkRef c, Tier from, double now_s);

  std::array<int64_t, kTierCount> capacity_;
  ChunkSizes sizes_;
  std::array<int64_t, kTierCount> used_{};   // units
  std::array<int64_t, kTierCount> count_{};  // chunks
  const EvictionPolicy& policy_;
  std::vector<ConversationState> conversations_;
  std::array<std::set<int32_t>, kTierCount> holders_;  // conversations with a chunk in each tier
  CacheCounters counters_;
  std::function<void(ChunkRef, double)> on_drop_;
};

}  // namespace mnemo::sim
