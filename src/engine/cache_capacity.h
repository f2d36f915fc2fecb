// How much an engine's KV cache holds in all, for a router weighing the pressure a placement puts
// on it (router/routing_policy.h): what `serve` publishes in the cluster as cache_capacity_tokens.
#pragma once

#include <cstdint>

#include "engine/engine.h"

namespace mnemo {

// Tokens every tier of the cache can hold: the device, the host's whole, exact and compact
// blocks, and the disk's extents.
int64_t cache_capacity_tokens(const EngineConfig& config);

}  // namespace mnemo
