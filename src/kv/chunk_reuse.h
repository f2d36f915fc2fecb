// How much of a matched chain of chunks a request reuses, from what copies each chunk has: the
// cache decides it when it matches a prompt (KvCache::match_prefix), and a router predicts it
// from the cache's events (router/cache_follower) with the same rules, so that the prediction
// is the instance's own accounting.
//
// Sliding-window models (Gemma 3) keep a chunk well before a conversation's end as its global
// layers only (compact). A compact chunk is usable only if no position the request computes
// reads its local layers: every computed position after it (a recomputed chunk, or the new
// tokens from the end of the chain on) must be a whole window past its end. Otherwise it is
// recomputed, and so, as recomputing puts earlier chunks within a window of computed positions,
// the requirement reaches backwards.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mnemo {

// What copies of a chunk's KV exist in an instance's tiers.
enum class ChunkHold : uint8_t {
  kNone = 0,     // none: dropped (its tokens are known; recomputed when used)
  kCompact = 1,  // only its global layers (sliding-window history)
  kWhole = 2,    // every layer, in some tier
};

enum class ChunkUse : uint8_t { kFull, kCompact, kRecompute };

// Turns the compact chunks of `use` (a chain from position 0) that a computed position needs the
// local layers of into kRecompute, given `chunk_tokens` per chunk; a window of 0 means none.
void enforce_sliding_windows(std::vector<ChunkUse>& use, int32_t chunk_tokens, int32_t sliding_window);

// The use of each chunk of a chain given what it holds, windows enforced, with trailing
// recomputed chunks left off (the request computes them anyway: they save nothing).
std::vector<ChunkUse> plan_chunk_use(std::span<const ChunkHold> holds, int32_t chunk_tokens, int32_t sliding_window);

// The chunks of a plan whose KV is reused (not recomputed).
int32_t reused_chunks(std::span<const ChunkUse> plan);

// Whether chunk `position` of a conversation of `end_chunks` chunks ends a window or more before
// its end: no later query of it reads the chunk's local layers, so it may be kept compact.
bool compactable(int32_t position, int32_t end_chunks, int32_t chunk_tokens, int32_t sliding_window);

// What a sliding-window model's conversation of `end_chunks` chunks takes per chunk, in layers'
// worth of KV, its compactable chunks counted at their global layers only: between
// `global_layers` and `layers`. Without a window (0), `layers`.
double layers_per_chunk(int32_t end_chunks, int32_t chunk_tokens, int32_t sliding_window, int32_t layers,
                        int32_t global_layers);

}  // namespace mnemo
