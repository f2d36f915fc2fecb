// Which cached chunk leaves a full tier first. Every policy gives each chunk a key (lowest leaves
// first) and says whether a prefix with a missing chunk is still reused after the gap.
//
//   pensieve    Pensieve's retention value V = Cost(chunk) / idle time (CostModel::
//               retention_value, as the real cache uses): any chunk of any idle conversation;
//               within one conversation the leading chunks are cheaper, so they go first (with
//               a measured cost that dips somewhere, the cheapest wherever it is). Reuses after
//               a dropped prefix (SPEC P5).
//   lru         the least recently used conversation loses its chunks, leading ones first; P5.
//   tail-first  the least recently used conversation loses its last chunk first and only the
//               prefix up to the first missing chunk is reused: what radix caches do today.
//   mnemo       the lowest RetentionModel::value first (src/kv/retention_model.h): the recompute a
//               chunk is expected to save per byte (its conversation's per chunk, as in the
//               real cache) per second kept, from P(its conversation
//               returns | idle time, conversation length) learnt online from the events the real
//               cache sees: turn ends, and matches of idle chunks, dropped ones included (the
//               cache keeps a ghost of each: its key and facts); P5.
//   mnemo-no-ghosts  the same for a cache that stops observing a chunk when it drops it (a drop
//               censors the observation).
//   oracle      knows when each conversation's next turn starts (or that none comes): the chunk
//               used farthest in the future leaves first (Belady), the cheapest to recompute on
//               ties (a conversation that never returns); P5. An upper bound, not a policy.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/cost_model.h"
#include "sim/chunk_sizes.h"
#include "sim/conversation_state.h"
#include "util/result.h"

namespace mnemo::sim {

// Lexicographic: `primary`, then `secondary`.
struct EvictionKey {
  double primary = 0;
  double secondary = 0;
  auto operator<=>(const EvictionKey&) const = default;
};

// How one conversation's chunks in a tier are ordered by a policy's key. When keys rise (or fall)
// with position, a victim search needs to look only at one end of each conversation's chunks.
enum class ChunkOrder {
  kLeadingFirst,   // keys rise with position
  kTrailingFirst,  // keys fall with position
  kAnyPosition,    // no order known (a measured cost that dips): every chunk is a candidate
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;
  // Lower keys leave first. `chunk` is the chunk's position in its conversation.
  virtual EvictionKey key(const ConversationState& conversation, int32_t chunk, double now_s) const = 0;
  virtual ChunkOrder chunk_order() const = 0;
  // SPEC P5: the cached chunks after a missing one are reused (the missing one is recomputed).
  // Without it only the prefix up to the first missing chunk is reused.
  virtual bool reuses_after_gap() const = 0;

  // --- For policies that learn online from what the real cache can observe (the simulator
  // calls these; the others ignore them) ---
  // A fresh copy for one replay, so that replays never share what they learnt; nullptr for a
  // policy without state (the simulator then uses this one).
  virtual std::unique_ptr<EvictionPolicy> start_replay() const { return nullptr; }
  // A turn starts and its prompt matches these cached chunks (before anything moves or the
  // conversation's last use changes).
  virtual void on_match(const ConversationState& /*conversation*/, const std::vector<int32_t>& /*chunks*/,
                        double /*now_s*/) {}
  // A turn ended: the conversation's chunks (last used now) are idle from now on.
  virtual void on_idle(const ConversationState& /*conversation*/, double /*now_s*/) {}
  // A chunk's last copy left the cache without being matched: dropped from the last tier, or
  // discarded as stale (`chunk` is its position; the conversation's facts are as before).
  virtual void on_drop(const ConversationState& /*conversation*/, int32_t /*chunk*/, double /*now_s*/) {}
};

// `cost` prices a chunk of `chunk_tokens` tokens at its position; `sizes`, what a conversation's
// chunks take (the mnemo policies value per unit). An Error for an unknown name.
Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name, const CostModel& cost,
                                                             int32_t chunk_tokens, const ChunkSizes& sizes = {});

// "pensieve", "lru", "tail-first", "mnemo", "mnemo-no-ghosts", "oracle".
const std::vector<std::string>& eviction_policy_names();

}  // namespace mnemo::sim
