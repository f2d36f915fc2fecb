// Helpers shared by the KvManager tests: a tiny KV layout to reason about every block, and
// consecutive token runs.
#pragma once

#include <numeric>
#include <vector>

#include "kv/kv_layout.h"
#include "kv/prefix_index.h"

namespace mnemo::testing {

// Two tokens per block, 32-byte blocks: small enough to reason about every block.
inline KvLayout tiny_layout() {
  KvLayout l;
  l.n_layers = 1;
  l.n_kv_heads = 1;
  l.head_dim_k = 2;
  l.head_dim_v = 2;
  l.block_size = 2;
  l.dtype = DType::F32;
  return l;
}

inline std::vector<TokenId> tokens_from(TokenId first, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace mnemo::testing
