// Kernels that convert KV between the device's F16 and the element types of colder tiers
// (kv/kv_codec.h): Q8_0 and Q4_0 (llama.cpp's KV cache types: 32 elements of a row per block,
// one scale), Q4_1 (32 elements, a scale and a minimum: KIVI's per-token values) and 4-bit per
// channel (KIVI's keys: each column of a [rows][dim] plane over the rows, a scale and a minimum).
//
// Every variant produces the same bits as the scalar reference (kv_quant_scalar.cpp): the same
// float operations in the same order (no fused multiply-add), the same rounding (nearest even
// for Q8_0; truncation of x + 0.5 for the others, as llama.cpp's reference quantisers), so a
// tier's bytes do not depend on which machine wrote them. Cross-checked in
// tests/kernels/kv_quant_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/type_kernels.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels {

struct KvQuantKernels {
  // n F16 elements (n a multiple of 32) <-> n / 32 blocks.
  void (*q8_0_encode)(const uint16_t* src, BlockQ8_0* dst, int64_t n);
  void (*q8_0_decode)(const BlockQ8_0* src, uint16_t* dst, int64_t n);
  void (*q4_0_encode)(const uint16_t* src, BlockQ4_0* dst, int64_t n);
  void (*q4_0_decode)(const BlockQ4_0* src, uint16_t* dst, int64_t n);
  void (*q4_1_encode)(const uint16_t* src, BlockQ4_1* dst, int64_t n);
  void (*q4_1_decode)(const BlockQ4_1* src, uint16_t* dst, int64_t n);
  // A [rows][dim] F16 plane (rows even, dim a multiple of 8) <-> channel_q4_bytes(rows, dim):
  // dim F16 scales, dim F16 minimums, then (rows / 2) x dim bytes: byte [r / 2][c] holds column
  // c of row r (even) in its low nibble and of row r + 1 in its high one.
  void (*channel_q4_encode)(const uint16_t* src, uint8_t* dst, int32_t rows, int32_t dim);
  void (*channel_q4_decode)(const uint8_t* src, uint16_t* dst, int32_t rows, int32_t dim);
};

inline constexpr size_t channel_q4_bytes(int32_t rows, int32_t dim) {
  return static_cast<size_t>(dim) * 4 + static_cast<size_t>(rows / 2) * static_cast<size_t>(dim);
}

// The kernels of `isa` (AVX-512 machines run the AVX2 ones: these are memory-bound), or of the
// detected ISA.
const KvQuantKernels& kv_quant_kernels(Isa isa);
const KvQuantKernels& kv_quant_kernels();

namespace scalar {
extern const KvQuantKernels kKvQuant;
}
namespace avx2 {
extern const KvQuantKernels kKvQuant;
}

}  // namespace mnemo::kernels
