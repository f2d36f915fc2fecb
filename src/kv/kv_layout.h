// Geometry of a paged KV block. A block holds `block_size` consecutive token positions of one
// sequence for ALL layers, keys and values, so that moving a block between tiers (or machines)
// is one contiguous copy. Inside a block: [layer][K then V][kv_head][slot][dim].
//
// Elements are F16 (the default: half the memory and bandwidth) or F32 (exact: attention then
// computes in F32 throughout, which makes results independent of how work is batched; the
// llama.cpp fidelity tests compare in this mode).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace mnemo {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

struct KvLayout {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim_k = 0;
  int32_t head_dim_v = 0;
  int32_t block_size = 16;  // token slots per block
  DType dtype = DType::F16;  // F16 or F32

  size_t element_bytes() const { return dtype == DType::F32 ? 4 : 2; }

  size_t k_head_elems() const { return static_cast<size_t>(block_size) * head_dim_k; }
  size_t v_head_elems() const { return static_cast<size_t>(block_size) * head_dim_v; }
  size_t layer_elems() const { return static_cast<size_t>(n_kv_heads) * (k_head_elems() + v_head_elems()); }
  size_t block_elems() const { return static_cast<size_t>(n_layers) * layer_elems(); }
  size_t block_bytes() const { return block_elems() * element_bytes(); }

  // Element offsets within a block of the [slot][dim] plane of one head.
  size_t k_offset(int32_t layer, int32_t head) const {
    return static_cast<size_t>(layer) * layer_elems() + static_cast<size_t>(head) * k_head_elems();
  }
  size_t v_offset(int32_t layer, int32_t head) const {
    return static_cast<size_t>(layer) * layer_elems() + static_cast<size_t>(n_kv_heads) * k_head_elems() +
           static_cast<size_t>(head) * v_head_elems();
  }
};

}  // namespace mnemo
