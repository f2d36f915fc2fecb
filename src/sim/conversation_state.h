// What the simulated cache knows about one conversation: where each of its chunks is, when it
// was last used and how long it was then (what the real index records too), whether a turn of it
// is running, and (for the oracle only) when it is next used.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "sim/tier.h"

namespace mnemo::sim {

struct ConversationState {
  static constexpr int8_t kNotCached = -1;
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  std::vector<int8_t> where;                            // per chunk position: a tier_index, or kNotCached
  std::vector<int16_t> units;                           // per cached chunk position: the units it takes
  std::array<std::set<int32_t>, kTierCount> chunks_in;  // chunk positions held in each tier, ascending
  double last_used_s = 0;                               // end of its latest turn
  int32_t end_chunks = 0;                               // whole chunks of its context at that turn's end
  double next_use_s = kNever;                           // start of its next turn (the oracle's knowledge)
  bool pinned = false;                                  // a turn is running: nothing of it may move

  std::optional<Tier> tier_of(int32_t chunk) const {
    if (chunk < 0 || static_cast<size_t>(chunk) >= where.size() || where[static_cast<size_t>(chunk)] == kNotCached) {
      return std::nullopt;
    }
    return static_cast<Tier>(where[static_cast<size_t>(chunk)]);
  }
};

}  // namespace mnemo::sim
