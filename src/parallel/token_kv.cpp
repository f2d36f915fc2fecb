#include "parallel/token_kv.h"

#include <cstring>

namespace mnemo::parallel {
namespace {

// Calls copy(plane row of the slot, its bytes) for every K and V head row of the share's layers
// and heads, in the bytes' order.
template <class Pool, class Copy>
void for_each_row(Pool& kv, const KvShare& share, BlockId block, int32_t slot, Copy&& copy) {
  const KvLayout& layout = kv.layout();
  const size_t element = layout.element_bytes();
  const size_t k_row = static_cast<size_t>(layout.head_dim_k) * element;
  const size_t v_row = static_cast<size_t>(layout.head_dim_v) * element;
  for (int32_t layer = share.layer_begin; layer < share.layer_end; ++layer) {
    for (int32_t h = share.head_begin; h < share.head_end; ++h) {
      copy(static_cast<decltype(kv.block(0))>(kv.keys(block, layer, h)) + static_cast<size_t>(slot) * k_row, k_row);
    }
    for (int32_t h = share.head_begin; h < share.head_end; ++h) {
      copy(static_cast<decltype(kv.block(0))>(kv.values(block, layer, h)) + static_cast<size_t>(slot) * v_row, v_row);
    }
  }
}

template <class Pool, class Copy>
void for_each_row(Pool& kv, BlockId block, int32_t slot, Copy&& copy) {
  for_each_row(kv, KvShare{0, kv.layout().n_layers, 0, kv.layout().n_kv_heads}, block, slot, copy);
}

}  // namespace

void gather_token_share(const KvStorage& whole, const KvShare& share, BlockId block, int32_t slot, uint8_t* out) {
  for_each_row(whole, share, block, slot, [&](const uint8_t* row, size_t n) {
    std::memcpy(out, row, n);
    out += n;
  });
}

void scatter_token_share(KvStorage& whole, const KvShare& share, BlockId block, int32_t slot, const uint8_t* in) {
  for_each_row(whole, share, block, slot, [&](uint8_t* row, size_t n) {
    std::memcpy(row, in, n);
    in += n;
  });
}

uint32_t token_share_bytes(const KvLayout& whole, const KvShare& share) {
  return static_cast<uint32_t>(static_cast<size_t>(share.n_layers()) * static_cast<size_t>(share.n_heads()) *
                               static_cast<size_t>(whole.head_dim_k + whole.head_dim_v) * whole.element_bytes());
}

void gather_token_kv(const KvStorage& kv, BlockId block, int32_t slot, uint8_t* out) {
  for_each_row(kv, block, slot, [&](const uint8_t* row, size_t n) {
    std::memcpy(out, row, n);
    out += n;
  });
}

std::vector<std::pair<BlockId, int32_t>> written_slots(const std::vector<SequenceInput>& sequences, int32_t block_size) {
  std::vector<std::pair<BlockId, int32_t>> slots;
  for (const SequenceInput& seq : sequences) {
    for (const QueryRange& r : seq.ranges) {
      for (int32_t pos = r.start; pos < r.end(); ++pos) {
        slots.emplace_back(seq.block_table[static_cast<size_t>(pos / block_size)], pos % block_size);
      }
    }
  }
  return slots;
}

void scatter_token_kv(KvStorage& kv, BlockId block, int32_t slot, const uint8_t* in) {
  for_each_row(kv, block, slot, [&](uint8_t* row, size_t n) {
    std::memcpy(row, in, n);
    in += n;
  });
}

}  // namespace mnemo::parallel
