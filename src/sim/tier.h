// The memory tiers a cached chunk can live in, fastest first. A chunk evicted from a full tier
// moves one tier down; one evicted from the last tier is dropped (its tokens must be recomputed).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mnemo::sim {

enum class Tier : int8_t { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kTierCount = 3;
inline constexpr std::array<Tier, kTierCount> kTiers = {Tier::kDevice, Tier::kHost, Tier::kDisk};

constexpr int tier_index(Tier t) { return static_cast<int>(t); }

constexpr std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
  }
  return "?";
}

}  // namespace mnemo::sim
