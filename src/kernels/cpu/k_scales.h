// The 12-byte `scales` field of Q4_K/Q5_K: eight 6-bit sub-block scales and eight 6-bit mins.
//   bytes 0-3:  scales 0-3 in the low 6 bits; the top 2 bits hold bits 4-5 of scales 4-7
//   bytes 4-7:  mins 0-3 in the low 6 bits;   the top 2 bits hold bits 4-5 of mins 4-7
//   bytes 8-11: low nibble: bits 0-3 of scales 4-7; high nibble: bits 0-3 of mins 4-7
//
// The functions are `static` on purpose: this header is also included by translation units
// compiled with AVX2/AVX-512 flags, and an `inline` function emitted there could be the copy the
// linker keeps for the scalar code too, which would then fault on older CPUs.
#pragma once

#include <cstdint>

namespace mnemo::kernels {

inline constexpr int kKSubBlocks = 8;

static inline void unpack_k_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63;
    mins[j] = packed[j + 4] & 63;
    scales[j + 4] = static_cast<uint8_t>((packed[j + 8] & 0x0f) | ((packed[j] >> 6) << 4));
    mins[j + 4] = static_cast<uint8_t>((packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4));
  }
}

// Inverse of unpack_k_scales; every value must be below 64.
static inline void pack_k_scales(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4));
  }
}

}  // namespace mnemo::kernels
