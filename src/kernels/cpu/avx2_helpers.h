// Small AVX2 building blocks shared by the AVX2 and AVX-512 kernel files. Include only from
// translation units compiled with at least -mavx2 -mfma -mf16c.
//
// Everything here is `static`: an `inline` function emitted out of line in an AVX translation
// unit could be the copy the linker keeps for every caller, including the scalar fallback on a
// CPU without AVX. For the same reason the SIMD files avoid util/fp16.h and std:: algorithms.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mnemo::kernels::simd {

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Round to nearest even, like util/fp16.h (not via _cvtss_sh, a C99 compound literal in clang).
static inline uint16_t float_to_half(float f) {
  const __m128i half = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT);
  return static_cast<uint16_t>(_mm_extract_epi16(half, 0));
}

// Eight F16 values (unaligned) as floats: exact.
static inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

static inline float hsum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

static inline int hsum(__m256i v) {
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(sum);
}

static inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 16 bytes of packed nibbles -> 32 bytes: the low nibbles first, then the high ones (the element
// order of the 32-element formats and of the K formats' 64-element chunks, per half).
static inline __m256i unpack_nibbles(const uint8_t* packed) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// 32 bits (little-endian, element j at bit j) -> 32 bytes, 0xff where the bit is set.
static inline __m256i expand_bits(const uint8_t* bits) {
  uint32_t word;
  std::memcpy(&word, bits, sizeof(word));
  // Byte j takes the source byte j / 8, then tests bit j % 8 of it.
  const __m256i byte_of_bit = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                 0x0303030303030303);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(word)), byte_of_bit);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// A 5-bit block's 32 levels (Q5_0, Q5_1): the nibbles of qs, plus 16 where qh's bit is set.
static inline __m256i q5_levels(const uint8_t* qs, const uint8_t* qh) {
  return _mm256_or_si256(unpack_nibbles(qs), _mm256_and_si256(expand_bits(qh), _mm256_set1_epi8(0x10)));
}

// Eight int32 sums of four products each, of unsigned bytes u (< 128 where pairs could
// saturate) and signed bytes s.
static inline __m256i dot_u8_i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// The same for two signed operands: |x| times y with x's sign. Exact unless y holds -128, which
// the activation quantisers never produce.
static inline __m256i dot_i8_i8(__m256i x, __m256i y) {
  return dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

}  // namespace mnemo::kernels::simd
