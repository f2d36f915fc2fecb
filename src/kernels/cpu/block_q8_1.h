// Q8_1: the activation format ggml pairs with the weight formats that carry a minimum (Q4_1,
// Q5_1). Q8_0 plus s = d * sum(qs), so that the minimum's contribution, m * sum(a), costs one
// multiplication per block. Not a GGUF weight type, hence not in tensor/quant_blocks.h.
#pragma once

#include <cstdint>

#include "tensor/quant_blocks.h"

namespace mnemo {

struct BlockQ8_1 {
  uint16_t d;  // half
  uint16_t s;  // half of d * sum(qs), with d before it was rounded to half (as ggml computes it)
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36);

}  // namespace mnemo
