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

}  // namespace mnemo
