// One 32-element block of activations quantised to Q8_0 in registers, shared by the Q8_0
// quantiser and the GEMM activation packers so that both give the same bits. Include only from
// translation units compiled with the AVX-512 flags; `static` for the reason in avx2_helpers.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx2_helpers.h"

namespace mnemo::kernels::avx512 {

// The block's levels as int32 (low: elements 0-15, high: 16-31) and its scale as a half.
struct Q8_0Levels {
  __m512i low, high;
  uint16_t d;
};

static inline Q8_0Levels quantize_q8_0_block(const float* src) {
  const __m512 v0 = _mm512_loadu_ps(src);
  const __m512 v1 = _mm512_loadu_ps(src + 16);
  const float max_abs = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const __m512 inverse = _mm512_set1_ps(max_abs != 0.0f ? 127.0f / max_abs : 0.0f);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, inverse), kRound),
          _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, inverse), kRound), simd::float_to_half(max_abs / 127.0f)};
}

// The 32 levels as bytes at qs, saturated (|level| <= 127 for finite inputs; a NaN makes a
// level INT_MIN, stored as -128).
static inline void store_q8_0_levels(const Q8_0Levels& levels, int8_t* qs) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtsepi32_epi8(levels.low));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtsepi32_epi8(levels.high));
}

// The sum of the levels as store_q8_0_levels stores them (saturated first: summing INT_MIN
// levels would overflow, and the products use the stored bytes).
static inline int32_t q8_0_stored_level_sum(const Q8_0Levels& levels) {
  const __m512i low = _mm512_set1_epi32(-128), high = _mm512_set1_epi32(127);
  const __m512i a = _mm512_max_epi32(_mm512_min_epi32(levels.low, high), low);
  const __m512i b = _mm512_max_epi32(_mm512_min_epi32(levels.high, high), low);
  return _mm512_reduce_add_epi32(_mm512_add_epi32(a, b));
}

}  // namespace mnemo::kernels::avx512
