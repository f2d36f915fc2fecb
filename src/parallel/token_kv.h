// One token's KV in a pool of a stage's layers, gathered into contiguous bytes and scattered
// back: what replication (SPEC D7) and restores move, per token written rather than per block,
// so a decode step replicates one token's KV and not its whole block. The bytes are
// [layer][K then V][head][dim] in the pool's element type, token_kv_bytes() of them.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kv/kv_storage.h"
#include "model/batch.h"

namespace mnemo::parallel {

// Preconditions: block < kv.n_blocks(), slot < the layout's block_size.
void gather_token_kv(const KvStorage& kv, BlockId block, int32_t slot, uint8_t* out);
void scatter_token_kv(KvStorage& kv, BlockId block, int32_t slot, const uint8_t* in);

// A worker's share of every block of the whole model's layout: a pipeline stage's layers, a
// tensor rank's KV heads.
struct KvShare {
  int32_t layer_begin = 0, layer_end = 0;
  int32_t head_begin = 0, head_end = 0;
  int32_t n_layers() const { return layer_end - layer_begin; }
  int32_t n_heads() const { return head_end - head_begin; }
};
// The share's bytes of one token of a pool of the whole layout: what a worker holding it keeps
// (its own pool's token bytes, in the same order). Preconditions as above, and the share inside
// the layout.
void gather_token_share(const KvStorage& whole, const KvShare& share, BlockId block, int32_t slot, uint8_t* out);
void scatter_token_share(KvStorage& whole, const KvShare& share, BlockId block, int32_t slot, const uint8_t* in);
// Bytes of one token of the share.
uint32_t token_share_bytes(const KvLayout& whole, const KvShare& share);

// The (block, slot) each token of `sequences` writes its KV to, in batch order: what a pass
// stored. Precondition: the tables cover the ranges (as a forward pass checked).
std::vector<std::pair<BlockId, int32_t>> written_slots(const std::vector<SequenceInput>& sequences, int32_t block_size);

}  // namespace mnemo::parallel
