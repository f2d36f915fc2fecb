// One token's KV in a pool of a stage's layers, gathered into contiguous bytes and scattered
// back: what replication (SPEC D7) and restores move, per token written rather than per block,
// so a decode step replicates one token's KV and not its whole block. The bytes are
// [layer][K then V][head][dim] in the pool's element type, token_kv_bytes() of them.
#pragma once

#include <cstdint>

#include "kv/kv_storage.h"

namespace mnemo::parallel {

// Preconditions: block < kv.n_blocks(), slot < the layout's block_size.
void gather_token_kv(const KvStorage& kv, BlockId block, int32_t slot, uint8_t* out);
void scatter_token_kv(KvStorage& kv, BlockId block, int32_t slot, const uint8_t* in);

}  // namespace mnemo::parallel
