// The interface between the tiled attention driver (attention.cpp) and its SIMD kernel
// (attention_avx512.cpp): plain pointers only, so that the kernel's translation unit, compiled
// with AVX-512 flags, instantiates nothing shared with the rest of the program.
//
// Canonical order (what makes attention batch-invariant and lets a long context be split across
// threads without changing a bit): the positions a row attends to are taken in fixed chunks of
// kChunkPositions aligned to multiples of it, and each chunk in sub-blocks of kSubBlockPositions
// aligned likewise. A chunk is attended from an empty state (online softmax over its sub-blocks,
// keys in position order); chunk states are then merged in position order. Only the row's own
// query and range [lo, hi] enter its computation, never the other rows of a tile.
#pragma once

#include <cstdint>

namespace mnemo::kernels::attention_tile {

inline constexpr int32_t kChunkPositions = 256;
inline constexpr int32_t kSubBlockPositions = 16;

// One (query token, head) row and its running state for the current chunk.
struct Row {
  const float* q;  // head_dim_k, already rounded the way the pool's element type requires
  int32_t lo, hi;  // positions attended to
  float* acc;      // head_dim_v: sum of weight * value
  float max;       // -inf while empty
  float sum;       // sum of weights (0 while empty)
};

// The keys and values of kSubBlockPositions consecutive positions from `first_position` (a
// multiple of kSubBlockPositions); null where a position is outside every row's range.
struct SubBlock {
  int32_t first_position;
  const void* keys[kSubBlockPositions];
  const void* values[kSubBlockPositions];
};

struct Params {
  int32_t head_dim_k, head_dim_v;
  float scale;
  float softcap;        // 0: off
  bool f16_elements;    // else F32
};

// Attends rows[0, n_rows) to the sub-blocks (all of one chunk, in position order). Scratch:
// `keys` and `values` of kSubBlockPositions * head_dim floats each, `weights` of
// kSubBlockPositions floats per row.
using AttendFn = void (*)(Row* rows, int n_rows, const SubBlock* blocks, int n_blocks, const Params& params,
                          float* keys, float* values, float* weights);

}  // namespace mnemo::kernels::attention_tile

namespace mnemo::kernels::attention_avx512 {
void attend(attention_tile::Row* rows, int n_rows, const attention_tile::SubBlock* blocks, int n_blocks,
            const attention_tile::Params& params, float* keys, float* values, float* weights);
}  // namespace mnemo::kernels::attention_avx512
