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
#include <cstring>

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

// The same unpacking on whole words, for SIMD code: scale (min) j is byte j of `scales`
// (`mins`). Building the bytes in registers avoids reloading eight separately stored bytes as
// one word, which store-to-load forwarding cannot serve.
static inline void unpack_k_scales_words(const uint8_t* packed, uint64_t& scales, uint64_t& mins) {
  uint32_t words[3];
  std::memcpy(words, packed, sizeof(words));
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t scales_low = words[0] & kLow6;
  const uint32_t mins_low = words[1] & kLow6;
  const uint32_t scales_high = (words[2] & kLow4) | (((words[0] >> 6) & kLow2) << 4);
  const uint32_t mins_high = ((words[2] >> 4) & kLow4) | (((words[1] >> 6) & kLow2) << 4);
  scales = (static_cast<uint64_t>(scales_high) << 32) | scales_low;
  mins = (static_cast<uint64_t>(mins_high) << 32) | mins_low;
}

// Inverse of unpack_k_scales; every value must be below 64.
static inline void pack_k_scales(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4));
  }
}

// Q3_K's 12-byte `scales` field: sixteen 6-bit codes (the sub-block scales plus 32). Code s keeps
// its low 4 bits in byte s % 8 (the low nibble for s < 8, the high one after) and its top 2 bits
// in bits 2 * (s / 4) of byte 8 + s % 4.
static inline void unpack_q3_k_scales(const uint8_t* packed, uint8_t* codes) {
  for (int s = 0; s < 16; ++s) {
    const int low = (packed[s % 8] >> (4 * (s / 8))) & 0x0f;
    const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 0x03;
    codes[s] = static_cast<uint8_t>(low | (high << 4));
  }
}

// Inverse of unpack_q3_k_scales; every code must be below 64.
static inline void pack_q3_k_scales(const uint8_t* codes, uint8_t* packed) {
  std::memset(packed, 0, 12);
  for (int s = 0; s < 16; ++s) {
    packed[s % 8] = static_cast<uint8_t>(packed[s % 8] | ((codes[s] & 0x0f) << (4 * (s / 8))));
    packed[8 + s % 4] = static_cast<uint8_t>(packed[8 + s % 4] | ((codes[s] >> 4) << (2 * (s / 4))));
  }
}

}  // namespace mnemo::kernels
