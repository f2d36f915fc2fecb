// Paged multi-token attention (SPEC V2, P6): each query token attends to the keys and values of
// its sequence's positions [lo, pos] read through the sequence's block table from the paged
// pool, with an online softmax (no score matrix over the context is ever materialised).
// Many query tokens per sequence, ragged across the batch; a decode step is one query token.
// Grouped-query attention: the query heads of a group share each K/V load. Sliding-window
// layers skip blocks wholly outside the window.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/type_kernels.h"
#include "kv/kv_storage.h"
#include "util/thread_pool.h"

namespace mnemo::kernels {

struct AttentionShape {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim_k = 0;
  int32_t head_dim_v = 0;
  float scale = 1.0f;          // multiplies q.k
  int32_t sliding_window = 0;  // 0: attend to all earlier positions
  float softcap = 0.0f;        // 0: off (attention logit soft-capping)
};

// One query token of one sequence.
struct AttentionQuery {
  const float* q;         // [n_heads][head_dim_k]
  float* out;             // [n_heads][head_dim_v]
  int32_t position;       // attends to positions <= position
  std::span<const BlockId> block_table;  // the sequence's blocks; covers [0, position]
};

// Runs every query of `queries` for one layer. Where the CPU has AVX-512, the tiled kernel
// (attention_tile.h): the query tokens of a sequence's chunk and the heads of a GQA group share
// each K/V load, and when there are too few (token, head) items for the threads (decode) the
// context is split across them in fixed 256-position chunks merged in position order. Elsewhere
// the reference below. Either way a query's output depends only on itself and its context, never
// on the rest of the batch or the number of threads (batch invariance, bit for bit).
void paged_attention(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                     const AttentionShape& shape, ThreadPool& pool);

// The portable implementation: per (query, KV head) (or query head, when there are few), keys
// one at a time with an online softmax. The fallback, and the reference of the tiled kernel.
void paged_attention_reference(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                               const AttentionShape& shape, ThreadPool& pool);

// The tiled kernel for `isa` (tests); only when paged_attention_has_tiles(isa).
bool paged_attention_has_tiles(Isa isa);
void paged_attention_tiled(std::span<const AttentionQuery> queries, const KvStorage& kv, int32_t layer,
                           const AttentionShape& shape, ThreadPool& pool, Isa isa);

}  // namespace mnemo::kernels
