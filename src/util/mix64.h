// The splitmix64 output function: a bijection whose outputs for nearby inputs look independent.
// Cheap hashing of integers (prefix keys, sampling streams, synthetic tokens), not cryptography.
#pragma once

#include <cstdint>

namespace mnemo {

// splitmix64's step between consecutive states (the golden ratio in 64 bits).
inline constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;

inline constexpr uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A double uniform in [0, 1) from a hash's high 53 bits.
inline constexpr double unit_interval(uint64_t hash) { return static_cast<double>(hash >> 11) * 0x1.0p-53; }

}  // namespace mnemo
