// The 256-element formats as the AVX2 K GEMM (gemm_avx2_k.cpp) reads them: Q8_K activation
// records, and per format one row's unit of 32 levels, its scales (RowScales: for the tiles'
// repacking; RowVectors: for the single-row path) and the bounds its integer sums rely on.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/k_scales.h"
#include "kernels/cpu/nonlinear_levels.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2::k_formats {

constexpr int kUnits = kQKK / 32;  // 8 units of 32 per super-block

// ---- Packed Q8_K activations, a record per row and super-block: the levels, the scale, and the
// sums of every 16 and every 32 levels as int16 pairs (of sub-blocks 2p and 2p + 1).
struct RecordQ8K {
  int8_t qs[kQKK];
  float d;
  int32_t pairs16[8];
  int32_t pairs32[4];
};

inline int32_t int16_pair(int low, int high) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(low)) |
                              (static_cast<uint32_t>(static_cast<uint16_t>(high)) << 16));
}

// ---- The formats: one row's unit of 32 levels (element order) and its scales.
//   scale[i]: the scale of unit i (kHalfScales: of the 16 elements i);
//   pairs[p]: int16 pairs meeting the activations' per-16 (kPairs16) or per-32 sums: the mins
//             (kAffine), or the scales again for the offset (kOffset);
//   d (and dmin) as floats.
struct RowScales {
  int32_t scale[16];
  int32_t pairs[8];
  float d = 0.0f, dmin = 0.0f;
};

inline __m256i nibbles(const uint8_t* packed, bool high) {
  const __m256i bytes = simd::load256(packed);
  return _mm256_and_si256(high ? _mm256_srli_epi16(bytes, 4) : bytes, _mm256_set1_epi8(0x0f));
}

// The two-bit plane of unit u (Q2_K, Q3_K): bits 2j..2j+1 of qs[32 * (u / 4) + l], j = u % 4.
inline __m256i two_bits(const uint8_t* qs, int u) {
  return _mm256_and_si256(_mm256_srli_epi16(simd::load256(qs + 32 * (u / 4)), 2 * (u % 4)), _mm256_set1_epi8(3));
}

inline void k_scale_pairs(const uint8_t* packed, uint16_t d, uint16_t dmin, RowScales& s) {
  uint8_t sc[8], m[8];
  unpack_k_scales(packed, sc, m);
  for (int u = 0; u < 8; ++u) s.scale[u] = sc[u];
  for (int p = 0; p < 4; ++p) s.pairs[p] = int16_pair(m[2 * p], m[2 * p + 1]);
  s.d = simd::half_to_float(d);
  s.dmin = simd::half_to_float(dmin);
}

// A row's super-block scales for the single-row path, as vectors: `scales` as int16 (per-32
// formats [s0..s7 | s0..s7], per-16 formats [s0..s7 | s8..s15]) and `pairs` as the int16 pairs
// that meet the activations' per-16 or per-32 sums (per-32: the low 128 bits, the rest zero).
struct RowVectors {
  __m256i scales, pairs;
  float d = 0.0f, dmin = 0.0f;
};

// Q4_K's and Q5_K's twelve scale bytes (k_scales.h) as words: scales 0-3 and mins 0-3 are the
// low six bits of bytes 0-3 and 4-7; scales and mins 4-7 take their low four bits from bytes
// 8-11 (low and high nibble) and their top two from the top bits of bytes 0-3 and 4-7.
inline void k_scale_vectors(const uint8_t* packed, uint16_t d, uint16_t dmin, RowVectors& v) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof(w));
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint64_t sc = (w[0] & low6) | static_cast<uint64_t>((w[2] & low4) | (((w[0] >> 6) & low2) << 4)) << 32;
  const uint64_t m = (w[1] & low6) | static_cast<uint64_t>(((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4)) << 32;
  v.scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
  v.pairs = _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(m))), 0);
  v.d = simd::half_to_float(d);
  v.dmin = simd::half_to_float(dmin);
}

struct Q4_KFormat {
  using Block = BlockQ4_K;
  static constexpr bool kSigned = false, kHalfScales = false, kAffine = true, kPairs16 = false;
  static constexpr int kOffset = 0;
  static constexpr int kMaxLevel = 15;  // of the levels as multiplied
  static __m256i levels(const Block& b, int u) { return nibbles(b.qs + 32 * (u / 2), u % 2 != 0); }
  static void scales(const Block& b, RowScales& s) { k_scale_pairs(b.scales, b.d, b.dmin, s); }
  static void vectors(const Block& b, RowVectors& v) { k_scale_vectors(b.scales, b.d, b.dmin, v); }
};

struct Q5_KFormat {
  using Block = BlockQ5_K;
  static constexpr bool kSigned = false, kHalfScales = false, kAffine = true, kPairs16 = false;
  static constexpr int kOffset = 0;
  static constexpr int kMaxLevel = 31;  // of the levels as multiplied
  // Unit u's fifth bits are bit u of qh[l].
  static __m256i levels(const Block& b, int u) {
    const __m256i fifth = _mm256_and_si256(_mm256_srli_epi16(simd::load256(b.qh), u), _mm256_set1_epi8(1));
    return _mm256_or_si256(nibbles(b.qs + 32 * (u / 2), u % 2 != 0), _mm256_slli_epi16(fifth, 4));
  }
  static void scales(const Block& b, RowScales& s) { k_scale_pairs(b.scales, b.d, b.dmin, s); }
  static void vectors(const Block& b, RowVectors& v) { k_scale_vectors(b.scales, b.d, b.dmin, v); }
};

