// How much of a tier a simulated chunk takes: one unit, or, for a sliding-window model,
// `full_units` (its layers) until it is a window before the end of its idle conversation, and
// `compact_units` (its global layers: all the real cache keeps of it) from then on.
#pragma once

#include <cstdint>

#include "kv/chunk_reuse.h"

namespace mnemo::sim {

struct ChunkSizes {
  int32_t full_units = 1;
  int32_t compact_units = 1;
  int32_t chunk_tokens = 1;
  int32_t sliding_window = 0;  // tokens; 0: every chunk is whole

  bool bytes_depend_on_length() const { return sliding_window > 0 && compact_units < full_units; }
  // What a conversation of `end_chunks` chunks takes per chunk, in units, when idle.
  double units_per_chunk(int32_t end_chunks) const {
    return layers_per_chunk(end_chunks, chunk_tokens, sliding_window, full_units, compact_units);
  }
};

}  // namespace mnemo::sim
