// Byte layouts of the quantised block formats, identical to GGUF's so that weights are used in
// place from the mapped file. Scales are IEEE half (uint16_t bits) unless noted.
#pragma once

#include <cstdint>

namespace mnemo {

inline constexpr int kQK = 32;    // elements per block of the _0/_1 formats
inline constexpr int kQKK = 256;  // elements per super-block of the K formats
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // low nibbles: elements 0..15, high nibbles: 16..31
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // fifth bits, element j at bit j
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];  // 8 six-bit scales and 8 six-bit mins, packed
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];      // low 4 bits
  uint8_t qh[kQKK / 4];      // high 2 bits
  int8_t scales[kQKK / 16];  // 16 eight-bit scales
  uint16_t d;
};
// 2.625 bits a weight: 16 sub-blocks of 16, q in [0, 4), x = d * sc * q - dmin * m with 4-bit
// sc (low nibble of scales[s]) and m (high nibble).
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];  // element e: bits 2j..2j+1 of qs[32 * (e / 128) + e % 32], j = e % 128 / 32
  uint16_t d, dmin;
};
// 3.4375 bits a weight: 16 sub-blocks of 16, x = d * (sc - 32) * q, q in [-4, 4): the low two
// bits of q + 4 as Q2_K's, the third in hmask; sc 6-bit, packed in 12 bytes (k_scales.h).
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];  // element e: bit 4 * (e / 128) + e % 128 / 32 of hmask[e % 32]
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
// Non-linear 4-bit levels (the IQ4_NL table, kernels/cpu/nonlinear_levels.h): blocks of 32, a
// half scale, nibbles ordered as Q4_0's.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// IQ4_NL's levels in super-blocks of 256: 8 sub-blocks of 32 with 6-bit scales (minus 32), low
// nibbles in scales_l, top two bits in scales_h.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
// OCP microscaling FP4 (E2M1 levels, doubled to integers) with an E8M0 scale per 32: the
// 17-byte block is byte-aligned.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
// Activations for dot products with K-format weights: float scale, per-16 sums for the mins.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

}  // namespace mnemo