struct Q6_KFormat {
  using Block = BlockQ6_K;
  static constexpr bool kSigned = false, kHalfScales = true, kAffine = false, kPairs16 = true;
  static constexpr int kOffset = 32;
  static constexpr int kMaxLevel = 63;  // of the levels as multiplied
  // Unit u = group g of half h (kernels' unpack_levels_q6): low 4 bits from ql, top 2 from qh.
  static __m256i levels(const Block& b, int u) {
    const int half = u / 4, g = u % 4;
    const __m256i low = nibbles(b.ql + 64 * half + 32 * (g & 1), g >= 2);
    const __m256i top = _mm256_and_si256(_mm256_srli_epi16(simd::load256(b.qh + 32 * half), 2 * g), _mm256_set1_epi8(3));
    return _mm256_or_si256(low, _mm256_slli_epi16(top, 4));
  }
  static void scales(const Block& b, RowScales& s) {
    for (int i = 0; i < 16; ++i) s.scale[i] = b.scales[i];
    for (int p = 0; p < 8; ++p) s.pairs[p] = int16_pair(b.scales[2 * p], b.scales[2 * p + 1]);
    s.d = simd::half_to_float(b.d);
  }
  // The sixteen int8 scales are both the scales and the pairs.
  static void vectors(const Block& b, RowVectors& v) {
    v.scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    v.pairs = v.scales;
    v.d = simd::half_to_float(b.d);
  }
};

struct Q3_KFormat {
  using Block = BlockQ3_K;
  static constexpr bool kSigned = false, kHalfScales = true, kAffine = false, kPairs16 = true;
  static constexpr int kOffset = 4;
  static constexpr int kMaxLevel = 7;  // of the levels as multiplied
  // q + 4: the two low bits, and 4 where the third bit (bit 4 * (u / 4) + u % 4 of hmask[l]) is set.
  static __m256i levels(const Block& b, int u) {
    const __m256i third = _mm256_and_si256(_mm256_srli_epi16(simd::load256(b.hmask), 4 * (u / 4) + u % 4), _mm256_set1_epi8(1));
    return _mm256_or_si256(two_bits(b.qs, u), _mm256_slli_epi16(third, 2));
  }
  static void scales(const Block& b, RowScales& s) {
    uint8_t codes[16];
    unpack_q3_k_scales(b.scales, codes);
    for (int i = 0; i < 16; ++i) s.scale[i] = codes[i] - 32;
    for (int p = 0; p < 8; ++p) s.pairs[p] = int16_pair(codes[2 * p] - 32, codes[2 * p + 1] - 32);
    s.d = simd::half_to_float(b.d);
  }
};

struct Q2_KFormat {
  using Block = BlockQ2_K;
  static constexpr bool kSigned = false, kHalfScales = true, kAffine = true, kPairs16 = true;
  static constexpr int kOffset = 0;
  static constexpr int kMaxLevel = 3;  // of the levels as multiplied
  static __m256i levels(const Block& b, int u) { return two_bits(b.qs, u); }
  static void scales(const Block& b, RowScales& s) {
    for (int i = 0; i < 16; ++i) s.scale[i] = b.scales[i] & 0x0f;
    for (int p = 0; p < 8; ++p) s.pairs[p] = int16_pair(b.scales[2 * p] >> 4, b.scales[2 * p + 1] >> 4);
    s.d = simd::half_to_float(b.d);
    s.dmin = simd::half_to_float(b.dmin);
  }
  // Scales in the low nibbles, mins in the high.
  static void vectors(const Block& b, RowVectors& v) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i low4 = _mm_set1_epi8(0x0f);
    v.scales = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, low4));
    v.pairs = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    v.d = simd::half_to_float(b.d);
    v.dmin = simd::half_to_float(b.dmin);
  }
};

struct IQ4_XSFormat {
  using Block = BlockIQ4_XS;
  static constexpr bool kSigned = true, kHalfScales = false, kAffine = false, kPairs16 = false;
  static constexpr int kOffset = 0;
  static constexpr int kMaxLevel = 127;  // of the levels as multiplied (|w|)
  static __m256i levels(const Block& b, int u) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlLevels)));
    return _mm256_shuffle_epi8(table, simd::unpack_nibbles(b.qs + 16 * u));
  }
  static void scales(const Block& b, RowScales& s) {
    for (int u = 0; u < 8; ++u) {
      s.scale[u] = (((b.scales_l[u / 2] >> (4 * (u % 2))) & 0x0f) | (((b.scales_h >> (2 * u)) & 3) << 4)) - 32;
    }
    s.d = simd::half_to_float(b.d);
  }
};

template <class Format>
constexpr int scale_count() {
  return Format::kHalfScales ? 16 : 8;
}
template <class Format>
constexpr int pair_count() {
  return Format::kAffine || Format::kOffset != 0 ? (Format::kPairs16 ? 8 : 4) : 0;
}
template <class Format>
const int32_t* activation_pairs(const RecordQ8K& a) {
  return Format::kPairs16 ? a.pairs16 : a.pairs32;
}

}  // namespace mnemo::kernels::avx2::k_formats
